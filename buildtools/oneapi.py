"""Build planner for ahead-of-time (AOT) SYCL kernels with Intel's oneAPI DPC++ compiler, icpx.

Plain Python, no torch: setup.py and scripts/dev_build.sh call it before CMake, and the tests
call it the same way with fake toolchains laid out in temporary directories.

What it does, from the environment and the files it finds:

1. Finds icpx: ``$ONEAPI_ROOT/compiler/latest/bin/icpx`` (component layout, ``setvars.sh``),
   ``$ONEAPI_ROOT/bin/icpx`` (unified layout, ``<version>/oneapi-vars.sh``), else ``icpx`` on PATH.
2. Validates it: ``icpx --version`` runs and names a oneAPI version >= 2025.0, the installation has
   the SYCL headers and libsycl, the floating-point flags below are accepted, and its libsycl has
   the same major version (soname) as the SYCL runtime the rest of xkernels links. A broken
   installation raises OneAPIError naming what is missing and how to fix it.
3. Detects the oneAPI CUDA plugin (the Unified Runtime CUDA adapter, ``lib/libur_adapter_cuda.so``)
   and a CUDA toolkit (libdevice + ptxas, which icpx needs to generate NVIDIA code).
4. Chooses the device targets: ``XKERNELS_SYCL_TARGETS`` (comma-separated), by default ``spir64``
   (generic SPIR-V, finalised by the Intel GPU/CPU driver at load) plus ``nvptx64-nvidia-cuda``
   when the CUDA plugin and a CUDA toolkit are present; ``XKERNELS_SYCL_AOT_DEVICES`` (an ocloc
   device list such as ``pvc,bmg-g21``) adds native Intel GPU code (``spir64_gen``).
   ``XKERNELS_SYCL_CUDA_ARCH`` (default sm_75) is the PTX architecture of the NVIDIA image.
5. Produces the exact icpx command line of the launcher library: ONE compile-and-link of
   ``csrc/sycl/aot/launchers.cpp`` (standard SYCL 2020; the same translation unit AdaptiveCpp builds
   into libxkernels_acpp.so) into ``libxkernels_sycl_aot.so``, which exports the C interface of
   ``csrc/sycl/aot/abi.h`` (``xk_aot_library_v1``), plus a CMake fragment that cmake/OneAPIAOT.cmake
   turns into a custom command, run verbatim. The library is built beside the extension (_C's output
   directory), which loads it at run time and passes its DPC++ ``sycl::queue*`` to the launchers
   (hence the libsycl major-version check of step 2).

Floating point: the "host:" line of cmake/fp_flags.txt (no fast-math, no automatic FMA contraction),
read from that file, preceded by ``-fp-model=precise`` (icpx's default model is *fast*, and
``precise`` alone would allow contraction, hence the FPFlags list after it) and followed by
``-foffload-fp32-prec-div -foffload-fp32-prec-sqrt`` (correctly rounded fp32 division and square
root in device code: SPIR-V and CUDA device code otherwise may use approximations).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# --------------------------------------------------------------------------- constants

MIN_ONEAPI_VERSION = (2025, 0)  # the SYCL runtime generation the extension uses (free-function kernels in its
# run-time compiler); the launcher library shares that runtime
DEFAULT_CUDA_ARCH = "sm_75"  # lowest architecture CUDA 13 still compiles for; PTX runs on newer GPUs
LIBRARY_NAME = "libxkernels_sycl_aot.so"
ICPX_FP_MODEL = "-fp-model=precise"
CUDA_TRIPLE = "nvptx64-nvidia-cuda"
GENERIC_TARGETS = ("spir64", "spir64_x86_64", "spir64_gen", CUDA_TRIPLE)
TARGET_ALIASES = {
    "spir64-unknown-unknown": "spir64",
    "spir64_x86_64-unknown-unknown": "spir64_x86_64",
    "spir64_gen-unknown-unknown": "spir64_gen",
}
DEFAULT_SYSTEM_CUDA_DIRS = ("/usr/local/cuda",)
OFF_HINT = "set XKERNELS_SYCL_AOT=off to build without ahead-of-time kernels (they are then compiled at run time)"


class OneAPIError(RuntimeError):
    """The oneAPI toolchain was asked for or found, but cannot be used as configured."""


Runner = Callable[[Sequence[str]], "tuple[int, str]"]


def run_command(argv: Sequence[str], timeout: float = 120.0) -> tuple[int, str]:
    """Runs argv; returns (exit code, stdout+stderr). OSError/timeouts become code 127/124."""
    try:
        p = subprocess.run(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False
        )
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(timed out after {timeout:.0f} s)"
    except OSError as e:
        return 127, f"{type(e).__name__}: {e}"


def _tail(text: str, lines: int = 12) -> str:
    rows = [r for r in text.strip().splitlines() if r.strip()]
    return "\n".join("    " + r for r in rows[-lines:]) or "    (no output)"


# --------------------------------------------------------------------------- toolchain discovery


@dataclasses.dataclass(frozen=True)
class Toolchain:
    icpx: Path
    layout: str  # "component" | "unified" | "PATH"
    oneapi_root: Path | None
    prefix: Path  # the directory holding bin/icpx, include/sycl, lib/libsycl.so
    version: tuple[int, int, int]
    version_line: str
    libsycl_major: int | None
    cuda_adapter: Path | None
    ocloc: Path | None
    opencl_aot: Path | None

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def lib_dir(self) -> Path:
        return self.prefix / "lib"


def _which(name: str, env: Mapping[str, str]) -> Path | None:
    found = shutil.which(name, path=env.get("PATH", ""))
    return Path(found) if found else None


def find_icpx(env: Mapping[str, str]) -> tuple[Path, str, Path | None] | None:
    """(icpx path, layout, ONEAPI_ROOT) or None when neither ONEAPI_ROOT nor PATH has one.

    With ONEAPI_ROOT set, icpx must be under it (raises otherwise): a stray icpx on PATH from
    another installation would silently build against the wrong runtime."""
    root_s = env.get("ONEAPI_ROOT", "").strip()
    if root_s:
        root = Path(root_s).expanduser()
        if not root.is_dir():
            raise OneAPIError(
                f"ONEAPI_ROOT={root_s} is not a directory. Point it at a oneAPI installation "
                "(source /opt/intel/oneapi/setvars.sh, or <install>/<version>/oneapi-vars.sh), unset it, or " + OFF_HINT
            )
        candidates = [(root / "compiler" / "latest" / "bin" / "icpx", "component"), (root / "bin" / "icpx", "unified")]
        for path, layout in candidates:
            if os.path.lexists(path):
                return path, layout, root
        legacy = root / "compiler" / "latest" / "linux" / "bin" / "icpx"
        if legacy.exists():
            raise OneAPIError(
                f"ONEAPI_ROOT={root} is a pre-2024 oneAPI installation ({legacy}); xkernels needs oneAPI "
                f">= {MIN_ONEAPI_VERSION[0]}.{MIN_ONEAPI_VERSION[1]} (free-function kernels). Install a newer "
                "oneAPI Base Toolkit, or " + OFF_HINT
            )
        looked = ", ".join(str(p) for p, _ in candidates)
        raise OneAPIError(
            f"ONEAPI_ROOT={root} has no icpx (looked for {looked}). Install the Intel oneAPI DPC++/C++ "
            "Compiler there, point ONEAPI_ROOT at the installation that has it, or " + OFF_HINT
        )
    found = _which("icpx", env)
    if found is None:
        return None
    return found, "PATH", None


_VERSION_RE = re.compile(r"(?:DPC\+\+/C\+\+ Compiler|icpx)[^\n0-9]*(\d{4})\.(\d+)(?:\.(\d+))?")


def parse_icpx_version(text: str) -> tuple[tuple[int, int, int], str] | None:
    """((year, minor, patch), first line) from `icpx --version` output, or None."""
    m = _VERSION_RE.search(text)
    if not m:
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)), line


def libsycl_major(lib_dir: Path) -> int | None:
    """Major version from the libsycl soname files in lib_dir (libsycl.so.8 -> 8), or None."""
    majors = []
    for p in lib_dir.glob("libsycl.so.*"):
        m = re.fullmatch(r"libsycl\.so\.(\d+)(?:\.\d+)*", p.name)
        if m:
            majors.append(int(m.group(1)))
    return max(majors) if majors else None


def validate_toolchain(icpx: Path, layout: str, root: Path | None, run: Runner = run_command) -> Toolchain:
    """Checks that icpx runs and that its installation is complete; raises OneAPIError naming what is wrong."""
    where = f"ONEAPI_ROOT={root}" if root else "PATH"
    if not icpx.exists():
        raise OneAPIError(
            f"{icpx} (found through {where}) is a broken link: its target {os.path.realpath(icpx)} "
            "is missing. Repair or reinstall the oneAPI compiler, or " + OFF_HINT
        )
    if not os.access(icpx, os.X_OK) or icpx.is_dir():
        raise OneAPIError(
            f"{icpx} (found through {where}) is not an executable file. Check the installation's "
            f"permissions (chmod +x {icpx}) or reinstall the compiler, or " + OFF_HINT
        )
    code, out = run([str(icpx), "--version"])
    if code != 0:
        raise OneAPIError(
            f"`{icpx} --version` failed with exit code {code}:\n{_tail(out)}\n"
            "The compiler cannot run as installed (missing shared libraries? run "
            "`source <oneapi>/setvars.sh` first). Fix the installation, or " + OFF_HINT
        )
    parsed = parse_icpx_version(out)
    if parsed is None:
        raise OneAPIError(
            f"`{icpx} --version` printed no Intel oneAPI DPC++/C++ Compiler version:\n{_tail(out)}\n"
            "xkernels' ahead-of-time build needs Intel's icpx; " + OFF_HINT
        )
    version, line = parsed
    if version[:2] < MIN_ONEAPI_VERSION:
        raise OneAPIError(
            f"{icpx} is oneAPI {'.'.join(map(str, version))}; xkernels needs >= "
            f"{MIN_ONEAPI_VERSION[0]}.{MIN_ONEAPI_VERSION[1]} (free-function kernels). Install a newer "
            "oneAPI, or " + OFF_HINT
        )
    prefix = icpx.resolve().parent.parent if layout == "PATH" else icpx.parent.parent
    missing = [
        str(p) for p in (prefix / "include" / "sycl" / "sycl.hpp", prefix / "lib" / "libsycl.so") if not p.exists()
    ]
    if missing:
        raise OneAPIError(
            f"The oneAPI installation at {prefix} (icpx {'.'.join(map(str, version))}) is incomplete: "
            f"missing {', '.join(missing)}. Reinstall the DPC++/C++ compiler component, or " + OFF_HINT
        )
    adapters = sorted(prefix.joinpath("lib").glob("libur_adapter_cuda.so*"))
    ocloc = prefix / "bin" / "ocloc"
    opencl_aot = prefix / "bin" / "opencl-aot"
    return Toolchain(
        icpx=icpx,
        layout=layout,
        oneapi_root=root,
        prefix=prefix,
        version=version,
        version_line=line,
        libsycl_major=libsycl_major(prefix / "lib"),
        cuda_adapter=adapters[0] if adapters else None,
        ocloc=ocloc if ocloc.exists() else None,
        opencl_aot=opencl_aot if opencl_aot.exists() else None,
    )


def probe_fp_flags(tc: Toolchain, fp_flags: Sequence[str], run: Runner = run_command) -> None:
    """icpx must accept the floating-point flags (the offload precision flags arrived in 2025.1)."""
    argv = [str(tc.icpx), "-fsycl", *fp_flags, "-fsyntax-only", "-x", "c++", os.devnull]
    code, out = run(argv)
    if code != 0:
        raise OneAPIError(
            f"icpx {tc.version_str} rejected xkernels' floating-point flags ({shlex.join(fp_flags)}):\n{_tail(out)}\n"
            "Without them IEEE division/sqrt and no-fast-math cannot be guaranteed in device code. "
            "-foffload-fp32-prec-div/-sqrt need oneAPI >= 2025.1: upgrade the compiler, or " + OFF_HINT
        )


def find_cuda_toolkit(env: Mapping[str, str], system_dirs: Sequence[str] = DEFAULT_SYSTEM_CUDA_DIRS) -> Path | None:
    """A CUDA toolkit with libdevice and ptxas (what icpx needs for nvptx64): CUDA_PATH, CUDA_HOME, nvcc's, system."""
    cands: list[Path] = []
    for var in ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"):
        if env.get(var):
            cands.append(Path(env[var]))
    nvcc = _which("nvcc", env)
    if nvcc is not None:
        cands.append(nvcc.resolve().parent.parent)
    cands += [Path(d) for d in system_dirs]
    for c in cands:
        if (c / "nvvm" / "libdevice" / "libdevice.10.bc").exists() and (c / "bin" / "ptxas").exists():
            return c
    return None


def read_fp_flags(repo_root: Path, which: str = "host") -> list[str]:
    """A flag list of cmake/fp_flags.txt ("host:", "sycl:", "nvcc:"): one policy, written once."""
    text = (repo_root / "cmake" / "fp_flags.txt").read_text()
    m = re.search(rf"^{re.escape(which)}:[ \t]*(.*)$", text, re.MULTILINE)
    if not m or not m.group(1).split():
        raise OneAPIError(
            f"cmake/fp_flags.txt has no '{which}:' line; the AOT build cannot pin the floating-point policy"
        )
    return m.group(1).split()


def icpx_fp_flags(repo_root: Path) -> list[str]:
    """-fp-model=precise, then the host flags (icpx compiles host and device code in one), then the device-only
    flags of the "sycl:" line (correctly rounded fp32 division and sqrt)."""
    host = read_fp_flags(repo_root, "host")
    return [ICPX_FP_MODEL, *host, *(f for f in read_fp_flags(repo_root, "sycl") if f not in host)]


# --------------------------------------------------------------------------- targets


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    targets: tuple[str, ...]
    backend_options: tuple[str, ...]  # -Xsycl-target-backend=<T> <opts> pairs (compile and link lines)
    provider_spec: str  # what the kernel provider parses: "spir64 spir64_gen:pvc,bmg-g21 nvptx64-nvidia-cuda:sm_75"
    cuda_toolkit: Path | None
    notes: tuple[str, ...]
    source: str  # "default" or "XKERNELS_SYCL_TARGETS"


_ARCH_TARGET_RE = re.compile(r"^(intel_gpu_[a-z0-9_]+|nvidia_gpu_sm_\d+a?)$")
_CUDA_ARCH_RE = re.compile(r"^sm_\d{2,3}a?$")
_OCLOC_DEVICE_RE = re.compile(r"^[A-Za-z0-9_.\-:]+$")


def _is_nvidia(target: str) -> bool:
    return target == CUDA_TRIPLE or target.startswith("nvidia_gpu_")


def resolve_targets(env: Mapping[str, str], tc: Toolchain, cuda_toolkit: Path | None) -> TargetConfig:
    notes: list[str] = []
    raw = env.get("XKERNELS_SYCL_TARGETS", "").strip()
    devices_raw = env.get("XKERNELS_SYCL_AOT_DEVICES", "").strip()
    devices = [d.strip() for d in devices_raw.split(",") if d.strip()]
    for d in devices:
        if not _OCLOC_DEVICE_RE.match(d):
            raise OneAPIError(
                f"XKERNELS_SYCL_AOT_DEVICES: {d!r} is not an ocloc device name (e.g. pvc, bmg-g21, "
                "dg2-g10, 12.60.7); see `ocloc compile --help`"
            )
    targets: list[str] = []
    if raw:
        source = "XKERNELS_SYCL_TARGETS"
        for t in (x.strip() for x in raw.split(",")):
            if not t:
                continue
            t = TARGET_ALIASES.get(t, t)
            if t not in GENERIC_TARGETS and not _ARCH_TARGET_RE.match(t):
                raise OneAPIError(
                    f"XKERNELS_SYCL_TARGETS: unknown target {t!r}. Use a comma-separated list of "
                    f"{', '.join(GENERIC_TARGETS)}, intel_gpu_<arch> or nvidia_gpu_sm_<NN> (got {raw!r})"
                )
            if t not in targets:
                targets.append(t)
        if not targets:
            raise OneAPIError(f"XKERNELS_SYCL_TARGETS={raw!r} names no target")
        if devices and "spir64_gen" not in targets:
            targets.append("spir64_gen")
            notes.append("spir64_gen added because XKERNELS_SYCL_AOT_DEVICES is set")
        for t in targets:
            if _is_nvidia(t):
                if tc.cuda_adapter is None:
                    raise OneAPIError(
                        f"XKERNELS_SYCL_TARGETS asks for {t} but the oneAPI CUDA plugin is not installed (no "
                        f"libur_adapter_cuda.so in {tc.lib_dir}). Install 'oneAPI for NVIDIA GPUs' for icpx "
                        f"{tc.version_str}, or drop {t} from XKERNELS_SYCL_TARGETS"
                    )
                if cuda_toolkit is None:
                    raise OneAPIError(
                        f"XKERNELS_SYCL_TARGETS asks for {t} but no CUDA toolkit was found (icpx needs its "
                        "nvvm/libdevice/libdevice.10.bc and bin/ptxas). Set CUDA_PATH to the toolkit, or drop "
                        f"{t} from XKERNELS_SYCL_TARGETS"
                    )
    else:
        source = "default"
        targets = ["spir64"]
        if devices:
            targets.append("spir64_gen")
        if tc.cuda_adapter is not None:
            if cuda_toolkit is not None:
                targets.append(CUDA_TRIPLE)
            else:
                notes.append(
                    f"CUDA plugin found ({tc.cuda_adapter.name}) but no CUDA toolkit (libdevice, ptxas): "
                    "no NVIDIA image; set CUDA_PATH to build one"
                )
    if "spir64_gen" in targets:
        if not devices:
            raise OneAPIError(
                "spir64_gen (native Intel GPU code) needs a device list: set "
                "XKERNELS_SYCL_AOT_DEVICES, e.g. XKERNELS_SYCL_AOT_DEVICES=pvc,bmg-g21"
            )
        if tc.ocloc is None:
            raise OneAPIError(
                f"spir64_gen needs Intel's offline compiler ocloc, which is not in {tc.prefix / 'bin'}. "
                "Install the oneAPI GPU offline compiler (or the GPU driver's ocloc package) or unset "
                "XKERNELS_SYCL_AOT_DEVICES"
            )
    if "spir64_x86_64" in targets and tc.opencl_aot is None:
        raise OneAPIError(
            f"spir64_x86_64 (x86-64 CPU code) needs opencl-aot, which is not in {tc.prefix / 'bin'}. "
            "Install the oneAPI CPU runtime's AOT compiler, or drop spir64_x86_64 from "
            "XKERNELS_SYCL_TARGETS"
        )
    cuda_arch = env.get("XKERNELS_SYCL_CUDA_ARCH", "").strip() or DEFAULT_CUDA_ARCH
    if not _CUDA_ARCH_RE.match(cuda_arch):
        raise OneAPIError(f"XKERNELS_SYCL_CUDA_ARCH={cuda_arch!r} is not an NVIDIA architecture like sm_80 or sm_90")
    if env.get("XKERNELS_SYCL_CUDA_ARCH", "").strip() and CUDA_TRIPLE not in targets:
        notes.append(f"XKERNELS_SYCL_CUDA_ARCH={cuda_arch} is ignored: no {CUDA_TRIPLE} image is built")
    backend: list[str] = []
    spec: list[str] = []
    for t in targets:
        if t == "spir64_gen":
            backend += ["-Xsycl-target-backend=spir64_gen", f"-device {','.join(devices)}"]
            spec.append(f"spir64_gen:{','.join(devices)}")
        elif t == CUDA_TRIPLE:
            backend += [f"-Xsycl-target-backend={CUDA_TRIPLE}", f"--offload-arch={cuda_arch}"]
            spec.append(f"{CUDA_TRIPLE}:{cuda_arch}")
        else:
            spec.append(t)
    return TargetConfig(
        tuple(targets),
        tuple(backend),
        " ".join(spec),
        cuda_toolkit if any(_is_nvidia(t) for t in targets) else None,
        tuple(notes),
        source,
    )


# --------------------------------------------------------------------------- the launcher library

# The ahead-of-time launchers: one standard-SYCL translation unit that instantiates a parallel_for per
# (kernel, element type) of every kernel table (csrc/sycl/kernels/tables.hpp) behind the C interface of
# csrc/sycl/aot/abi.h (xk_aot_library_v1). AdaptiveCpp compiles the same file (cmake/AcppBackend.cmake).
LAUNCHERS = Path("csrc") / "sycl" / "aot" / "launchers.cpp"

# XK_AOT_SUB_GROUP is the sub-group size the library reports in its device record
# (xk_aot_library.device.sub_group_sizes) for its own default queue. No kernel depends on it for
# correctness: outside the run-time compiler a kernel's S lanes are its work-group's work-items and
# xk::lanes_sum reduces over the work-group (kernels/common.hpp), so any sub-group width computes the
# same. 16 is a width every Intel device supports (Intel GPUs: 8/16 or 16/32; the OpenCL CPU runtime:
# 4..64) and the one the host's lane choice uses for 4- and 2-byte types; an NVIDIA-only build reports
# the warp, 32. The extension, which passes its own DPC++ queue to the launchers, should take the
# sizes from that queue's device rather than from this record.
INTEL_SUB_GROUP = 16
NVIDIA_SUB_GROUP = 32


def aot_sub_group(targets: Sequence[str]) -> int:
    """XK_AOT_SUB_GROUP for a target list: 16 when any Intel (SPIR-V / Intel GPU) target is built, 32 for
    NVIDIA alone."""
    return INTEL_SUB_GROUP if any(not _is_nvidia(t) for t in targets) else NVIDIA_SUB_GROUP


def _cpp_str(s: str) -> str:
    """s as a C++ string literal (the value of a -D definition that must expand to a string)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    output: Path
    depends: tuple[Path, ...]
    comment: str

    def shell(self) -> str:
        return shlex.join(self.argv)


@dataclasses.dataclass
class Plan:
    toolchain: Toolchain
    targets: TargetConfig
    fp_flags: list[str]
    source: Path  # csrc/sycl/aot/launchers.cpp
    sub_group: int  # XK_AOT_SUB_GROUP
    implementation: str  # XK_AOT_IMPLEMENTATION (unquoted)
    steps: list[Step]
    library: Path
    build_dir: Path
    host_sycl_prefix: str
    host_libsycl_major: int | None
    sycl_root_override: str  # non-empty: no SYCL runtime next to Python; build the host code against oneAPI's
    notes: list[str]

    def summary(self) -> str:
        tc, t = self.toolchain, self.targets
        where = f"ONEAPI_ROOT={tc.oneapi_root}, {tc.layout} layout" if tc.oneapi_root else "found on PATH"
        host = (
            f"libsycl.so.{self.host_libsycl_major} at {self.host_sycl_prefix}"
            if self.host_sycl_prefix
            else f"none next to Python; host code builds against {tc.prefix}"
        )
        libsycl = f"libsycl.so.{tc.libsycl_major}" if tc.libsycl_major else "libsycl (version unknown)"
        cuda_plugin = tc.cuda_adapter or f"not installed (no libur_adapter_cuda.so in {tc.lib_dir})"
        lines = [
            "xkernels: oneAPI ahead-of-time SYCL kernels",
            f"  compiler     : {tc.icpx} ({tc.version_line or 'icpx ' + tc.version_str}; {where})",
            f"  libsycl      : oneAPI {libsycl}; runtime xkernels links: {host}",
            f"  CUDA plugin  : {cuda_plugin}",
            f"  CUDA toolkit : {t.cuda_toolkit or 'not used'}",
            f"  targets      : {','.join(t.targets)} ({t.source})",
            f"  backend opts : {shlex.join(t.backend_options) if t.backend_options else '(none)'}",
            f"  FP flags     : {shlex.join(self.fp_flags)}",
            f"  launchers    : {self.source} (every kernel table; abi.h xk_aot_library_v1), sub-group {self.sub_group}",
            f"  library      : {self.library} (loaded by the extension at run time)",
        ]
        lines += [f"  note         : {n}" for n in (*t.notes, *self.notes)]
        return "\n".join(lines)

    def commands(self) -> list[str]:
        return [s.shell() for s in self.steps]

    def write(self) -> Path:
        """Writes the CMake fragment; returns its path."""
        self.build_dir.mkdir(parents=True, exist_ok=True)
        frag = self.build_dir / "oneapi_aot_plan.cmake"
        text = self.cmake_fragment()
        if not frag.exists() or frag.read_text() != text:
            frag.write_text(text)
        return frag

    def cmake_fragment(self) -> str:
        out = [
            "# Generated by buildtools/oneapi.py: the exact icpx commands of the AOT launcher library.",
            "# Read by cmake/OneAPIAOT.cmake. Do not edit; re-run the build instead.",
        ]

        def setv(name: str, values: Sequence[str]) -> None:
            out.append(f"set({name} {' '.join(_cmake_quote(v) for v in values)})")

        setv("XK_SYCL_AOT_COMPILER", [str(self.toolchain.icpx)])
        setv("XK_SYCL_AOT_COMPILER_VERSION", [self.toolchain.version_str])
        setv("XK_SYCL_AOT_TARGET_SPEC", [self.targets.provider_spec])
        setv("XK_SYCL_AOT_SUB_GROUP", [str(self.sub_group)])
        setv("XK_SYCL_AOT_LIBRARY", [str(self.library)])
        setv("XK_SYCL_AOT_STEP_COUNT", [str(len(self.steps))])
        for i, s in enumerate(self.steps):
            setv(f"XK_SYCL_AOT_STEP_{i}_OUTPUT", [str(s.output)])
            setv(f"XK_SYCL_AOT_STEP_{i}_COMMAND", list(s.argv))
            setv(f"XK_SYCL_AOT_STEP_{i}_DEPENDS", [str(d) for d in s.depends])
            setv(f"XK_SYCL_AOT_STEP_{i}_COMMENT", [s.comment])
        return "\n".join(out) + "\n"

    def cmake_args(self, fragment: Path) -> list[str]:
        args = [f"-DXKERNELS_SYCL_AOT_PLAN={fragment}", "-DXKERNELS_SYCL_AOT_REASON="]
        if self.sycl_root_override:
            args.append(f"-DXKERNELS_SYCL_ROOT={self.sycl_root_override}")
        return args


def _cmake_quote(s: str) -> str:
    if ";" in s:
        raise OneAPIError(f"a build argument contains ';', which CMake would split: {s!r}")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def make_plan(
    env: Mapping[str, str],
    repo_root: Path,
    build_dir: Path,
    library_dir: Path,
    host_sycl_prefix: str,
    run: Runner = run_command,
    system_cuda_dirs: Sequence[str] = DEFAULT_SYSTEM_CUDA_DIRS,
) -> Plan | None:
    """The plan, or None when no oneAPI toolchain is present. Raises OneAPIError for a broken one."""
    found = find_icpx(env)
    if found is None:
        return None
    tc = validate_toolchain(*found, run=run)
    fp = icpx_fp_flags(repo_root)
    probe_fp_flags(tc, fp, run=run)
    notes: list[str] = []
    host_major = libsycl_major(Path(host_sycl_prefix) / "lib") if host_sycl_prefix else None
    sycl_root_override = ""
    if host_sycl_prefix:
        if tc.libsycl_major is not None and host_major is not None and tc.libsycl_major != host_major:
            raise OneAPIError(
                f"icpx {tc.version_str} at {tc.prefix} builds against libsycl.so.{tc.libsycl_major}, but the SYCL "
                f"runtime xkernels links ({host_sycl_prefix}) is libsycl.so.{host_major}; one process cannot use "
                "both (the extension hands its sycl::queue to the launcher library). Install the matching runtime "
                f"wheels (pip install 'intel-sycl-rt=={tc.version[0]}.{tc.version[1]}.*' "
                f"'intel-cmplr-lib-ur=={tc.version[0]}.{tc.version[1]}.*'), "
                "use a oneAPI release with the same libsycl major version, or " + OFF_HINT
            )
        if tc.libsycl_major is None or host_major is None:
            notes.append(
                "libsycl major versions could not both be read; make sure the oneAPI release and the "
                "intel-sycl-rt wheel match"
            )
    else:
        sycl_root_override = str(tc.prefix)
        notes.append(
            f"no SYCL runtime next to Python: the host code builds against {tc.prefix} (source setvars.sh "
            "before importing xkernels, or pip install the matching intel-sycl-rt)"
        )
    tgt = resolve_targets(env, tc, find_cuda_toolkit(env, system_cuda_dirs))

    sycl_dir = repo_root / "csrc" / "sycl"
    source = repo_root / LAUNCHERS
    if not source.is_file():
        raise OneAPIError(
            f"{source} is missing: the ahead-of-time launcher library is built from it. Restore it "
            "(git checkout -- csrc/sycl/aot), or " + OFF_HINT
        )
    kernels_dir = sycl_dir / "kernels"
    depends = (source, *sorted(source.parent.glob("*.h")), *sorted(kernels_dir.glob("*.hpp")))
    library = library_dir / LIBRARY_NAME
    sub_group = aot_sub_group(tgt.targets)
    implementation = f"icpx {tc.version_str} ({','.join(tgt.targets)})"
    flags_str = shlex.join(fp)
    cuda_path = [f"--cuda-path={tgt.cuda_toolkit}"] if tgt.cuda_toolkit else []
    rpath = ["$ORIGIN", "$ORIGIN/../../.."]
    if host_sycl_prefix:
        rpath.append(str(Path(host_sycl_prefix) / "lib"))
    rpath.append(str(tc.lib_dir))
    # One compile-and-link: the backend options bind the NVPTX architecture and the ocloc devices; the
    # library exports only xk_aot_library_v1 (launchers.cpp marks it visible).
    argv = [
        str(tc.icpx),
        "-fsycl",
        f"-fsycl-targets={','.join(tgt.targets)}",
        *tgt.backend_options,
        *cuda_path,
        "-std=c++17",
        "-O2",
        "-fPIC",
        *fp,
        "-fvisibility=hidden",
        f"-DXK_AOT_SUB_GROUP={sub_group}",
        f"-DXK_AOT_IMPLEMENTATION={_cpp_str(implementation)}",
        f"-DXK_AOT_FLAGS={_cpp_str(flags_str)}",
        f"-I{sycl_dir}",
        "-shared",
        f"-Wl,-soname,{LIBRARY_NAME}",
        f"-Wl,-rpath,{':'.join(rpath)}",
        "-o",
        str(library),
        str(source),
    ]
    steps = [
        Step(
            tuple(argv),
            library,
            tuple(depends),
            f"icpx: ahead-of-time SYCL launchers ({LAUNCHERS.name}) -> {LIBRARY_NAME} for {','.join(tgt.targets)}",
        )
    ]
    return Plan(
        tc,
        tgt,
        fp,
        source,
        sub_group,
        implementation,
        steps,
        library,
        build_dir,
        host_sycl_prefix,
        host_major,
        sycl_root_override,
        notes,
    )


# --------------------------------------------------------------------------- entry points


@dataclasses.dataclass
class SetupResult:
    plan: Plan | None
    cmake_args: list[str]
    summary: str


def configure_for_setup(
    env: Mapping[str, str],
    repo_root: Path,
    build_dir: Path,
    library_dir: Path,
    host_sycl_prefix: str,
    run: Runner = run_command,
    system_cuda_dirs: Sequence[str] = DEFAULT_SYSTEM_CUDA_DIRS,
) -> SetupResult:
    """What setup.py and scripts/dev_build.sh call: plans (when a toolchain is there), writes the
    CMake fragment, and returns the CMake arguments and the summary to print."""
    mode = env.get("XKERNELS_SYCL_AOT", "auto").strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise OneAPIError(f"XKERNELS_SYCL_AOT must be auto, on or off, got {env.get('XKERNELS_SYCL_AOT')!r}")

    def off(reason: str) -> SetupResult:
        return SetupResult(
            None,
            ["-DXKERNELS_SYCL_AOT_PLAN=", f"-DXKERNELS_SYCL_AOT_REASON={reason}"],
            f"xkernels: oneAPI ahead-of-time SYCL kernels: OFF — {reason}",
        )

    if mode == "off":
        return off("disabled (XKERNELS_SYCL_AOT=off); kernels are compiled at run time")
    if env.get("XKERNELS_SYCL", "auto").strip().lower() == "off":
        if mode == "on":
            raise OneAPIError("XKERNELS_SYCL_AOT=on but the SYCL backend is disabled (XKERNELS_SYCL=off)")
        return off("the SYCL backend is disabled (XKERNELS_SYCL=off)")
    plan = make_plan(
        env, repo_root, build_dir, library_dir, host_sycl_prefix, run=run, system_cuda_dirs=system_cuda_dirs
    )
    if plan is None:
        if mode == "on":
            raise OneAPIError(
                "XKERNELS_SYCL_AOT=on but no oneAPI compiler was found: set ONEAPI_ROOT (source "
                "<oneapi>/setvars.sh) or put icpx on PATH"
            )
        return off("no oneAPI compiler (ONEAPI_ROOT unset, no icpx on PATH); kernels are compiled at run time")
    frag = plan.write()
    return SetupResult(plan, plan.cmake_args(frag), plan.summary())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m buildtools.oneapi",
        description=(
            "Plan the oneAPI ahead-of-time SYCL kernel library. Prints the summary to stderr and the CMake "
            "arguments (one per line) to stdout."
        ),
    )
    ap.add_argument("--repo-root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--build-dir", type=Path, required=True, help="where the CMake fragment goes")
    ap.add_argument("--library-dir", type=Path, required=True, help=f"where {LIBRARY_NAME} goes (next to _C)")
    ap.add_argument("--host-sycl-prefix", default="", help="prefix of the SYCL runtime the host code links")
    ap.add_argument("--show-commands", action="store_true", help="also print the exact icpx commands to stderr")
    a = ap.parse_args(argv)
    try:
        res = configure_for_setup(
            os.environ, a.repo_root.resolve(), a.build_dir.resolve(), a.library_dir.resolve(), a.host_sycl_prefix
        )
    except OneAPIError as e:
        print(f"xkernels: oneAPI ahead-of-time build: ERROR\n{e}", file=sys.stderr)
        return 2
    print(res.summary, file=sys.stderr)
    if a.show_commands and res.plan:
        for c in res.plan.commands():
            print("  $ " + c, file=sys.stderr)
    for arg in res.cmake_args:
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
