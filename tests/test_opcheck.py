"""torch.library.opcheck (schema, autograd registration, fake tensor, AOT dispatch) for every op,
and the fake implementations' output metadata against the real kernels'."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.library import opcheck

ops = torch.ops.xkernels
CL = torch.channels_last


def r(*shape, grad=False, cl=False):
    t = torch.randn(*shape)
    if cl:
        t = t.to(memory_format=CL)
    return t.requires_grad_(grad)


def _linear_out(x, w, b):
    return ops.fused_linear_relu(x.detach(), w.detach(), None if b is None else b.detach())


def sample_calls():
    """(id, op overload, args[, kwargs]) for every op, with and without requires_grad and optional args."""
    calls = []
    for grad in (False, True):
        g = "grad" if grad else "nograd"
        calls += [
            (
                f"fused_linear_relu-{g}",
                ops.fused_linear_relu.default,
                (r(5, 7, grad=grad), r(3, 7, grad=grad), r(3, grad=grad)),
            ),
            (
                f"fused_linear_relu-3d-nobias-{g}",
                ops.fused_linear_relu.default,
                (r(2, 3, 4, grad=grad), r(5, 4, grad=grad), None),
            ),
            (
                f"conv2d-{g}",
                ops.conv2d.default,
                (r(2, 3, 6, 5, grad=grad), r(4, 3, 3, 2, grad=grad), r(4, grad=grad), [1, 2], [1, 0], [1, 1], 1),
            ),
            (
                f"conv2d-cl-input-{g}",
                ops.conv2d.default,
                (r(2, 4, 6, 5, grad=grad, cl=True), r(6, 2, 3, 3, grad=grad), None, [1, 1], [1, 1], [2, 1], 2),
            ),
            (
                f"conv2d-cl-weight-{g}",
                ops.conv2d.default,
                (
                    r(2, 3, 6, 5, grad=grad),
                    r(4, 3, 2, 2, grad=grad, cl=True),
                    r(4, grad=grad),
                    [2, 1],
                    [0, 1],
                    [1, 1],
                    1,
                ),
            ),
            (
                f"conv2d-unbatched-{g}",
                ops.conv2d.default,
                (r(3, 6, 5, grad=grad), r(4, 3, 3, 3, grad=grad), r(4, grad=grad), [1, 1], [1, 1], [1, 1], 1),
            ),
            (
                f"conv2d.padding-same-{g}",
                ops.conv2d.padding,
                (r(2, 3, 6, 5, grad=grad), r(4, 3, 4, 3, grad=grad), r(4, grad=grad), [1, 1], "same", [1, 2], 1),
            ),
            (
                f"conv2d.padding-valid-cl-{g}",
                ops.conv2d.padding,
                (r(2, 3, 6, 5, grad=grad, cl=True), r(4, 3, 3, 3, grad=grad), None, [2, 1], "valid", [1, 1], 1),
            ),
            (
                f"layer_norm-{g}",
                ops.layer_norm.default,
                (r(4, 3, 5, grad=grad), [3, 5], r(3, 5, grad=grad), r(3, 5, grad=grad), 1e-5),
            ),
            (f"layer_norm-noaffine-{g}", ops.layer_norm.default, (r(6, 7, grad=grad), [7], None, None, 1e-5)),
            (
                f"layer_norm_forward-{g}",
                ops.layer_norm_forward.default,
                (r(4, 9, grad=grad), [9], r(9, grad=grad), None, 1e-3),
            ),
        ]
    # layer_norm.out: inference only (inputs requiring grad raise; test_layer_norm.py checks that).
    calls += [
        ("layer_norm.out", ops.layer_norm.out, (r(4, 3, 5), [3, 5], r(3, 5), r(3, 5), 1e-5), {"out": r(4, 3, 5)}),
        ("layer_norm.out-noaffine", ops.layer_norm.out, (r(6, 7), [7], None, None, 1e-3), {"out": r(6, 7)}),
        ("layer_norm.out-transposed-out", ops.layer_norm.out, (r(6, 7), [7], r(7), None, 1e-5), {"out": r(7, 6).t()}),
    ]
    # Pre-packed linear weights (inference only).
    wp = r(70, 7)
    calls += [
        ("pack_linear_weight", ops.pack_linear_weight.default, (wp,)),
        (
            "fused_linear_relu_packed",
            ops.fused_linear_relu_packed.default,
            (r(5, 7), ops.pack_linear_weight(wp), r(70), 70),
        ),
        (
            "fused_linear_relu_packed-3d-nobias",
            ops.fused_linear_relu_packed.default,
            (r(2, 3, 7), ops.pack_linear_weight(wp), None, 70),
        ),
    ]
    # Backward ops (not differentiable themselves), every output_mask shape that autograd produces.
    x, w, b = r(5, 7), r(3, 7), r(3)
    y = _linear_out(x, w, b)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        calls.append(
            (f"fused_linear_relu_backward-{mask}", ops.fused_linear_relu_backward.default, (r(5, 3), x, w, y, mask))
        )
    for cl in (False, True):
        xi, wi = r(2, 4, 7, 6, cl=cl), r(6, 2, 3, 2)
        for mask in ([True, True, True], [False, True, False]):
            calls.append(
                (
                    f"conv2d_backward-cl{cl}-{mask}",
                    ops.conv2d_backward.default,
                    (r(2, 6, 4, 6), xi, wi, [2, 1], [1, 1], [1, 2], 2, mask),
                )
            )
    calls.append(
        (
            "conv2d_backward-unbatched",
            ops.conv2d_backward.default,
            (r(4, 6, 5), r(3, 6, 5), r(4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, [True, True, True]),
        )
    )
    xl = r(4, 3, 5)
    _, mean, rstd = ops.layer_norm_forward(xl, [3, 5], None, None, 1e-5)
    for affine, mask in ((True, [True, True, True]), (True, [False, True, False]), (False, [True, False, False])):
        wl, bl = (r(3, 5), r(3, 5)) if affine else (None, None)
        calls.append(
            (
                f"layer_norm_backward-affine{affine}-{mask}",
                ops.layer_norm_backward.default,
                (r(4, 3, 5), xl, [3, 5], mean, rstd, wl, bl, mask),
            )
        )
    return calls


CALLS = sample_calls()
# Ops that exist for CPU tensors only (pre-packed weights: README, csrc/include/xkernels/entry.h).
CPU_ONLY_OPS = {"xkernels::pack_linear_weight", "xkernels::fused_linear_relu_packed"}


@pytest.mark.parametrize(
    "op,args,kwargs", [(c[1], c[2], c[3] if len(c) > 3 else {}) for c in CALLS], ids=[c[0] for c in CALLS]
)
def test_opcheck(backend, op, args, kwargs):
    if backend.device.type != "cpu" and op._schema.name in CPU_ONLY_OPS:
        pytest.skip(f"{op._schema.name} is a CPU-only op (pre-packed weights); backend '{backend}' runs cuda tensors")
    opcheck(op, _on_device(args, backend.device), _on_device(kwargs, backend.device))


def _on_device(obj, device):
    """The sample's tensors (made once, on the CPU, at collection) on the backend's device, with their memory
    format and requires_grad."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device).requires_grad_(obj.requires_grad)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _on_device(v, device) for k, v in obj.items()}
    return obj


# ---------------------------------------------------------------- fake vs real metadata
# opcheck compares fake and real outputs, but not the strides of empty tensors and not every
# memory-format corner (size-1 dims make a tensor both NCHW- and channels_last-contiguous, and
# C++ and Python each decide "suggests channels_last" separately). Compare them directly.

CONV_META = {
    "nchw": ((2, 3, 6, 5), (4, 3, 3, 3), False, False),
    "cl_input": ((2, 3, 6, 5), (4, 3, 3, 3), True, False),
    "cl_weight": ((2, 3, 6, 5), (4, 3, 3, 3), False, True),
    "cl_input_1x1_spatial": ((2, 3, 1, 1), (4, 3, 1, 1), True, False),
    "cl_weight_1x1": ((2, 3, 4, 4), (4, 3, 1, 1), False, True),
    "cl_input_one_channel": ((2, 1, 5, 5), (3, 1, 3, 3), True, False),
    "cl_input_batch1": ((1, 3, 5, 5), (2, 3, 3, 3), True, False),
    "cl_weight_empty_batch": ((0, 3, 5, 5), (2, 3, 3, 3), False, True),
    "cl_input_empty_batch": ((0, 3, 5, 5), (2, 3, 3, 3), True, False),
    "unbatched_cl_weight": ((3, 5, 5), (2, 3, 3, 3), False, True),
    "cl_input_no_channels": ((2, 0, 5, 5), (2, 0, 3, 3), True, False),
    "cl_weight_no_channels": ((2, 0, 5, 5), (2, 0, 3, 3), False, True),
}


def _assert_same_meta(real, fake, what):
    assert real.shape == fake.shape, f"{what}: shape {real.shape} vs fake {fake.shape}"
    assert real.dtype == fake.dtype, f"{what}: dtype {real.dtype} vs fake {fake.dtype}"
    assert real.stride() == fake.stride(), f"{what}: strides {real.stride()} vs fake {fake.stride()}"


@pytest.mark.parametrize("cfg", CONV_META.values(), ids=CONV_META.keys())
def test_conv2d_fake_matches_real(backend, cfg):
    in_shape, w_shape, cl_in, cl_w = cfg
    x, w = r(*in_shape, cl=cl_in and len(in_shape) == 4), r(*w_shape, cl=cl_w)
    b = r(w_shape[0])
    params = ([1, 1], [1, 1], [1, 1], 1)
    out = ops.conv2d(x, w, b, *params)
    dy = torch.randn_like(out)
    grads = ops.conv2d_backward(dy, x, w, *params, [True, True, True])
    with FakeTensorMode() as mode:
        fx, fw, fb, fdy = (mode.from_tensor(t) for t in (x, w, b, dy))
        fout = ops.conv2d(fx, fw, fb, *params)
        fgrads = ops.conv2d_backward(fdy, fx, fw, *params, [True, True, True])
    _assert_same_meta(out, fout, "output")
    for name, g, fg in zip(("grad_input", "grad_weight", "grad_bias"), grads, fgrads):
        _assert_same_meta(g, fg, name)


@pytest.mark.parametrize("mask", [[True, True, True], [False, False, False], [True, False, True]], ids=str)
@pytest.mark.parametrize("empty", ["none", "rows", "K", "N"])
def test_linear_and_layer_norm_fake_matches_real(backend, empty, mask):
    M, K, N = {"none": (4, 5, 3), "rows": (0, 5, 3), "K": (4, 0, 3), "N": (4, 5, 0)}[empty]
    x, w, b = r(2, M, K), r(N, K), r(N)
    y = ops.fused_linear_relu(x, w, b)
    dy, dx = torch.randn_like(y), torch.randn_like(x)
    real = [y, *ops.fused_linear_relu_backward(dy, x, w, y, mask)]
    lw, lb = r(K), r(K)
    lreal = ops.layer_norm_forward(x, [K], lw, lb, 1e-5)
    lreal_b = ops.layer_norm_backward(dx, x, [K], lreal[1], lreal[2], lw, lb, mask)
    with FakeTensorMode() as mode:
        fx, fw, fb, fy, fdy, fdx = (mode.from_tensor(t) for t in (x, w, b, y, dy, dx))
        fake = [ops.fused_linear_relu(fx, fw, fb), *ops.fused_linear_relu_backward(fdy, fx, fw, fy, mask)]
        flw, flb, fmean, frstd = (mode.from_tensor(t) for t in (lw, lb, lreal[1], lreal[2]))
        flreal = ops.layer_norm_forward(fx, [K], flw, flb, 1e-5)
        flreal_b = ops.layer_norm_backward(fdx, fx, [K], fmean, frstd, flw, flb, mask)
    for i, (a, f) in enumerate(zip(real, fake)):
        _assert_same_meta(a, f, f"fused_linear_relu output {i}")
    for i, (a, f) in enumerate(zip([*lreal, *lreal_b], [*flreal, *flreal_b])):
        _assert_same_meta(a, f, f"layer_norm output {i}")


@pytest.mark.parametrize("rows", [0, 3])
def test_layer_norm_backward_fake_matches_real_transposed_affine(backend, rows):
    """Grads of non-contiguous (transposed) weight/bias come back contiguous, also with no rows."""
    x, w, b = r(rows, 4, 3), r(3, 4).t(), r(3, 4).t()
    _, mean, rstd = ops.layer_norm_forward(x, [4, 3], w, b, 1e-5)
    dy = torch.randn_like(x)
    real = ops.layer_norm_backward(dy, x, [4, 3], mean, rstd, w, b, [True, True, True])
    with FakeTensorMode() as mode:
        f = [mode.from_tensor(t) for t in (dy, x, mean, rstd, w, b)]
        fake = ops.layer_norm_backward(f[0], f[1], [4, 3], f[2], f[3], f[4], f[5], [True, True, True])
    for name, a, fk in zip(("grad_input", "grad_weight", "grad_bias"), real, fake):
        _assert_same_meta(a, fk, name)
