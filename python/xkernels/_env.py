"""Process environment the SYCL runtime needs, set before the native library loads.

The intel-opencl-rt wheel's ICD file points at a placeholder path, so the OpenCL ICD
loader finds no CPU runtime by itself: we name the installed libintelocl.so in
OCL_ICD_FILENAMES (appending to a user's value, never replacing it). Compiled kernels
persist in the SYCL runtime's on-disk cache, under XKERNELS_CACHE_DIR (default: the
user's cache directory). Both must be in place before the first SYCL platform query.

AMX: on a CPU whose /proc/cpuinfo lists amx_bf16 and amx_tile we set CL_CONFIG_CPU_TARGET_ARCH=sapphirerapids
(unless the user set it, or XKERNELS_SYCL_AMX=0), so that the OpenCL CPU compiler, which reads it once when it
loads, can build the bf16 joint_matrix kernels (csrc/sycl/kernels/amx_gemm.hpp). Its default
("auto") follows the CPUID model number, which on some virtual machines names a CPU without AMX although
the AMX flags are set; building a joint_matrix kernel then aborts the process (../shared/SYCL_RUNTIME.md).
The setting is the compiler's target for every kernel of the process; the native side enables the AMX kernels
only when it is in force (xkernels.info()["sycl"]["amx"] says why or why not).

OpenMP spinning: torch's OpenMP (libgomp) workers spin after each parallel region (by default
300000 polls of the work flag), and so do the OpenCL CPU runtime's TBB workers after each SYCL
kernel; on a machine with few cores the two pools then fight for the cores when torch and
xkernels ops alternate. We set GOMP_SPINCOUNT=5000 (idle workers go to sleep after a short spin)
when the user has set neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY and no OpenMP runtime is loaded
yet, i.e. when xkernels is imported before torch. libgomp reads the variables once, when it loads
(with torch): after that, setting them has no effect, so we leave them alone and
openmp_spin_status() says so. (OMP_WAIT_POLICY=PASSIVE, which never spins, made torch's own ops
35 % to 18x slower on an idle machine; see docs/performance.md.)
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("XKERNELS_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xkernels"


def _lib_dirs() -> list[Path]:
    dirs = [Path(sys.prefix) / "lib"]
    base = Path(getattr(sys, "base_prefix", sys.prefix)) / "lib"
    if base not in dirs:
        dirs.append(base)
    return dirs


def find_opencl_cpu_runtime() -> Path | None:
    for d in _lib_dirs():
        cand = d / "libintelocl.so"
        if cand.exists():
            return cand
    return None


_OPENMP_LIBS = ("libgomp", "libiomp5", "libomp.so", "libomp-")


AMX_TARGET = "sapphirerapids"  # the OpenCL CPU compiler's name for the first CPUs with AMX


def cpu_flags() -> set[str]:
    """The CPU's flags as /proc/cpuinfo lists them (empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def _amx_target() -> str | None:
    """The CL_CONFIG_CPU_TARGET_ARCH to set for AMX, or None (not an AMX CPU, turned off, or the user's)."""
    if os.environ.get("XKERNELS_SYCL_AMX") == "0" or "CL_CONFIG_CPU_TARGET_ARCH" in os.environ:
        return None
    if _mapped("libintelocl"):  # the OpenCL CPU runtime loaded before us has read its target already
        return None
    return AMX_TARGET if {"amx_bf16", "amx_tile"} <= cpu_flags() else None


def _mapped(name: str) -> bool:
    """Whether a library whose path contains `name` is mapped into this process (Linux; else False)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return name in f.read()
    except OSError:
        return False


def openmp_runtime_loaded() -> bool:
    """Whether an OpenMP runtime (GNU, Intel or LLVM) is mapped into this process already
    (Linux: /proc/self/maps; elsewhere: whether torch was imported)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        return "torch" in sys.modules
    return any(lib in maps for lib in _OPENMP_LIBS)


OPENMP_SPIN_COUNT = "5000"  # torch's own ops unchanged at this count (docs/performance.md)

# Set by prepare(): "set" (we set GOMP_SPINCOUNT), "user" (the user set GOMP_SPINCOUNT or
# OMP_WAIT_POLICY: theirs stands), "too-late" (an OpenMP runtime was loaded before xkernels:
# its policy is fixed), or "" (not run).
_omp_spin_status = ""


def openmp_spin_status() -> str:
    """How the OpenMP spin was handled at import: 'set', 'user' or 'too-late' (see module doc)."""
    return _omp_spin_status


class CacheDirectoryWarning(RuntimeWarning):
    """The on-disk kernel cache cannot be used; kernels are cached in memory for this process only."""


def _unwritable_reason(d: Path) -> str | None:
    """Why `d` cannot hold cache entries (None when it can): created if missing, then probed
    with a real file, since os.access misjudges read-only mounts and root."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".xkernels-probe-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    return None


def prepare() -> dict[str, str]:
    """Sets the variables (only where the user has not); returns what it set.

    When the persistent kernel cache is on but its directory cannot be written, persistence is
    turned off (SYCL_CACHE_PERSISTENT=0) with a CacheDirectoryWarning: kernels are then compiled
    once per process and kept in memory, instead of failing or retrying the disk on every build."""
    global _omp_spin_status
    done: dict[str, str] = {}
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        _omp_spin_status = "user"
    elif openmp_runtime_loaded():
        _omp_spin_status = "too-late"
    else:
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT
        done["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT
        _omp_spin_status = "set"
    ocl = find_opencl_cpu_runtime()
    if ocl is not None:
        current = os.environ.get("OCL_ICD_FILENAMES", "")
        parts = [p for p in current.split(":") if p]
        if str(ocl) not in parts:
            os.environ["OCL_ICD_FILENAMES"] = ":".join(parts + [str(ocl)])
            done["OCL_ICD_FILENAMES"] = os.environ["OCL_ICD_FILENAMES"]
    target = _amx_target()
    if target is not None:
        os.environ["CL_CONFIG_CPU_TARGET_ARCH"] = target
        done["CL_CONFIG_CPU_TARGET_ARCH"] = target
    if "SYCL_CACHE_PERSISTENT" not in os.environ:
        os.environ["SYCL_CACHE_PERSISTENT"] = "1"
        done["SYCL_CACHE_PERSISTENT"] = "1"
    if "SYCL_CACHE_DIR" not in os.environ:
        d = cache_dir() / "sycl"
        os.environ["SYCL_CACHE_DIR"] = str(d)
        done["SYCL_CACHE_DIR"] = str(d)
    if os.environ.get("SYCL_CACHE_PERSISTENT") == "1":
        d = Path(os.environ["SYCL_CACHE_DIR"]).expanduser()
        why = _unwritable_reason(d)
        if why is not None:
            os.environ["SYCL_CACHE_PERSISTENT"] = "0"
            done["SYCL_CACHE_PERSISTENT"] = "0"
            warnings.warn(
                f"xkernels: the kernel cache directory {d} is not writable ({why}); compiled kernels are "
                "cached in memory for this process only. Set XKERNELS_CACHE_DIR to a writable directory "
                "to keep them across processes.",
                CacheDirectoryWarning,
                stacklevel=3,
            )
    # Unified Runtime's CUDA adapter, when built (docs/oneapi.md, "NVIDIA GPUs"): UR_ADAPTERS_SEARCH_PATH
    from . import _ur_cuda

    done.update(_ur_cuda.prepare())
    return done
