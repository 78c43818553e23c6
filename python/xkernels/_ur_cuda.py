"""SYCL on NVIDIA GPUs from the pip wheels: finding Unified Runtime's CUDA adapter and saying why there is no CUDA
SYCL device.

The pip SYCL runtime reaches devices through the Unified Runtime (UR) loader (``libur_loader.so.0``), which opens
adapters by library name: first from the directories in ``UR_ADAPTERS_SEARCH_PATH`` (comma-separated), then its
own directory, then the system's library path. The wheels ship no CUDA adapter; ``scripts/build_ur_cuda_adapter.sh``
builds ``libur_adapter_cuda.so.0`` from source (docs/oneapi.md, "NVIDIA GPUs"). xkernels looks for it, in order:

1. ``XKERNELS_UR_CUDA_ADAPTER``: the library itself, a directory holding it, or the build script's prefix
   (``<prefix>/lib/libur_adapter_cuda.so.0``);
2. beside the xkernels package (``xkernels/libur_adapter_cuda.so.0``);
3. the SYCL runtime's own ``lib/`` (the loader finds it there by itself).

For 1 and 2 it prepends the adapter's directory to ``UR_ADAPTERS_SEARCH_PATH`` before the first SYCL platform query
(``prepare``, from ``xkernels._env.prepare``), unless the user set ``UR_ADAPTERS_FORCE_LOAD`` (then the user's list
decides).

The adapter must be built for the same UR ABI as the loader: the loader calls it through tables of function
pointers whose layout (``ur_ddi.h``) changes between oneAPI releases even at one UR version number, and a mismatch
calls the wrong functions (a crash, not an error). The build script stamps the layout of the UR source it built
(``libur_adapter_cuda.ddi-layout`` beside the library); the runtime's layout is its ``include/unified-runtime/
ur_ddi.h`` (intel-sycl-rt ships it). xkernels points the loader only at an adapter whose stamp matches.

This module imports only the standard library: the build script runs it as a program
(``python _ur_cuda.py --ddi-digest <ur_ddi.h>``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ADAPTER = "libur_adapter_cuda.so.0"
STAMP = "libur_adapter_cuda.ddi-layout"
ENV_ADAPTER = "XKERNELS_UR_CUDA_ADAPTER"
SEARCH_PATH = "UR_ADAPTERS_SEARCH_PATH"
FORCE_LOAD = "UR_ADAPTERS_FORCE_LOAD"
BUILD_HINT = "build it with scripts/build_ur_cuda_adapter.sh and set XKERNELS_UR_CUDA_ADAPTER to the prefix it prints"

_TABLE = re.compile(r"typedef struct (ur_[a-z0-9_]+_dditable_t)\s*\{(.*?)\}", re.S)
_PFN = re.compile(r"\b(pfn[A-Za-z0-9_]+)\s*;")

# CUresult values (cuda.h) a driver without a usable GPU returns from cuInit
_CU_ERRORS = {3: "CUDA_ERROR_NOT_INITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
              999: "CUDA_ERROR_UNKNOWN", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 34: "CUDA_ERROR_STUB_LIBRARY",
              804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}  # fmt: skip


def ddi_layout(text: str) -> list[str]:
    """The loader/adapter ABI: every DDI table of ur_ddi.h with its function pointers, in declaration order."""
    out = []
    for table, body in _TABLE.findall(text):
        out.extend(f"{table}.{pfn}" for pfn in _PFN.findall(body))
    return out


def ddi_digest(header: Path) -> str:
    """A short digest of ``ddi_layout`` of a ur_ddi.h ("sha256:<16 hex>/<entries>")."""
    layout = ddi_layout(Path(header).read_text(errors="replace"))
    if not layout:
        raise ValueError(f"{header}: no UR DDI tables found (not a ur_ddi.h?)")
    return f"sha256:{hashlib.sha256(chr(10).join(layout).encode()).hexdigest()[:16]}/{len(layout)}"


def runtime_prefix() -> Path | None:
    """The SYCL runtime's prefix (lib/libur_loader.so.0): XKERNELS_SYCL_ROOT, else this Python's prefixes."""
    cands = [os.environ.get("XKERNELS_SYCL_ROOT"), sys.prefix, getattr(sys, "base_prefix", sys.prefix)]
    for c in cands:
        if c and (Path(c) / "lib" / "libur_loader.so.0").exists():
            return Path(c)
    return None


@dataclass
class Lookup:
    """Where the adapter was found (``found_by``: "XKERNELS_UR_CUDA_ADAPTER", "package", "runtime" or "") and what
    xkernels did about it."""

    adapter: str = ""
    found_by: str = ""
    problem: str = ""  # why it cannot be used (set when there is one)
    abi: str = ""  # the ABI check's outcome, in words
    search_path: str = ""  # the UR_ADAPTERS_SEARCH_PATH xkernels set ("" when it set none)
    notes: list[str] = field(default_factory=list)


def find_adapter(environ: os._Environ | dict | None = None, package_dir: Path | None = None) -> Lookup:
    env = os.environ if environ is None else environ
    value = env.get(ENV_ADAPTER, "")
    if value:
        p = Path(value).expanduser()
        cands = [p] if p.is_file() else [p / ADAPTER, p / "lib" / ADAPTER]
        for c in cands:
            if c.is_file():
                return Lookup(adapter=str(c), found_by=ENV_ADAPTER)
        return Lookup(
            found_by=ENV_ADAPTER,
            problem=f"{ENV_ADAPTER}={value} names no {ADAPTER} (looked for {', '.join(map(str, cands))})",
        )
    pkg = package_dir if package_dir is not None else Path(__file__).resolve().parent
    if (pkg / ADAPTER).is_file():
        return Lookup(adapter=str(pkg / ADAPTER), found_by="package")
    prefix = runtime_prefix()
    if prefix is not None and (prefix / "lib" / ADAPTER).is_file():
        return Lookup(adapter=str(prefix / "lib" / ADAPTER), found_by="runtime")
    where = f"{ENV_ADAPTER} is not set, not beside xkernels ({pkg})"
    where += f", not in the SYCL runtime's {prefix / 'lib'}" if prefix is not None else ", and no SYCL runtime found"
    return Lookup(problem=f"no CUDA adapter ({ADAPTER}): {where}; {BUILD_HINT}")


def check_abi(adapter: Path, prefix: Path | None) -> tuple[bool | None, str]:
    """(True, why) when the adapter's stamped UR ABI equals the runtime's; (False, why) when it differs;
    (None, why) when either side is unknown."""
    stamp = Path(adapter).parent / STAMP
    header = prefix / "include" / "unified-runtime" / "ur_ddi.h" if prefix is not None else None
    if not stamp.is_file():
        return None, f"not checked: no {STAMP} beside the adapter (not built by scripts/build_ur_cuda_adapter.sh)"
    if header is None or not header.is_file():
        return None, "not checked: the SYCL runtime has no include/unified-runtime/ur_ddi.h"
    built = (stamp.read_text().split() or [""])[0]
    try:
        have = ddi_digest(header)
    except (OSError, ValueError) as e:
        return None, f"not checked: {e}"
    if built == have:
        return True, f"matches the runtime ({have})"
    return False, (
        f"the adapter was built for another Unified Runtime ABI than the installed SYCL runtime's "
        f"(adapter {built}, runtime {have} in {header}); the UR loader would call the wrong functions, so "
        f"xkernels does not point it at this adapter. Rebuild the adapter from the UR source of the runtime's "
        f"oneAPI release, or use that release's runtime (docs/oneapi.md)"
    )


_lookup: Lookup | None = None


def prepare(environ: os._Environ | dict | None = None, package_dir: Path | None = None) -> dict[str, str]:
    """Find the adapter and, when it is usable and not already where the loader looks, prepend its directory to
    UR_ADAPTERS_SEARCH_PATH. Returns what it set. Call before the first SYCL platform query."""
    global _lookup
    env = os.environ if environ is None else environ
    look = find_adapter(env, package_dir)
    done: dict[str, str] = {}
    if look.adapter:
        ok, why = check_abi(Path(look.adapter), runtime_prefix())
        look.abi = why
        if ok is False:
            look.problem = why
        elif look.found_by != "runtime":
            if env.get(FORCE_LOAD):
                look.notes.append(f"{FORCE_LOAD} is set: the user's adapter list decides, {SEARCH_PATH} not set")
            else:
                d = str(Path(look.adapter).parent)
                parts = [p for p in env.get(SEARCH_PATH, "").split(",") if p]
                if d not in parts:
                    env[SEARCH_PATH] = ",".join([d, *parts])
                    done[SEARCH_PATH] = env[SEARCH_PATH]
                look.search_path = env[SEARCH_PATH]
    _lookup = look
    return done


def lookup() -> Lookup:
    """What prepare() found (it runs at import of xkernels)."""
    return _lookup if _lookup is not None else find_adapter()


def _driver_state() -> tuple[bool, str]:
    """(True, "") when libcuda.so.1 loads and cuInit finds a GPU; else (False, why)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return False, f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({e})"
    try:
        rc = int(cuda.cuInit(0))
        if rc != 0:
            return False, f"the NVIDIA driver reports no usable GPU: cuInit returned {rc} ({_CU_ERRORS.get(rc, '?')})"
        n = ctypes.c_int(0)
        rc = int(cuda.cuDeviceGetCount(ctypes.byref(n)))
        if rc != 0 or n.value == 0:
            return False, f"the NVIDIA driver reports no GPU (cuDeviceGetCount: {rc}, {n.value} devices)"
    except AttributeError as e:
        return False, f"libcuda.so.1 is not a CUDA driver library ({e})"
    return True, ""


def status(devices: list[dict] | None, with_sycl: bool = True) -> dict[str, Any]:
    """Why the SYCL runtime has (or has not) a CUDA device: the adapter lookup, the driver, the devices.

    ``devices``: the SYCL device dicts (``_C.sycl.devices()``), or None when they could not be listed."""
    look = lookup()
    out: dict[str, Any] = asdict(look)
    cuda = [d for d in (devices or []) if d.get("backend") == "cuda"]
    out["devices"] = [d.get("name") for d in cuda if d.get("usable")]
    if out["devices"]:
        out["reason"] = ""
        return out
    if not with_sycl:
        out["reason"] = "xkernels was built without SYCL"
    elif look.problem:
        out["reason"] = look.problem
    elif cuda:
        out["reason"] = "; ".join(f"{d.get('name')}: {d.get('reason', 'unusable')}" for d in cuda)
    else:
        ok, why = _driver_state()
        if not ok:
            out["reason"] = why
        else:
            try:
                ctypes.CDLL(look.adapter)
            except OSError as e:
                out["reason"] = f"the CUDA adapter {look.adapter} cannot be loaded: {e}"
            else:
                out["reason"] = (
                    "the adapter loads and the driver sees a GPU, but the SYCL runtime lists no CUDA device; "
                    "scripts/ur_loader_probe.py --log shows what the UR loader did"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--ddi-digest":
        print(ddi_digest(Path(args[1])))
        return 0
    print("usage: _ur_cuda.py --ddi-digest <ur_ddi.h>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
