"""Which xkernels backends a run may use, the context each run is made under, and what the
dispatch record says about where the ops really ran."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch

from .. import reference
from ..backends import DispatchRecord, use_backend
from ..backends import backends as backend_status

__all__ = ["BackendSpec", "backends_for_device", "ran_elsewhere"]

# Which xkernels backends can run tensors of a torch device type.
_BACKENDS_FOR_DEVICE = {"cpu": ("reference", "sycl", "acpp"), "cuda": ("cuda", "sycl"), "xpu": ("sycl",)}

BackendSpec = str | tuple[str, Callable[[], contextlib.AbstractContextManager]]


def backends_for_device(device: torch.device | str) -> list[str]:
    """The available xkernels backends that run tensors on `device`."""
    dev_type = torch.device(device).type
    status = backend_status()
    out = []
    for name in _BACKENDS_FOR_DEVICE.get(dev_type, ()):
        st = status[name]
        if not st.available:
            continue
        if (
            name == "sycl"
            and dev_type == "cuda"
            and not any("cuda" in str(d).lower() or "nvidia" in str(d).lower() for d in st.devices)
        ):
            continue  # SYCL has no CUDA device here
        out.append(name)
    return out


def _backend_context(spec: BackendSpec) -> tuple[str, Callable[[], contextlib.AbstractContextManager]]:
    """(name, context factory) for a backend name, 'torch', or a custom (name, factory) pair
    (a custom pair lets a test or a user plug in an instrumented backend)."""
    if isinstance(spec, tuple):
        return spec
    if spec == "torch":
        return "torch", reference.torch_ops
    return spec, (lambda: use_backend(spec))


def _resolve(backends: Iterable[BackendSpec] | None, device) -> list[tuple[str, Callable]]:
    if backends is None:
        backends = backends_for_device(device)
    return [_backend_context(b) for b in backends]


def _events(rec: DispatchRecord) -> list[dict]:
    return [
        {"op": op, "backend": b, "device": dev, "fallback_reason": why, "calls": n} for op, b, dev, why, n in rec.events
    ]


def ran_elsewhere(requested: str, events: list[dict]) -> list[str]:
    """'op->backend' for every op that ran on another backend than the one requested (a real
    backend name; custom and 'torch' runs request none). A run that did not run where it was
    asked to cannot pass as that backend."""
    if requested not in backend_status():
        return []
    return sorted({f"{e['op']}->{e['backend']}" for e in events if e["backend"] != requested})


def _dispatch_note(requested: str, events: list[dict]) -> str:
    """Says when an op ran somewhere other than on the requested backend, and every fallback."""
    other = ran_elsewhere(requested, events)
    fb = sorted({f"{e['op']}: {e['fallback_reason']}" for e in events if e["fallback_reason"]})
    parts = []
    if other:
        parts.append("ran elsewhere: " + ", ".join(other))
    if fb:
        parts.append("fallbacks: " + "; ".join(fb))
    return " | ".join(parts)


def _dispatch_summary(events: list[dict]) -> str:
    """'reference: 6 calls (3 ops)' per backend that ran, plus the number of fallbacks."""
    if not events:
        return "no xkernels op ran"
    calls: dict[str, int] = {}
    ops_: dict[str, set] = {}
    fallbacks = 0
    for e in events:
        calls[e["backend"]] = calls.get(e["backend"], 0) + e["calls"]
        ops_.setdefault(e["backend"], set()).add(e["op"])
        fallbacks += e["calls"] if e["fallback_reason"] else 0
    s = ", ".join(f"{b}: {n} calls ({len(ops_[b])} ops)" for b, n in sorted(calls.items()))
    return s + (f", {fallbacks} fallbacks" if fallbacks else "")
