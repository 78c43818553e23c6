"""The providers a benchmark compares: xkernels per backend, torch eager, torch.compile, IPEX."""

from __future__ import annotations

import importlib

import torch

import xkernels
from xkernels import _C

from .cases import TORCH_OPS, no_grad
from .harness import Provider

XK_OPS = {
    "fused_linear_relu": xkernels.fused_linear_relu,
    "conv2d": xkernels.conv2d,
    "layer_norm": xkernels.layer_norm,
    "layer_norm.out": lambda x, ns, w, b, out: xkernels.layer_norm(x, ns, w, b, out=out),
    # The module as a user calls it: on the SYCL backend it uses its cached pre-packed weight
    # (packed during the untimed warm-up call).
    "FusedLinearReLU": no_grad(lambda m, x: m(x)),
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


def _sycl_unpacked_provider() -> Provider:
    """FusedLinearReLU's computation through fused_linear_relu with the unpacked weight on the SYCL
    backend (the module's computation without its cached packed weight): the weight is re-packed per call."""
    st = xkernels.backends()["sycl"]

    def fn(op, args, kwargs):
        m, x = args
        prev = _C.thread_backend()
        _C.set_thread_backend("sycl")
        try:
            with torch.no_grad():
                return xkernels.fused_linear_relu(x, m.weight, m.bias)
        finally:
            _C.set_thread_backend(prev)

    return Provider("xkernels[sycl-unpacked]", fn, st.available, st.reason, ops=frozenset({"FusedLinearReLU"}))


def _copy_provider() -> Provider:
    """Copy-bandwidth baseline for layer_norm.out: out.copy_(input), the same bytes read and written."""
    return Provider(
        "copy", lambda op, args, kwargs: kwargs["out"].copy_(args[0]), ops=frozenset({"layer_norm.out"}), checked=False
    )


def _torch_provider() -> Provider:
    return Provider("torch", lambda op, args, kwargs: TORCH_OPS[op](*args, **kwargs))


def _compile_provider() -> Provider:
    # One graph per shape (dynamic=False, as a model with fixed shapes would run). Dynamo recompiles for each new
    # shape and, past its recompile limit (8 by default), silently runs the function eagerly: the suite's dozens
    # of shapes per op would then time torch eager under the torch.compile label. So the limit is lifted here.
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 4096))
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
    provs = [
        _xkernels_provider("sycl"),
        _sycl_unpacked_provider(),
        _xkernels_provider("cuda"),
        _xkernels_provider("reference"),
        _torch_provider(),
        _copy_provider(),
        _compile_provider(),
        _ipex_provider(),
    ]
    if names:
        provs = [p for p in provs if p.name in names or p.name.split("[")[-1].rstrip("]") in names]
    return provs
