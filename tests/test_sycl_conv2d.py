"""conv2d on the SYCL backend (kernels/conv2d.hpp via csrc/sycl/conv2d.cpp), forward and backward.

Every case is checked three ways:
  * against torch.nn.functional.conv2d in float64 on the same (rounded) inputs, with the
    per-dtype elementwise tolerances of xkernels.tolerances;
  * against the reference backend (parity): both results are in `dtype`, each within the
    tolerance of the float64 oracle, so they are compared with twice that tolerance;
  * small-integer float32 inputs, for which every product and partial sum is an exact integer:
    output and all three gradients must equal the float64 oracle exactly.
The cases cover the kernels' code paths: wide (>= 48 channels per group) and narrow tiles,
lanes over groups (depthwise and other many-group, few-channel convolutions),
channel counts that are not multiples of the lane vectors, pixel counts that are not multiples
of the pixel tile, taps outside the image (padding), strides (grad_input's exact-division
taps), dilation, groups and depthwise, NCHW and channels_last input and/or weight, unbatched, and both
work-group orders (channel-major when activations outweigh the weights, as in 3x3_pad1; pixel-major otherwise,
as in wide_tile and deep_layer_pixel_major).
The shared backend-parametrized suite (tests/test_conv2d.py) runs on "sycl" as well.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import xkernels
from xkernels.tolerances import DTYPES, assert_close, between_backends

import _backends


@pytest.fixture(scope="module", autouse=True)
def _sycl_available():
    _backends.get("sycl")


# (id, input shape, weight shape, stride, padding, dilation, groups)
CASES = [
    ("3x3_pad1", (2, 5, 9, 11), (7, 5, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("1x1", (2, 9, 7, 5), (6, 9, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    ("1x1_stride2", (1, 8, 9, 10), (5, 8, 1, 1), (2, 2), (0, 0), (1, 1), 1),
    ("5x5_pad2_odd", (1, 3, 13, 7), (4, 3, 5, 5), (1, 1), (2, 2), (1, 1), 1),
    ("asym_stride_pad", (2, 4, 11, 10), (5, 4, 3, 2), (2, 3), (1, 2), (1, 1), 1),
    ("dilation", (1, 3, 12, 13), (4, 3, 3, 3), (1, 2), (2, 1), (2, 3), 1),
    ("stride_dilation_pad", (2, 4, 10, 9), (3, 4, 3, 3), (3, 2), (2, 1), (2, 2), 1),
    ("groups2", (2, 6, 8, 9), (8, 3, 3, 3), (1, 2), (1, 0), (1, 1), 2),
    ("groups3_stride2", (1, 9, 9, 8), (6, 3, 2, 3), (2, 2), (1, 1), (1, 1), 3),
    ("depthwise", (2, 6, 9, 7), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), 6),
    ("depthwise_mult2_stride2", (1, 4, 11, 9), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4),
    ("depthwise_20_groups_dilated", (2, 20, 7, 6), (20, 1, 3, 3), (1, 1), (2, 1), (2, 1), 20),  # 2 lane blocks
    ("groups24_2in_1out", (1, 48, 6, 5), (24, 2, 3, 2), (1, 2), (1, 1), (1, 1), 24),
    ("depthwise_5x5_stride2", (2, 5, 12, 11), (5, 1, 5, 5), (2, 2), (2, 2), (1, 1), 5),  # 25 taps: 3 tap blocks
    ("wide_tile", (1, 5, 6, 7), (70, 5, 3, 3), (1, 1), (1, 1), (1, 1), 1),  # 70 = 64 + 6 channels
    ("wide_tile_bwd", (1, 70, 5, 4), (9, 70, 1, 3), (1, 1), (0, 1), (1, 1), 1),  # grad_input: 70 channels
    ("wide_groups", (1, 100, 4, 5), (100, 50, 1, 1), (1, 1), (0, 0), (1, 1), 2),
    ("kernel_covers_input", (2, 3, 4, 5), (4, 3, 4, 5), (1, 1), (0, 0), (1, 1), 1),
    ("padding_larger_than_kernel", (1, 2, 3, 3), (3, 2, 2, 2), (1, 1), (3, 2), (1, 1), 1),
    # weights outweigh activations: work-groups in pixel-major order (several pixel blocks x 2 channel tiles)
    ("deep_layer_pixel_major", (2, 8, 5, 6), (32, 8, 3, 3), (1, 1), (1, 1), (1, 1), 1),
]
CASE_IDS = [c[0] for c in CASES]

# Enough pixels that each work-group takes several pixel tiles (the last one partial). Their
# grad_weight / grad_bias reduce over ~1700-1900 pixels, beyond the few hundred terms the
# elementwise tolerances are sized for: exact small-integer checks, plus float checks with the
# reduction-length scaled tolerance (xkernels.tolerances.elementwise(dtype, terms)).
MANY_PIXEL_CASES = [
    ("1x1_many_pixels", (2, 4, 30, 31), (8, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    ("depthwise_many_pixels", (1, 16, 40, 41), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), 16),
]

# (input channels_last, weight channels_last)
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]
LAYOUT_IDS = ["nchw", "cl_input", "cl_weight", "cl_both"]


def _randn(shape, dtype):
    return torch.randn(shape).to(dtype)


def _small_ints(shape, dtype=torch.float32):
    return torch.randint(-3, 4, shape).to(dtype)


def _layout(t, cl):
    return t.contiguous(memory_format=torch.channels_last) if cl and t.dim() == 4 else t.contiguous()


def _formats(t):
    """(contiguous, channels_last-contiguous): compared instead of raw strides, which may differ in
    size-1 dimensions between two tensors of the same format."""
    return t.is_contiguous(), t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)


def _declared(x, w, b, stride, padding, dilation, groups, grad_out):
    """What the registered fakes (python/xkernels/ops.py) declare: the layout contract. Fake tensors keep
    the real device (the format rule is ATen's for that device and dtype); meta tensors would not."""
    with FakeTensorMode() as mode:
        fake = [None if t is None else mode.from_tensor(t) for t in (x, w, b, grad_out)]
        out = torch.ops.xkernels.conv2d(fake[0], fake[1], fake[2], stride, padding, dilation, groups)
        grads = torch.ops.xkernels.conv2d_backward(
            fake[3], fake[0], fake[1], stride, padding, dilation, groups, [True, True, True]
        )
    return out, grads


def _run(backend, x, w, b, stride, padding, dilation, groups, grad_out, mask=(True, True, True)):
    """Forward output and (grad_input, grad_weight, grad_bias) from the registered ops on `backend`."""
    with xkernels.use_backend(backend):
        out = torch.ops.xkernels.conv2d(x, w, b, stride, padding, dilation, groups)
        grads = torch.ops.xkernels.conv2d_backward(grad_out, x, w, stride, padding, dilation, groups, list(mask))
    return out, grads


def _oracle(x, w, b, stride, padding, dilation, groups, grad_out):
    """float64 torch forward and gradients on the same values."""
    xd = x.detach().double().requires_grad_(True)
    wd = w.detach().double().requires_grad_(True)
    bd = None if b is None else b.detach().double().requires_grad_(True)
    out = F.conv2d(xd, wd, bd, stride, padding, dilation, groups)
    params = [xd, wd] + ([bd] if bd is not None else [])
    grads = torch.autograd.grad(out, params, grad_out.double())
    channel_dim = grad_out.dim() - 3
    other_dims = [d for d in range(grad_out.dim()) if d != channel_dim]
    gb = grads[2] if bd is not None else grad_out.double().sum(dim=other_dims)
    return out.detach(), (grads[0], grads[1], gb)


def _assert_parity(actual, reference, dtype, what):
    rtol, atol = between_backends(dtype)
    assert actual.dtype == reference.dtype == dtype and actual.shape == reference.shape, what
    torch.testing.assert_close(
        actual.double(),
        reference.double(),
        rtol=rtol,
        atol=atol,
        msg=lambda m: f"{what} (sycl vs reference, {dtype}):\n{m}",
    )


def _random_problem(case, layout, dtype):
    """Random inputs of `case` in `layout` and `dtype`, a grad_output in the output's layout, and the float64
    oracle's output and gradients."""
    _name, xs, ws, stride, padding, dilation, groups = case
    x = _layout(_randn(xs, dtype), layout[0])
    w = _layout(_randn(ws, dtype), layout[1])
    b = _randn((ws[0],), dtype)
    out_shape = F.conv2d(x.double(), w.double(), None, stride, padding, dilation, groups).shape
    grad_out = _layout(_randn(out_shape, dtype), layout[0] or layout[1])
    exp_out, exp_grads = _oracle(x, w, b, stride, padding, dilation, groups, grad_out)
    return x, w, b, grad_out, exp_out, exp_grads


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d).replace("torch.", "") for d in DTYPES])
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_backward_vs_float64_and_reference(case, layout, dtype):
    name, xs, ws, stride, padding, dilation, groups = case
    x, w, b, grad_out, exp_out, exp_grads = _random_problem(case, layout, dtype)

    out, grads = _run("sycl", x, w, b, stride, padding, dilation, groups, grad_out)
    assert_close(out, exp_out, dtype, f"{name}: output")
    for g, e, what in zip(grads, exp_grads, ("grad_input", "grad_weight", "grad_bias")):
        assert_close(g, e, dtype, f"{name}: {what}")
    decl_out, decl_grads = _declared(x, w, b, stride, padding, dilation, groups, grad_out)
    for t, d, what in zip((out, *grads), (decl_out, *decl_grads), ("output", "grad_input", "grad_weight", "grad_bias")):
        assert _formats(t) == _formats(d), f"{name}: {what} strides {t.stride()}, declared {d.stride()}"

    ref_out, ref_grads = _run("reference", x, w, b, stride, padding, dilation, groups, grad_out)
    _assert_parity(out, ref_out, dtype, f"{name}: output")
    for g, r, what in zip(grads, ref_grads, ("grad_input", "grad_weight", "grad_bias")):
        _assert_parity(g, r, dtype, f"{name}: {what}")


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("case", CASES + MANY_PIXEL_CASES, ids=CASE_IDS + [c[0] for c in MANY_PIXEL_CASES])
def test_small_integers_exact(case, layout):
    name, xs, ws, stride, padding, dilation, groups = case
    x = _layout(_small_ints(xs), layout[0])
    w = _layout(_small_ints(ws), layout[1])
    b = _small_ints((ws[0],))
    out_shape = F.conv2d(x.double(), w.double(), None, stride, padding, dilation, groups).shape
    grad_out = _small_ints(out_shape)
    exp_out, exp_grads = _oracle(x, w, b, stride, padding, dilation, groups, grad_out)
    out, grads = _run("sycl", x, w, b, stride, padding, dilation, groups, grad_out)
    assert torch.equal(out.double(), exp_out), f"{name}: output not exact"
    for g, e, what in zip(grads, exp_grads, ("grad_input", "grad_weight", "grad_bias")):
        assert torch.equal(g.double(), e), f"{name}: {what} not exact, max diff {(g.double() - e).abs().max()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d).replace("torch.", "") for d in DTYPES])
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("case", MANY_PIXEL_CASES, ids=[c[0] for c in MANY_PIXEL_CASES])
def test_many_pixels_vs_float64(case, layout, dtype):
    name, xs, ws, stride, padding, dilation, groups = case
    x, w, b, grad_out, exp_out, exp_grads = _random_problem(case, layout, dtype)
    out, grads = _run("sycl", x, w, b, stride, padding, dilation, groups, grad_out)
    assert_close(out, exp_out, dtype, f"{name}: output")  # reductions of <= 9 terms
    assert_close(grads[0], exp_grads[0], dtype, f"{name}: grad_input")
    # grad_weight / grad_bias reduce over every output pixel of the batch (~1900 terms).
    terms = grad_out.numel() // grad_out.shape[1]
    for g, e, what in zip(grads[1:], exp_grads[1:], ("grad_weight", "grad_bias")):
        assert_close(g, e, dtype, f"{name}: {what}", terms=terms)


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d).replace("torch.", "") for d in DTYPES])
@pytest.mark.parametrize("stride,padding,dilation,groups", [((1, 1), (1, 1), (1, 1), 1), ((2, 1), (0, 2), (2, 1), 2)])
def test_unbatched(dtype, stride, padding, dilation, groups):
    x = _randn((4, 9, 8), dtype)
    w = _randn((6, 4 // groups, 3, 3), dtype)
    b = _randn((6,), dtype)
    out_shape = F.conv2d(x.double(), w.double(), None, stride, padding, dilation, groups).shape
    grad_out = _randn(out_shape, dtype)
    exp_out, exp_grads = _oracle(x, w, b, stride, padding, dilation, groups, grad_out)
    out, (gi, gw, gb) = _run("sycl", x, w, b, stride, padding, dilation, groups, grad_out)
    assert out.dim() == 3 and out.is_contiguous()
    assert gi.dim() == 3 and gi.is_contiguous()
    assert gw.is_contiguous()
    assert_close(out, exp_out, dtype, "unbatched: output")
    for g, e, what in zip((gi, gw, gb), exp_grads, ("grad_input", "grad_weight", "grad_bias")):
        assert_close(g, e, dtype, f"unbatched: {what}")


@pytest.mark.parametrize(
    "mask", [(True, False, False), (False, True, False), (False, False, True), (True, False, True), (False, True, True)]
)
def test_output_mask(mask):
    x, w = _randn((2, 4, 7, 6), torch.float32), _randn((6, 2, 3, 3), torch.float32)
    args = ((2, 1), (1, 1), (1, 1), 2)
    grad_out = _randn(F.conv2d(x, w, None, *args).shape, torch.float32)
    _, exp_grads = _oracle(x, w, None, *args, grad_out)
    _, grads = _run("sycl", x, w, None, *args, grad_out, mask=mask)
    for want, g, e, what in zip(mask, grads, exp_grads, ("grad_input", "grad_weight", "grad_bias")):
        if want:
            assert_close(g, e, torch.float32, f"mask {mask}: {what}")
        else:
            assert g.numel() == 0, f"mask {mask}: unrequested {what} has shape {tuple(g.shape)}"


def test_no_bias_and_autograd_through_public_api():
    x = _randn((2, 3, 8, 8), torch.float32).requires_grad_(True)
    w = _randn((5, 3, 3, 3), torch.float32).requires_grad_(True)
    with xkernels.use_backend("sycl"):
        out = xkernels.conv2d(x, w, None, stride=2, padding="valid")
        out.sum().backward()
    xd, wd = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    ref = F.conv2d(xd, wd, None, stride=2)
    ref.sum().backward()
    assert_close(out, ref.detach(), torch.float32, "no bias: output")
    assert_close(x.grad, xd.grad, torch.float32, "no bias: grad_input")
    assert_close(w.grad, wd.grad, torch.float32, "no bias: grad_weight")


def test_noncontiguous_views():
    """Sliced / transposed views and a storage offset reach the kernels as dense copies."""
    base = _randn((3, 10, 12, 14), torch.float32)
    x = base[1:, 2:8, ::2, 1:]  # storage offset, strided
    w = _randn((4, 6, 3, 3), torch.float32).transpose(2, 3)
    b = _randn((8,), torch.float32)[::2]
    grad_out = _randn(F.conv2d(x, w, b, 1, 1).shape, torch.float32).transpose(2, 3).contiguous().transpose(2, 3)
    exp_out, exp_grads = _oracle(x, w, b, (1, 1), (1, 1), (1, 1), 1, grad_out)
    out, grads = _run("sycl", x, w, b, (1, 1), (1, 1), (1, 1), 1, grad_out)
    assert_close(out, exp_out, torch.float32, "views: output")
    for g, e, what in zip(grads, exp_grads, ("grad_input", "grad_weight", "grad_bias")):
        assert_close(g, e, torch.float32, f"views: {what}")


@pytest.mark.parametrize("stride,padding,dilation", [((1, 1), (1, 1), (1, 1)), ((2, 1), (1, 2), (1, 2))])
def test_split_reduction_deterministic(stride, padding, dilation):
    """grad_weight / grad_bias sum pixel splits (here several, with boundaries inside output rows)
    in a fixed order: correct, and bitwise repeatable."""
    x, w = _randn((4, 16, 20, 19), torch.float32), _randn((24, 16, 3, 3), torch.float32)
    b = _randn((24,), torch.float32)
    grad_out = _randn(F.conv2d(x, w, None, stride, padding, dilation).shape, torch.float32)
    _, exp_grads = _oracle(x, w, b, stride, padding, dilation, 1, grad_out)
    _, g1 = _run("sycl", x, w, b, stride, padding, dilation, 1, grad_out)
    _, g2 = _run("sycl", x, w, b, stride, padding, dilation, 1, grad_out)
    # grad_input reduces over O*KH*KW (216) terms, grad_weight and grad_bias over N*OH*OW (up to 1520).
    pixels = grad_out.numel() // grad_out.shape[1]
    terms = (w.shape[0] * w.shape[2] * w.shape[3], pixels, pixels)
    for a, c, e, n, what in zip(g1, g2, exp_grads, terms, ("grad_input", "grad_weight", "grad_bias")):
        assert_close(a, e, torch.float32, what, terms=n)
        assert torch.equal(a, c), f"{what}: not bitwise repeatable"


def test_larger_layer_float32():
    """A ResNet-like layer (wide tile, several pixel splits crossing rows) against float64."""
    x, w = _randn((3, 64, 13, 13), torch.float32), _randn((64, 64, 3, 3), torch.float32) * 0.05
    b = _randn((64,), torch.float32)
    grad_out = _randn((3, 64, 13, 13), torch.float32)
    exp_out, exp_grads = _oracle(x, w, b, (1, 1), (1, 1), (1, 1), 1, grad_out)
    out, grads = _run("sycl", x, w, b, (1, 1), (1, 1), (1, 1), 1, grad_out)
    # Reductions of 576 (output, grad_input) and 507 (grad_weight) terms.
    assert_close(out, exp_out, torch.float32, "output", terms=576)
    for g, e, what in zip(grads, exp_grads, ("grad_input", "grad_weight", "grad_bias")):
        assert_close(g, e, torch.float32, what, terms=576)


def test_runs_on_sycl_backend():
    """The explicit request is honoured (never a silent fallback to the reference)."""
    x, w = _randn((1, 3, 6, 6), torch.float32), _randn((4, 3, 3, 3), torch.float32)
    grad_out = _randn((1, 4, 4, 4), torch.float32)
    with xkernels.dispatch_record() as rec:
        _run("sycl", x, w, None, (1, 1), (0, 0), (1, 1), 1, grad_out)
    counts = rec.counts()
    assert counts[("conv2d", "sycl", "cpu")] == 1, rec.summary()
    assert counts[("conv2d_backward", "sycl", "cpu")] == 1, rec.summary()
    assert not rec.fallbacks(), rec.summary()
