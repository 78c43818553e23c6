"""A launch that fails part way through a route: no memory released under a queued kernel, a clear error, and
right results afterwards.

A SYCL op on CPU tensors queues its kernels on the CPU device's asynchronous in-order queue and waits once, at
the end. Should anything throw after the first kernel is queued (a kernel build failure, an allocation failure,
a host check between two launches), the route must drain the queue before its temporaries and outputs are
released: a kernel still writing into a freed block corrupts the heap, or, through the caching host allocator,
the next call's tensor that got the block (silently wrong results). Launch checking (csrc/sycl/launch.h,
_C.sycl.set_launch_checking) counts every release of host memory made while this thread has unwaited kernels,
and fail_launch_after(n) makes the n-th launch from now throw before queuing anything. Every case below is run
once cleanly (the normal path must release nothing early either), then with the failure planted at each of its
launches in turn (1, 2, ... until a call completes without reaching it): each failing call must raise the planted
error and leave the count at zero, and the call after them must give the clean call's result bit for bit.

The cases cover every route of the SYCL host wrappers on a CPU device: conv2d forward (pixel GEMM, per-image GEMM,
Winograd per call and pre-packed, destination-pixel kernels, the stem, groups, half types, AMX 1x1 and 3x3 where
the CPU has AMX), conv2d backward (each grad_input and grad_weight route, grad_bias), fused_linear_relu (dot
kernel, GEMM, pre-packed, AMX, backward) and layer_norm (forward, backward). The acpp backend's launches run to
completion (nothing stays queued), so there the cases check the error path alone.
"""

from __future__ import annotations

import re

import pytest
import torch

import xkernels
from xkernels import _C

import _backends

CL = torch.channels_last
MAX_LAUNCHES = 400  # more launches than any case makes (a bound on the walk, not a rule of the routes)


@pytest.fixture(params=[p for p in _backends.backend_params() if p.id in ("sycl", "acpp")])
def checking(request):
    """Launch checking on, with xkernels.use_backend(sycl | acpp) entered (CPU tensors)."""
    _backends.get(request.param)
    sycl = _C.sycl
    with xkernels.use_backend(request.param):
        was_on = sycl.set_launch_checking(True)  # (on for the whole session with XKERNELS_LAUNCH_CHECKING=1)
        sycl.fail_launch_after(0)
        sycl.launch_check_report(reset=True)
        yield sycl
        sycl.fail_launch_after(0)
        sycl.set_launch_checking(was_on)
        sycl.launch_check_report(reset=True)


def _randn(*shape, dtype=torch.float32, fmt=None, grad=False):
    t = torch.randn(*shape, dtype=torch.float64).to(dtype)
    if fmt is not None:
        t = t.contiguous(memory_format=fmt)
    return t.requires_grad_(grad)


def _conv(
    kind, x_shape, w_shape, stride=1, padding=0, groups=1, dtype=torch.float32, cl=False, bias=True, sliced=False
):
    """A conv2d case's run(): kind "fwd" (conv2d), "relu+res" (conv2d_relu with a residual), "packed"
    (pack_conv2d_weight + conv2d_packed), "bwd" (conv2d + conv2d_backward) or "bwd-expanded" (the gradient of
    out.sum(): every stride 0, which the backward first copies dense)."""
    # sliced: every other channel of twice as many, views the host wrapper copies or reads at their strides
    step = 2 if sliced else 1
    x = _randn(x_shape[0], step * x_shape[1], *x_shape[2:], dtype=dtype, fmt=CL if cl else None)[:, ::step]
    w = _randn(step * w_shape[0], *w_shape[1:], dtype=dtype)[::step]
    b = _randn(w_shape[0], dtype=dtype) if bias else None
    geometry = ([stride] * 2, [padding] * 2, [1, 1], groups)
    residual = None
    if kind == "relu+res":
        residual = torch.ops.xkernels.conv2d(x, w, b, *geometry).detach().sin()

    def run():
        if kind == "fwd":
            return (torch.ops.xkernels.conv2d(x, w, b, *geometry),)
        if kind == "relu+res":
            return (torch.ops.xkernels.conv2d_relu(x, w, b, *geometry, residual),)
        if kind == "packed":
            packed = torch.ops.xkernels.pack_conv2d_weight(w, groups)
            return packed, torch.ops.xkernels.conv2d_packed(x, packed, list(w.shape), b, *geometry, None, True)
        out = torch.ops.xkernels.conv2d(x, w, b, *geometry)
        g = torch.ones((), dtype=out.dtype).expand_as(out) if kind == "bwd-expanded" else out.cos()
        return torch.ops.xkernels.conv2d_backward(g, x, w, *geometry, [True] * 3)

    return run


def _linear(m, n, k, dtype=torch.float32, packed=False, backward=False, strided=False):
    if strided:  # transposed views: the host wrapper copies them (torch-allocated temporaries) before launching
        x, w = _randn(k, m, dtype=dtype).t(), _randn(k, n, dtype=dtype).t()
    else:
        x, w = _randn(m, k, dtype=dtype), _randn(n, k, dtype=dtype)
    b = _randn(n, dtype=dtype)

    def run():
        if packed:
            pw = torch.ops.xkernels.pack_linear_weight(w)
            return pw, torch.ops.xkernels.fused_linear_relu_packed(x, pw, b, n)
        out = torch.ops.xkernels.fused_linear_relu(x, w, b)
        if not backward:
            return (out,)
        return torch.ops.xkernels.fused_linear_relu_backward(out.cos(), x, w, out, [True, True, True])

    return run


def _layer_norm(shape, backward=False, dtype=torch.float32, strided=False):
    # strided: every other row, copied by the host wrapper before launching
    x = _randn(shape[0] * 2, shape[-1], dtype=dtype)[::2] if strided else _randn(*shape, dtype=dtype)
    w, b = _randn(shape[-1], dtype=dtype), _randn(shape[-1], dtype=dtype)

    def run():
        out, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [shape[-1]], w, b, 1e-5)
        if not backward:
            return out, mean, rstd
        return torch.ops.xkernels.layer_norm_backward(out.cos(), x, [shape[-1]], mean, rstd, w, b, [True] * 3)

    return run


BF16, F16 = torch.bfloat16, torch.float16
WINO, NO_WINO = {"XKERNELS_CONV_WINOGRAD": "1"}, {"XKERNELS_CONV_WINOGRAD": "0"}
CL_ = {"cl": True}
# conv2d cases: name (the route), environment overrides, then _conv's arguments (kind, input shape, weight shape,
# keywords); "cl": channels_last.
CONV_CASES = [
    ("1x1 cl: pixel GEMM", {}, "fwd", (2, 32, 8, 8), (48, 32, 1, 1), CL_),
    (
        "1x1 stride 2 cl, residual: strided pixel GEMM",
        {},
        "relu+res",
        (2, 32, 8, 8),
        (48, 32, 1, 1),
        CL_ | {"stride": 2},
    ),
    ("1x1 cl packed", {}, "packed", (2, 32, 8, 8), (64, 32, 1, 1), CL_),
    ("1x1 NCHW: per-image GEMM", {}, "fwd", (2, 32, 32, 32), (40, 32, 1, 1), {}),
    ("1x1 NCHW small image: pixel GEMM into NCHW", {}, "relu+res", (2, 32, 8, 8), (48, 32, 1, 1), {}),
    (
        "1x1 NCHW stride 2, O >= 2C: rows copied, then the pixel GEMM",
        {},
        "fwd",
        (2, 16, 8, 8),
        (48, 16, 1, 1),
        {"stride": 2},
    ),
    ("1x1 NCHW packed: per-image GEMM, weight unpacked", {}, "packed", (1, 32, 32, 32), (64, 32, 1, 1), {}),
    ("3x3 Winograd, weight transformed per call", WINO, "fwd", (1, 64, 10, 10), (64, 64, 3, 3), CL_ | {"padding": 1}),
    ("3x3 Winograd, bf16 weight widened", WINO, "fwd", (1, 64, 10, 10), (64, 64, 3, 3), {"padding": 1, "dtype": BF16}),
    ("3x3 Winograd packed", WINO, "packed", (1, 64, 10, 10), (64, 64, 3, 3), CL_ | {"padding": 1}),
    ("3x3 direct packed", NO_WINO, "packed", (2, 16, 9, 9), (24, 16, 3, 3), {"padding": 1}),
    (
        "3x3 direct half, no bias",
        NO_WINO,
        "fwd",
        (2, 8, 9, 9),
        (12, 8, 3, 3),
        {"padding": 1, "dtype": F16, "bias": False},
    ),
    ("7x7 stride 2 stem", {}, "fwd", (1, 3, 20, 20), (16, 3, 7, 7), CL_ | {"stride": 2, "padding": 3}),
    ("3x3 depthwise", {}, "fwd", (2, 16, 9, 9), (16, 1, 3, 3), CL_ | {"padding": 1, "groups": 16}),
    ("1x1 bf16 cl (AMX where the CPU has it)", {}, "fwd", (1, 32, 7, 7), (64, 32, 1, 1), CL_ | {"dtype": BF16}),
    (
        "3x3 bf16 cl (AMX where the CPU has it)",
        {},
        "fwd",
        (1, 32, 7, 7),
        (64, 32, 3, 3),
        CL_ | {"dtype": BF16, "padding": 1},
    ),
    ("backward 1x1 cl: pixel GEMMs", {}, "bwd", (2, 32, 8, 8), (48, 32, 1, 1), CL_),
    ("backward 1x1 cl, expanded gradient copied dense", {}, "bwd-expanded", (2, 32, 8, 8), (48, 32, 1, 1), CL_),
    ("backward 1x1 stride 2 cl", {}, "bwd", (2, 32, 8, 8), (48, 32, 1, 1), CL_ | {"stride": 2}),
    ("backward 1x1 NCHW: per-image GEMMs", {}, "bwd", (1, 32, 32, 32), (40, 32, 1, 1), {}),
    ("backward 1x1 NCHW small image: pixel GEMM grad_input", {}, "bwd", (2, 32, 8, 8), (48, 32, 1, 1), {}),
    (
        "backward 3x3 cl: Winograd grad_input, window grad_weight",
        WINO,
        "bwd",
        (1, 64, 48, 48),
        (64, 64, 3, 3),
        CL_ | {"padding": 1},
    ),
    (
        "backward 3x3 NCHW: direct grad_input, im2col grad_weight",
        NO_WINO,
        "bwd",
        (2, 8, 9, 9),
        (12, 8, 3, 3),
        {"padding": 1},
    ),
    (
        "backward stem: col2im grad_input, transposed grad_weight",
        {},
        "bwd",
        (1, 3, 20, 20),
        (16, 3, 7, 7),
        CL_ | {"stride": 2, "padding": 3},
    ),
    (
        "backward grouped: direct grad_weight",
        {},
        "bwd",
        (2, 16, 9, 9),
        (16, 4, 3, 3),
        CL_ | {"padding": 1, "groups": 4},
    ),
    (
        "backward depthwise: grad_weight over groups",
        {},
        "bwd",
        (2, 16, 9, 9),
        (16, 1, 3, 3),
        {"padding": 1, "groups": 16},
    ),
    ("backward bf16", {}, "bwd", (2, 8, 9, 9), (12, 8, 3, 3), CL_ | {"padding": 1, "dtype": BF16}),
    (
        "3x3 Winograd, sliced input and weight",
        WINO,
        "fwd",
        (1, 64, 10, 10),
        (64, 64, 3, 3),
        {"padding": 1, "sliced": True},
    ),
    (
        "backward 3x3 cl, sliced input and weight",
        {},
        "bwd",
        (2, 16, 9, 9),
        (24, 16, 3, 3),
        CL_ | {"padding": 1, "sliced": True},
    ),
]
# name -> (a function making the case's run(), environment overrides)
CASES = {
    **{f"conv2d {name}": (lambda a=args, k=kw: _conv(*a, **k), env) for name, env, *args, kw in CONV_CASES},
    "fused_linear_relu few rows (dot kernel)": (lambda: _linear(4, 72, 96), {}),
    "fused_linear_relu many rows (GEMM)": (lambda: _linear(130, 72, 96), {}),
    "fused_linear_relu half many rows": (lambda: _linear(130, 72, 96, dtype=F16), {}),
    "fused_linear_relu_packed": (lambda: _linear(130, 72, 96, packed=True), {}),
    "fused_linear_relu backward": (lambda: _linear(130, 72, 96, backward=True), {}),
    "fused_linear_relu backward, transposed input and weight": (
        lambda: _linear(130, 72, 96, backward=True, strided=True),
        {},
    ),
    "fused_linear_relu bfloat16, transposed input and weight": (
        lambda: _linear(100, 64, 128, dtype=BF16, strided=True),
        {},
    ),
    "fused_linear_relu bfloat16 (AMX where the CPU has it)": (lambda: _linear(100, 64, 128, dtype=BF16), {}),
    "fused_linear_relu bfloat16, activations' rows as A (AMX where the CPU has it)": (
        lambda: _linear(100, 64, 128, dtype=BF16),
        {"XKERNELS_AMX_GEMM_BLOCKS": "linear=rows"},
    ),
    "layer_norm forward": (lambda: _layer_norm((64, 96)), {}),
    "layer_norm backward": (lambda: _layer_norm((64, 96), backward=True), {}),
    "layer_norm backward bfloat16": (lambda: _layer_norm((64, 96), backward=True, dtype=BF16), {}),
    "layer_norm backward, strided input": (lambda: _layer_norm((64, 96), backward=True, strided=True), {}),
}


def _identical(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("case", list(CASES), ids=[re.sub(r"[^A-Za-z0-9_]+", "-", c).strip("-") for c in CASES])
def test_a_failed_launch_releases_nothing_under_a_queued_kernel(checking, case, monkeypatch):
    make, env = CASES[case]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run = make()
    first = [t.detach().clone() for t in run()]  # kernels built; the normal path
    report = checking.launch_check_report(reset=True)
    assert report["unsafe_releases"] == 0, f"{case}: memory released under queued kernels (normal path): {report}"

    failed = 0
    for n in range(1, MAX_LAUNCHES + 1):
        checking.fail_launch_after(n)
        try:
            run()
        except RuntimeError as e:
            assert "failed on purpose" in str(e), f"{case}: launch {n}: not the planted error: {e}"
            failed += 1
            report = checking.launch_check_report(reset=True)
            assert report["injected_failures"] == 1, report
            assert report["unsafe_releases"] == 0, (
                f"{case}: with launch {n} failing, host memory was released while kernels were still queued "
                f"(not drained before the route's temporaries died): {report}"
            )
            continue
        assert checking.launch_check_report()["pending_failure"] > 0, f"{case}: the call made fewer launches"
        checking.fail_launch_after(0)
        break
    else:
        pytest.fail(f"{case}: still failing at launch {MAX_LAUNCHES}")
    assert failed >= 1, f"{case}: made no launch"
    again = [t.detach() for t in run()]
    assert _identical(again, first), f"{case}: results after the failed calls differ from the clean call's"
    assert checking.launch_check_report()["unsafe_releases"] == 0
