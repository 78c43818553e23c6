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
        sycl.set_launch_checking(True)
        sycl.fail_launch_after(0)
        sycl.launch_check_report(reset=True)
        yield sycl
        sycl.fail_launch_after(0)
        sycl.set_launch_checking(False)
        sycl.launch_check_report(reset=True)


def _randn(*shape, dtype=torch.float32, fmt=None, grad=False):
    t = torch.randn(*shape, dtype=torch.float64).to(dtype)
    if fmt is not None:
        t = t.contiguous(memory_format=fmt)
    return t.requires_grad_(grad)


def _conv_fwd(x, w, b, stride=1, padding=0, groups=1, relu=False, residual=None):
    def run():
        if relu:
            return (torch.ops.xkernels.conv2d_relu(x, w, b, [stride] * 2, [padding] * 2, [1, 1], groups, residual),)
        return (torch.ops.xkernels.conv2d(x, w, b, [stride] * 2, [padding] * 2, [1, 1], groups),)

    return run


def _conv_packed(x, w, b, stride=1, padding=0, groups=1):
    def run():
        packed = torch.ops.xkernels.pack_conv2d_weight(w, groups)
        out = torch.ops.xkernels.conv2d_packed(
            x, packed, list(w.shape), b, [stride] * 2, [padding] * 2, [1, 1], groups, None, True
        )
        return packed, out

    return run


def _conv_bwd(x, w, b, stride=1, padding=0, groups=1, expanded=False):
    def run():
        out = torch.ops.xkernels.conv2d(x, w, b, [stride] * 2, [padding] * 2, [1, 1], groups)
        # expanded: the gradient of out.sum() (every stride 0), which the backward first makes dense
        g = torch.ones((), dtype=out.dtype).expand_as(out) if expanded else out.cos()
        return torch.ops.xkernels.conv2d_backward(g, x, w, [stride] * 2, [padding] * 2, [1, 1], groups, [True] * 3)

    return run


def _linear(m, n, k, dtype=torch.float32, packed=False, backward=False):
    x, w, b = _randn(m, k, dtype=dtype), _randn(n, k, dtype=dtype), _randn(n, dtype=dtype)

    def run():
        if packed:
            pw = torch.ops.xkernels.pack_linear_weight(w)
            return pw, torch.ops.xkernels.fused_linear_relu_packed(x, pw, b, n)
        out = torch.ops.xkernels.fused_linear_relu(x, w, b)
        if not backward:
            return (out,)
        return torch.ops.xkernels.fused_linear_relu_backward(out.cos(), x, w, out, [True, True, True])

    return run


def _layer_norm(shape, backward=False, dtype=torch.float32):
    x, w, b = _randn(*shape, dtype=dtype), _randn(shape[-1], dtype=dtype), _randn(shape[-1], dtype=dtype)

    def run():
        out, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [shape[-1]], w, b, 1e-5)
        if not backward:
            return out, mean, rstd
        return torch.ops.xkernels.layer_norm_backward(out.cos(), x, [shape[-1]], mean, rstd, w, b, [True] * 3)

    return run


# name -> (a function making the case's run(), environment overrides)
CASES = {
    "conv2d 1x1 channels_last (pixel GEMM)": (
        lambda: _conv_fwd(_randn(2, 32, 8, 8, fmt=CL), _randn(48, 32, 1, 1), _randn(48)),
        {},
    ),
    "conv2d_relu 1x1 stride 2 with residual (strided pixel GEMM)": (
        lambda: _conv_fwd(
            _randn(2, 32, 8, 8, fmt=CL),
            _randn(48, 32, 1, 1),
            _randn(48),
            stride=2,
            relu=True,
            residual=_randn(2, 48, 4, 4, fmt=CL),
        ),
        {},
    ),
    "conv2d_packed 1x1 channels_last": (
        lambda: _conv_packed(_randn(2, 32, 8, 8, fmt=CL), _randn(64, 32, 1, 1), _randn(64)),
        {},
    ),
    "conv2d 1x1 NCHW (per-image GEMM)": (
        lambda: _conv_fwd(_randn(2, 32, 32, 32), _randn(40, 32, 1, 1), _randn(40)),
        {},
    ),
    "conv2d_packed 1x1 NCHW (per-image GEMM, unpacked weight)": (
        lambda: _conv_packed(_randn(1, 32, 32, 32), _randn(64, 32, 1, 1), _randn(64)),
        {},
    ),
    "conv2d 3x3 Winograd, weight transformed per call": (
        lambda: _conv_fwd(_randn(1, 64, 10, 10, fmt=CL), _randn(64, 64, 3, 3), _randn(64), padding=1),
        {"XKERNELS_CONV_WINOGRAD": "1"},
    ),
    "conv2d 3x3 Winograd, bfloat16 weight widened per call": (
        lambda: _conv_fwd(
            _randn(1, 64, 10, 10, dtype=torch.bfloat16),
            _randn(64, 64, 3, 3, dtype=torch.bfloat16),
            _randn(64, dtype=torch.bfloat16),
            padding=1,
        ),
        {"XKERNELS_CONV_WINOGRAD": "1"},
    ),
    "conv2d_packed 3x3 Winograd": (
        lambda: _conv_packed(_randn(1, 64, 10, 10, fmt=CL), _randn(64, 64, 3, 3), _randn(64), padding=1),
        {"XKERNELS_CONV_WINOGRAD": "1"},
    ),
    "conv2d_packed 3x3 direct": (
        lambda: _conv_packed(_randn(2, 16, 9, 9), _randn(24, 16, 3, 3), _randn(24), padding=1),
        {"XKERNELS_CONV_WINOGRAD": "0"},
    ),
    "conv2d 3x3 direct, half": (
        lambda: _conv_fwd(
            _randn(2, 8, 9, 9, dtype=torch.float16), _randn(12, 8, 3, 3, dtype=torch.float16), None, padding=1
        ),
        {"XKERNELS_CONV_WINOGRAD": "0"},
    ),
    "conv2d 7x7 stride 2 stem": (
        lambda: _conv_fwd(_randn(1, 3, 20, 20, fmt=CL), _randn(16, 3, 7, 7), _randn(16), stride=2, padding=3),
        {},
    ),
    "conv2d depthwise 3x3": (
        lambda: _conv_fwd(_randn(2, 16, 9, 9, fmt=CL), _randn(16, 1, 3, 3), _randn(16), padding=1, groups=16),
        {},
    ),
    "conv2d backward 1x1 channels_last (pixel GEMMs)": (
        lambda: _conv_bwd(_randn(2, 32, 8, 8, fmt=CL), _randn(48, 32, 1, 1), _randn(48)),
        {},
    ),
    "conv2d backward 1x1 channels_last, expanded gradient (copied dense first)": (
        lambda: _conv_bwd(_randn(2, 32, 8, 8, fmt=CL), _randn(48, 32, 1, 1), _randn(48), expanded=True),
        {},
    ),
    "conv2d backward 1x1 stride 2 channels_last": (
        lambda: _conv_bwd(_randn(2, 32, 8, 8, fmt=CL), _randn(48, 32, 1, 1), _randn(48), stride=2),
        {},
    ),
    "conv2d backward 1x1 NCHW (per-image GEMMs)": (
        lambda: _conv_bwd(_randn(1, 32, 32, 32), _randn(40, 32, 1, 1), _randn(40)),
        {},
    ),
    "conv2d backward 3x3 channels_last (Winograd grad_input, window grad_weight)": (
        lambda: _conv_bwd(_randn(1, 64, 48, 48, fmt=CL), _randn(64, 64, 3, 3), _randn(64), padding=1),
        {"XKERNELS_CONV_WINOGRAD": "1"},
    ),
    "conv2d backward 3x3 NCHW (direct grad_input, im2col grad_weight)": (
        lambda: _conv_bwd(_randn(2, 8, 9, 9), _randn(12, 8, 3, 3), _randn(12), padding=1),
        {"XKERNELS_CONV_WINOGRAD": "0"},
    ),
    "conv2d backward 7x7 stride 2 stem (col2im grad_input, transposed grad_weight)": (
        lambda: _conv_bwd(_randn(1, 3, 20, 20, fmt=CL), _randn(16, 3, 7, 7), _randn(16), stride=2, padding=3),
        {},
    ),
    "conv2d backward grouped (direct grad_weight kernels)": (
        lambda: _conv_bwd(_randn(2, 16, 9, 9, fmt=CL), _randn(16, 4, 3, 3), _randn(16), padding=1, groups=4),
        {},
    ),
    "conv2d backward depthwise (grad_weight over groups)": (
        lambda: _conv_bwd(_randn(2, 16, 9, 9), _randn(16, 1, 3, 3), _randn(16), padding=1, groups=16),
        {},
    ),
    "conv2d backward bfloat16": (
        lambda: _conv_bwd(
            _randn(2, 8, 9, 9, dtype=torch.bfloat16, fmt=CL),
            _randn(12, 8, 3, 3, dtype=torch.bfloat16),
            _randn(12, dtype=torch.bfloat16),
            padding=1,
        ),
        {},
    ),
    "fused_linear_relu few rows (dot kernel)": (lambda: _linear(4, 72, 96), {}),
    "fused_linear_relu many rows (GEMM)": (lambda: _linear(130, 72, 96), {}),
    "fused_linear_relu half many rows": (lambda: _linear(130, 72, 96, dtype=torch.float16), {}),
    "fused_linear_relu_packed": (lambda: _linear(130, 72, 96, packed=True), {}),
    "fused_linear_relu backward": (lambda: _linear(130, 72, 96, backward=True), {}),
    "fused_linear_relu bfloat16 (AMX where the CPU has it)": (
        lambda: _linear(100, 64, 128, dtype=torch.bfloat16),
        {},
    ),
    "conv2d bfloat16 1x1 channels_last (AMX where the CPU has it)": (
        lambda: _conv_fwd(
            _randn(1, 32, 7, 7, dtype=torch.bfloat16, fmt=CL),
            _randn(64, 32, 1, 1, dtype=torch.bfloat16),
            _randn(64, dtype=torch.bfloat16),
        ),
        {},
    ),
    "conv2d bfloat16 3x3 channels_last (AMX where the CPU has it)": (
        lambda: _conv_fwd(
            _randn(1, 32, 7, 7, dtype=torch.bfloat16, fmt=CL),
            _randn(64, 32, 3, 3, dtype=torch.bfloat16),
            _randn(64, dtype=torch.bfloat16),
            padding=1,
        ),
        {},
    ),
    "layer_norm forward": (lambda: _layer_norm((64, 96)), {}),
    "layer_norm backward": (lambda: _layer_norm((64, 96), backward=True), {}),
    "layer_norm backward bfloat16": (lambda: _layer_norm((64, 96), backward=True, dtype=torch.bfloat16), {}),
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
