"""The providers a benchmark compares: xkernels per backend, torch eager, torch.compile, IPEX."""
from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

import xkernels
from xkernels import _C

from .harness import Provider

TORCH_OPS = {
    "fused_linear_relu": lambda x, w, b=None: torch.relu(F.linear(x, w, b)),
    "conv2d": F.conv2d,
    "layer_norm": F.layer_norm,
}
XK_OPS = {
    "fused_linear_relu": xkernels.fused_linear_relu,
    "conv2d": xkernels.conv2d,
    "layer_norm": xkernels.layer_norm,
}


def _xkernels_provider(backend: str) -> Provider:
    st = xkernels.backends()[backend]

    def fn(op, args, kwargs):
        # Cheap per-call switch (the same thread-local use_backend sets), so providers can interleave.
        prev = _C.thread_backend()
        _C.set_thread_backend(backend)
        try:
            return XK_OPS[op](*args, **kwargs)
        finally:
            _C.set_thread_backend(prev)

    # The reference backend is the plain-loop oracle: too slow for the large shapes.
    return Provider(f"xkernels[{backend}]", fn, st.available, st.reason, handles_big=backend != "reference")


def _torch_provider() -> Provider:
    return Provider("torch", lambda op, args, kwargs: TORCH_OPS[op](*args, **kwargs))


def _compile_provider() -> Provider:
    compiled = {op: torch.compile(f, dynamic=False) for op, f in TORCH_OPS.items()}
    return Provider("torch.compile", lambda op, args, kwargs: compiled[op](*args, **kwargs))


def _ipex_provider() -> Provider:
    # Optional: Intel Extension for PyTorch pins its own torch (2.8); see README "Benchmarks" for the setup.
    try:
        ipex = importlib.import_module("intel_extension_for_pytorch")
    except Exception as e:
        return Provider("ipex", lambda *a: None, False, f"intel_extension_for_pytorch not importable ({e})")
    del ipex
    return Provider("ipex", lambda op, args, kwargs: TORCH_OPS[op](*args, **kwargs))


def all_providers(names: list[str] | None = None) -> list[Provider]:
    provs = [_xkernels_provider("sycl"), _xkernels_provider("cuda"), _xkernels_provider("reference"),
             _torch_provider(), _compile_provider(), _ipex_provider()]
    if names:
        provs = [p for p in provs if p.name in names or p.name.split("[")[-1].rstrip("]") in names]
    return provs
