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


DEVICE_ENV = "XKERNELS_DEVICE"
DEVICE_CHOICES = ("auto", "cpu", "cuda", "xpu")


class DeviceUnavailableError(RuntimeError):
    """XKERNELS_DEVICE (or best_device(requested)) names a device that is not present or not usable here."""


@dataclass
class DeviceChoice:
    """What best_device() chose: the request (XKERNELS_DEVICE), the device, and why."""

    requested: str
    device: torch.device
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"requested": self.requested, "device": str(self.device), "reason": self.reason}


def _cuda_absent() -> str | None:
    """Why xkernels cannot run on a CUDA device here, or None when it can."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} was built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch (torch.cuda.is_available() is False)"
    if not _C.with_cuda:
        return "xkernels was built without its CUDA backend (nvcc not found or XKERNELS_CUDA=off at build time)"
    return None


def _xpu_absent() -> str | None:
    """Why xkernels cannot run on an XPU device here, or None when it can."""
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        if not getattr(torch.version, "xpu", None):
            return f"torch {torch.__version__} was built without XPU support"
        return "no XPU device is visible to torch (torch.xpu.is_available() is False)"
    if not _C.with_sycl:
        return "xkernels was built without its SYCL backend"
    return None


def _present_device(kind: str) -> torch.device:
    """The current device of a present `kind` ("cuda" or "xpu")."""
    return torch.device(kind, getattr(torch, kind).current_device())


def _parse_device_request(requested: str | None) -> tuple[str, str]:
    """(canonical request, where it came from); ValueError naming the variable and the allowed values."""
    source = "best_device(requested)"
    if requested is None:
        requested, source = os.environ.get(DEVICE_ENV, ""), DEVICE_ENV
    name = str(requested).strip().lower() or "auto"
    if name not in DEVICE_CHOICES:
        allowed = ", ".join(DEVICE_CHOICES)
        raise ValueError(f"{source}={requested!r} is not a device xkernels knows: allowed values are {allowed}")
    return name, source


def device_choice(requested: str | None = None) -> DeviceChoice:
    """The device best_device() returns, with the reason.

    `requested` (default: the environment variable XKERNELS_DEVICE, unset = "auto"): "auto" takes the best
    device present (cuda, then xpu, then cpu) and records why each better one was passed over; "cpu", "cuda"
    or "xpu" takes that device or raises DeviceUnavailableError naming the request and why the device is
    absent. Any other value raises ValueError listing the allowed values."""
    name, source = _parse_device_request(requested)
    if name == "cpu":
        return DeviceChoice(name, torch.device("cpu"), f"requested by {source}=cpu")
    absent = {"cuda": _cuda_absent, "xpu": _xpu_absent}
    if name != "auto":
        why = absent[name]()
        if why is not None:
            raise DeviceUnavailableError(f"{source}={name}: the {name} device is unavailable: {why}")
        return DeviceChoice(name, _present_device(name), f"requested by {source}={name}")
    passed_over = []
    for kind in ("cuda", "xpu"):
        why = absent[kind]()
        if why is None:
            return DeviceChoice("auto", _present_device(kind), f"auto: the best device present is {kind}")
        passed_over.append(f"no {kind}: {why}")
    return DeviceChoice("auto", torch.device("cpu"), "auto: falling back to cpu (" + "; ".join(passed_over) + ")")


def best_device(requested: str | None = None) -> torch.device:
    """The torch device xkernels should run on here, chosen by `requested` or XKERNELS_DEVICE=auto|cpu|cuda|xpu
    (unset: auto = cuda, then xpu, then cpu). An explicit device that is absent raises DeviceUnavailableError
    with the reason; device_choice() returns the reason for an automatic choice too."""
    return device_choice(requested).device


def device_report() -> dict[str, Any]:
    """XKERNELS_DEVICE as set, the device it gives and why, or the error it raises (for info() and the CLI):
    {"requested", "device" (None on error), "reason", "status" ("ok", "invalid" or "unavailable"), "error"}."""
    raw = os.environ.get(DEVICE_ENV) or "auto"
    try:
        choice = device_choice()
    except ValueError as e:
        return {"requested": raw, "device": None, "reason": "", "status": "invalid", "error": str(e)}
    except DeviceUnavailableError as e:
        return {"requested": raw, "device": None, "reason": "", "status": "unavailable", "error": str(e)}
    return {**choice.as_dict(), "requested": raw, "status": "ok", "error": ""}


def _dir_size(path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total


def info() -> dict[str, Any]:
    """Versions, build configuration, backends, devices, kernel provider and cache."""
    cache = _env.cache_dir()
    statuses = backends()
    out = {
        "xkernels": _C.__version__,
        "torch": torch.__version__,
        "build_config": dict(kv.split("=", 1) for kv in _C.build_config.split(";") if "=" in kv),
        "requested_backend": current_backend(),
        "device": device_report(),
        "backends": {k: v.as_dict() for k, v in statuses.items()},
        "cache": {"dir": str(cache), "bytes": _dir_size(cache) if cache.exists() else 0},
    }
    # SYCL on NVIDIA GPUs through Unified Runtime's CUDA adapter: where it is, or why there is no CUDA device
    out["sycl_cuda"] = _ur_cuda.status(statuses["sycl"].devices, bool(_C.with_sycl))
    if _C.with_sycl:
        out["sycl"] = {
            "runtime": _C.sycl.runtime_version(),
            "provider": _C.sycl.provider_kind(),
            # per device: ahead-of-time image or run-time compilation, and why
            "provider_devices": list(_C.sycl.provider_devices()),
            "runtime_compile_env": list(_C.sycl.runtime_compile_env()),
            # bf16 fused_linear_relu and conv2d on the CPU's AMX unit (csrc/sycl/kernels/amx_gemm.hpp): on?, why
            "amx": dict(zip(("on", "why"), _C.sycl.amx_status(), strict=True)),
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
