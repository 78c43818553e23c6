"""Backend selection and introspection.

Backends: "reference" (plain C++ CPU kernels, the oracle), "sycl" (single-source SYCL
kernels: CPU tensors on the SYCL CPU device, XPU tensors on torch's XPU queue),
"cuda" (native CUDA kernels for CUDA tensors). "auto" (default) picks per tensor device.

The process default comes from the environment variable XKERNELS_BACKEND; use_backend()
overrides it for the current thread. The selection itself is made in C++ by the one
function registered per dispatch key, so torch.ops.xkernels.* honour it too.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from . import _C, _env, _ur_cuda


class BackendUnavailableError(RuntimeError):
    """An explicitly requested backend is not built or has no usable device."""


@dataclass
class BackendStatus:
    name: str
    built: bool
    available: bool
    reason: str = ""
    devices: list = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sycl_status() -> BackendStatus:
    if not _C.with_sycl:
        return BackendStatus(
            "sycl",
            False,
            False,
            "not built: the SYCL runtime headers were not found at build time "
            "(pip install intel-sycl-rt, then rebuild xkernels)",
        )
    try:
        devices = _C.sycl.devices()
    except RuntimeError as e:  # runtime present but unusable
        return BackendStatus("sycl", True, False, f"SYCL runtime error: {e}")
    ok, why = _C.sycl.cpu_status("float32")
    usable = [d for d in devices if d.get("usable")]
    if usable:
        return BackendStatus("sycl", True, True, "" if ok else why, devices)
    return BackendStatus("sycl", True, False, why or "no usable SYCL device", devices)


def _cuda_status() -> BackendStatus:
    if not _C.with_cuda:
        why = (
            "not built: torch was built without CUDA"
            if torch.version.cuda is None
            else "not built: nvcc was not found or was disabled at build time (XKERNELS_CUDA)"
        )
        return BackendStatus("cuda", False, False, why)
    if not torch.cuda.is_available():
        return BackendStatus("cuda", True, False, "no CUDA device visible to torch")
    devs = [
        {
            "index": i,
            "name": torch.cuda.get_device_name(i),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
        }
        for i in range(torch.cuda.device_count())
    ]
    return BackendStatus("cuda", True, True, "", devs)


def _acpp_status() -> BackendStatus:
    if not getattr(_C, "with_acpp", False):
        _ok, why = _C.acpp_status()
        return BackendStatus("acpp", False, False, f"not built: {why}")
    ok, why = _C.acpp_status()
    if not ok:
        return BackendStatus("acpp", True, False, why)
    return BackendStatus("acpp", True, True, "", [_C.sycl.acpp_device()])


def backends() -> dict[str, BackendStatus]:
    """What is built and available, with the reason where not.

    "acpp" (the kernels compiled ahead of time by AdaptiveCpp) is a conformance backend: it runs
    CPU tensors when selected explicitly and is never chosen by "auto"."""
    return {
        "reference": BackendStatus("reference", True, True, "", [{"name": "cpu"}]),
        "sycl": _sycl_status(),
        "cuda": _cuda_status(),
        "acpp": _acpp_status(),
    }


def current_backend() -> str:
    """The requested backend for this thread: 'auto', 'reference', 'sycl', 'cuda' or 'acpp'."""
    return _C.requested_backend()


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Select the backend for xkernels ops called in this thread inside the block.

    "auto" picks per device; "reference", "sycl" or "cuda" force that backend and raise
    BackendUnavailableError at once if it is not built or has no usable device.
    """
    canonical = _C.validate_backend_name(str(name), "xkernels.use_backend(name)")
    if canonical != "auto":
        st = backends()[canonical]
        if not st.available:
            raise BackendUnavailableError(f"xkernels.use_backend: backend '{canonical}' is unavailable: {st.reason}")
    previous = _C.thread_backend()
    _C.set_thread_backend(canonical)
    try:
        yield canonical
    finally:
        _C.set_thread_backend(previous)


def set_default_backend(name: str) -> None:
    """Set the process-wide default (what XKERNELS_BACKEND sets at start-up)."""
    _C.set_default_backend(_C.validate_backend_name(str(name), "xkernels.set_default_backend(name)"))


def best_device() -> torch.device:
    """The best torch device xkernels can run on here: cuda, then xpu, then cpu."""
    if _C.with_cuda and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    xpu = getattr(torch, "xpu", None)
    if _C.with_sycl and xpu is not None and xpu.is_available():
        return torch.device("xpu", xpu.current_device())
    return torch.device("cpu")


def _dir_size(path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total


def _sycl_devices_or_none() -> list | None:
    if not _C.with_sycl:
        return None
    try:
        return list(_C.sycl.devices())
    except RuntimeError:
        return None


def info() -> dict[str, Any]:
    """Versions, build configuration, backends, devices, kernel provider and cache."""
    cache = _env.cache_dir()
    out = {
        "xkernels": _C.__version__,
        "torch": torch.__version__,
        "build_config": dict(kv.split("=", 1) for kv in _C.build_config.split(";") if "=" in kv),
        "requested_backend": current_backend(),
        "backends": {k: v.as_dict() for k, v in backends().items()},
        "cache": {"dir": str(cache), "bytes": _dir_size(cache) if cache.exists() else 0},
    }
    # SYCL on NVIDIA GPUs through Unified Runtime's CUDA adapter: where it is, or why there is no CUDA device
    out["sycl_cuda"] = _ur_cuda.status(_sycl_devices_or_none(), bool(_C.with_sycl))
    if _C.with_sycl:
        out["sycl"] = {
            "runtime": _C.sycl.runtime_version(),
            "provider": _C.sycl.provider_kind(),
            # per device: ahead-of-time image or run-time compilation, and why
            "provider_devices": list(_C.sycl.provider_devices()),
            "runtime_compile_env": list(_C.sycl.runtime_compile_env()),
            "kernels": list(_C.sycl.kernel_names()),
            # outputs/scratch of SYCL ops on CPU tensors (XKERNELS_HOST_CACHE_MB)
            "host_cache": dict(_C.sycl.host_cache_stats()),
            # fused_linear_relu forward: the dot kernel up to this many rows, the packed-panel kernel above
            # (LinearConfig::kDotMaxRows in csrc/sycl/fused_linear_relu.cpp).
            "linear_dot_max_rows": int(_C.sycl.linear_dot_max_rows()),
        }
    return out


def empty_cache() -> None:
    """Free the host memory the SYCL backend keeps cached for the outputs and scratch buffers of later calls
    (bounded by XKERNELS_HOST_CACHE_MB, default 512; tensors still in use are unaffected). No-op without SYCL."""
    if _C.with_sycl:
        _C.sycl.host_cache_clear()


def warmup(progress: Callable[[int, int, str], object] | None = None) -> dict[str, float]:
    """Compile every SYCL kernel for every usable SYCL device now (instead of at first use).

    `progress`, if given, is called as progress(done, total, label). Returns seconds per
    (device, kernel group)."""
    if not _C.with_sycl:
        return {}
    return dict(_C.sycl.warmup(progress))


# ------------------------------------------------------------------ dispatch record


class DispatchRecord:
    """Which backend/device ran each xkernels op call, and every fallback with its reason."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def refresh(self) -> DispatchRecord:
        self.events = [tuple(e) for e in _C.dispatch_record_snapshot()]
        return self

    def counts(self) -> Counter[tuple[str, str, str]]:
        c: Counter = Counter()
        for op, backend, device, _reason, n in self.events:
            c[(op, backend, device)] += n
        return c

    def fallbacks(self) -> list[tuple]:
        return [(op, backend, device, reason, n) for op, backend, device, reason, n in self.events if reason]

    def summary(self) -> str:
        lines = ["op x backend (device): calls"]
        for (op, backend, device), n in sorted(self.counts().items()):
            lines.append(f"  {op:28s} {backend:10s} ({device}): {n}")
        fb = self.fallbacks()
        if fb:
            lines.append("fallbacks:")
            for op, backend, device, reason, n in fb:
                lines.append(f"  {op} -> {backend} on {device} x{n}: {reason}")
        return "\n".join(lines)


_record_lock = threading.Lock()


@contextlib.contextmanager
def dispatch_record() -> Iterator[DispatchRecord]:
    """Record dispatch decisions inside the block (process-wide). Yields a DispatchRecord,
    filled when the block exits."""
    rec = DispatchRecord()
    with _record_lock:
        was = _C.dispatch_record_enabled()
        _C.dispatch_record_clear()
        _C.set_dispatch_record_enabled(True)
    try:
        yield rec
    finally:
        rec.refresh()
        with _record_lock:
            _C.set_dispatch_record_enabled(was)


if os.environ.get("XKERNELS_DISPATCH_RECORD", "").lower() in ("1", "true", "yes", "on"):
    _C.set_dispatch_record_enabled(True)
