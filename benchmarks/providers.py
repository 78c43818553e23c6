"""The providers a benchmark compares: xkernels per backend, torch eager, torch.compile (plain, and with
inductor's freezing for forward cases)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    "Conv2d": no_grad(lambda m, x: m(x)),  # likewise (pack_weight=True)
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
                if op == "Conv2d":
                    return xkernels.conv2d(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)
                return xkernels.fused_linear_relu(x, m.weight, m.bias)
        finally:
            _C.set_thread_backend(prev)

    return Provider(
        "xkernels[sycl-unpacked]", fn, st.available, st.reason, ops=frozenset({"FusedLinearReLU", "Conv2d"})
    )


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


class _FrozenOp(torch.nn.Module):
    """torch's computation of one op case with its weight and bias held as Parameters (what inductor's freezing
    folds into the compiled graph as constants); the activation is the only input."""

    def __init__(self, op, args, kwargs):
        super().__init__()
        self.op, self.kwargs = op, dict(kwargs)
        if op == "FusedLinearReLU":
            w, b = args[0].weight, args[0].bias
            self.fn, self.extra = TORCH_OPS["fused_linear_relu"], ()
        elif op == "Conv2d":
            m = args[0]
            w, b = m.weight, m.bias
            self.fn, self.extra = F.conv2d, ()
            self.kwargs = {"stride": m.stride, "padding": m.padding, "dilation": m.dilation, "groups": m.groups}
        elif op in ("fused_linear_relu", "conv2d"):
            w, b = args[1], args[2] if len(args) > 2 else None
            self.fn, self.extra = TORCH_OPS[op], ()
        elif op == "layer_norm":
            w, b = args[2], args[3]
            self.fn, self.extra = F.layer_norm, (args[1],)
        else:
            raise ValueError(f"no frozen variant for {op}")
        self.weight = torch.nn.Parameter(w.detach(), requires_grad=False)
        self.bias = torch.nn.Parameter(b.detach(), requires_grad=False) if b is not None else None

    def forward(self, x):
        if self.op == "layer_norm":
            return self.fn(x, *self.extra, self.weight, self.bias, **self.kwargs)
        return self.fn(x, self.weight, self.bias, **self.kwargs)


def _freezing_provider() -> Provider:
    """torch.compile with torch._inductor.config.freezing = True, compiled and run under torch.no_grad() (how a user
    compiles for CPU inference): weights become constants of the graph (and are pre-packed for oneDNN/MKL).
    Forward cases only, and only ops with weights (not layer_norm.out)."""
    import types

    import torch._inductor.config as inductor_config

    compiled: dict = {}

    def fn(op, args, kwargs):
        x = args[1] if op in ("FusedLinearReLU", "Conv2d") else args[0]
        key = (op, tuple(id(a) for a in args))
        with torch.no_grad():
            if key not in compiled:
                mod = _FrozenOp(op, args, kwargs)

                def run(x):
                    return mod(x)

                # Own code object per case: dynamo's cache lives on the code object, and this graph has its own
                # frozen constants.
                run = types.FunctionType(
                    run.__code__.replace(co_name=f"frozen_{len(compiled)}"),
                    run.__globals__,
                    "run",
                    None,
                    run.__closure__,
                )
                # `args` kept alive with the entry: the key holds their ids, which Python reuses once an object
                # is freed (a later case's module at a freed id got the old frozen weights: caught by the
                # correctness gate on the Conv2d cases).
                compiled[key] = (mod, torch.compile(run, dynamic=False), args)
                with inductor_config.patch(freezing=True):
                    return compiled[key][1](x)
            return compiled[key][1](x)

    return Provider(
        "torch.compile+freezing",
        fn,
        ops=frozenset({"fused_linear_relu", "conv2d", "layer_norm", "FusedLinearReLU", "Conv2d"}),
        modes=frozenset({"fwd"}),
    )


# No "ipex" provider: Intel Extension for PyTorch optimizes modules (ipex.optimize(model)), it has no versions of
# these functional ops, and it pins torch 2.8, against which xkernels does not build; the provider that stood here
# ran torch's own ops under IPEX's name. docs/performance.md, "Intel Extension for PyTorch (IPEX)".


def all_providers(names: list[str] | None = None) -> list[Provider]:
    provs = [
        _xkernels_provider("sycl"),
        _sycl_unpacked_provider(),
        _xkernels_provider("cuda"),
        _xkernels_provider("reference"),
        _xkernels_provider("acpp"),  # the AdaptiveCpp build: a conformance backend, timed for information
        _torch_provider(),
        _copy_provider(),
        _compile_provider(),
        _freezing_provider(),
    ]
    if names:
        provs = [p for p in provs if p.name in names or p.name.split("[")[-1].rstrip("]") in names]
    return provs
