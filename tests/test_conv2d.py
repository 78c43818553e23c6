"""conv2d forward and backward against torch.nn.functional.conv2d in float64."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import DTYPES, assert_close

from compare import check_forward_backward, memory_formats, randn, small_ints

NAMES = ("input", "weight", "bias")
CL = torch.channels_last


class Case(NamedTuple):
    N: int
    C: int
    H: int
    W: int
    O: int
    KH: int
    KW: int
    stride: int | tuple = 1
    padding: int | tuple | str = 0
    dilation: int | tuple = 1
    groups: int = 1

    def tensors(self, dtype, with_bias=True):
        x = randn(self.N, self.C, self.H, self.W, dtype=dtype)
        w = randn(self.O, self.C // self.groups, self.KH, self.KW, dtype=dtype)
        return x, w, (randn(self.O, dtype=dtype) if with_bias else None)

    def ours(self, x, w, b):
        return xkernels.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)

    def oracle(self, x, w, b):
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)


CASES = {
    "basic": Case(2, 3, 7, 9, 4, 3, 3),
    "all_ones": Case(1, 1, 1, 1, 1, 1, 1),
    "primes_strided_dilated": Case(3, 5, 11, 13, 7, 3, 5, stride=(2, 3), padding=(1, 2), dilation=(2, 1)),
    "groups_asymmetric": Case(2, 6, 9, 8, 9, 3, 2, stride=(1, 2), padding=(2, 0), dilation=(1, 2), groups=3),
    "depthwise": Case(2, 4, 7, 7, 8, 3, 3, padding=1, groups=4),
    "kernel_larger_than_input": Case(1, 2, 3, 2, 3, 5, 4, padding=(1, 2)),
    "stride_larger_than_kernel": Case(2, 3, 10, 11, 2, 2, 2, stride=(3, 4)),
    "pointwise": Case(2, 8, 5, 3, 5, 1, 1),
    "empty_batch": Case(0, 3, 5, 5, 4, 3, 3, padding=1),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch(backend, dtype, case, with_bias):
    out, expected = check_forward_backward(
        case.ours, case.oracle, case.tensors(dtype, with_bias), NAMES, dtype, "conv2d"
    )
    assert out.is_contiguous()


FORMAT_CASES = {k: CASES[k] for k in ("basic", "groups_asymmetric", "depthwise", "all_ones", "empty_batch")}


@pytest.mark.parametrize("layout", ["input", "weight", "both"], ids=lambda s: f"channels_last_{s}")
@pytest.mark.parametrize("case", FORMAT_CASES.values(), ids=FORMAT_CASES.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_channels_last(backend, dtype, case, layout):
    """channels_last input and/or weight: values as F.conv2d, and the output memory format F.conv2d gives."""
    x, w, b = case.tensors(dtype)
    if layout in ("input", "both"):
        x = x.to(memory_format=CL)
    if layout in ("weight", "both"):
        w = w.to(memory_format=CL)
    out, expected = check_forward_backward(
        case.ours, case.oracle, [x, w, b], NAMES, dtype, f"conv2d[channels_last {layout}]"
    )
    # The memory format of torch's conv2d on the same tensors in the same dtype (the float64 oracle's can
    # differ: on CUDA cuDNN's rule keeps float64 contiguous). An empty output has no meaningful layout.
    same = case.oracle(x, w, b)
    if out.numel() > 0:
        assert memory_formats(out) == memory_formats(same), (out.stride(), same.stride())


def test_channels_last_grads_format(backend):
    """grad_input and grad_weight come back channels_last, as aten's conv2d backward gives them."""
    case = CASES["basic"]
    x, w, b = case.tensors(torch.float32)
    x = x.to(memory_format=CL).requires_grad_()
    w = w.requires_grad_()
    out = case.ours(x, w, b)
    gx, gw = torch.autograd.grad(out, [x, w], torch.randn_like(out))
    # torch's conv2d backward on the same float32 tensors (the float64 oracle's formats can differ on CUDA).
    rx, rw = (t.detach().clone().requires_grad_() for t in (x, w))
    ref = case.oracle(rx, rw, b)
    rgx, rgw = torch.autograd.grad(ref, [rx, rw], torch.randn_like(ref))
    assert memory_formats(gx) == memory_formats(rgx) == (False, True)
    assert memory_formats(gw) == memory_formats(rgw) == (False, True)


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "nchw_frozen_weight"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grads_with_full_and_partial_lane_blocks(backend, dtype, layout):
    """40 output channels: full 16- (or 8-) channel lane blocks and a partial one, so grad_bias's unmasked
    (uniform) and masked paths both run, reading grad_output channels_last (vector loads; also what an NCHW
    grad_output becomes when grad_weight needs it) or NCHW (a frozen weight: strided loads); every gradient
    against float64 with the tolerance for its number of terms (grad_input 40 * 9, the others 2 * 9 * 7)."""
    case = Case(2, 8, 9, 7, 40, 3, 3, padding=1)
    x, w, b = case.tensors(dtype)
    if layout == "channels_last":
        x, w = x.to(memory_format=CL), w.to(memory_format=CL)
    wants = (True, layout != "nchw_frozen_weight", True)
    ours = [t.detach().requires_grad_(r) for t, r in zip((x, w, b), wants)]
    ref = [t.detach().double().requires_grad_(r) for t, r in zip((x, w, b), wants)]
    out = case.ours(*ours)
    expected = case.oracle(*ref)
    go = randn(*out.shape, dtype=dtype)
    if layout == "channels_last":
        go = go.to(memory_format=CL)
    pick = [i for i, r in enumerate(wants) if r]
    grads = torch.autograd.grad(out, [ours[i] for i in pick], go)
    ref_grads = torch.autograd.grad(expected, [ref[i] for i in pick], go.double())
    terms = (40 * 9, 2 * 9 * 7, 2 * 9 * 7)
    for i, g, rg in zip(pick, grads, ref_grads):
        assert_close(g, rg, dtype, f"conv2d[{layout}, 40 channels]: grad of {NAMES[i]}", terms=terms[i])


def _layout(kind, case, dtype):
    x, w, b = case.tensors(dtype)
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    if kind == "sliced":
        x = randn(N, C, 2 * H, W + 1, dtype=dtype)[:, :, ::2, 1:]
    elif kind == "transposed_hw":
        x = randn(N, C, W, H, dtype=dtype).transpose(2, 3)
        w = randn(O, Cg, KW, KH, dtype=dtype).transpose(2, 3)
    elif kind == "storage_offset":
        x = randn(x.numel() + 7, dtype=dtype)[7:].view(N, C, H, W)
        w = randn(w.numel() + 3, dtype=dtype)[3:].view(O, Cg, KH, KW)
        b = randn(O + 2, dtype=dtype)[2:]
    elif kind == "odd_strides":  # neither NCHW nor channels_last
        w = randn(KH, O, Cg, KW, dtype=dtype).permute(1, 2, 0, 3)
        b = randn(2 * O, dtype=dtype)[::2]
    elif kind != "noncontiguous_grad":
        raise AssertionError(kind)
    return x, w, b


@pytest.mark.parametrize("layout", ["sliced", "transposed_hw", "storage_offset", "odd_strides", "noncontiguous_grad"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts(backend, dtype, layout):
    case = CASES["groups_asymmetric"]
    x, w, b = _layout(layout, case, dtype)
    if layout == "storage_offset":
        assert x.storage_offset() > 0 and w.storage_offset() > 0
    check_forward_backward(
        case.ours,
        case.oracle,
        [x, w, b],
        NAMES,
        dtype,
        f"conv2d[{layout}]",
        noncontiguous_grad=layout == "noncontiguous_grad",
    )


UNBATCHED = {k: CASES[k] for k in ("basic", "primes_strided_dilated", "groups_asymmetric", "all_ones")}


@pytest.mark.parametrize("channels_last_weight", [False, True], ids=["nchw", "channels_last_weight"])
@pytest.mark.parametrize("case", UNBATCHED.values(), ids=UNBATCHED.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unbatched(backend, dtype, case, channels_last_weight):
    x, w, b = case.tensors(dtype)
    x = x[0]
    if channels_last_weight:
        w = w.to(memory_format=CL)
    out, _ = check_forward_backward(case.ours, case.oracle, [x, w, b], NAMES, dtype, "conv2d[unbatched]")
    assert out.dim() == 3 and out.is_contiguous()


# (KH, KW, dilation): odd and even kernels; even kernels make aten pad one more after than before.
SAME = [(3, 3, 1), (4, 2, 1), (2, 3, (2, 3)), (5, 4, (1, 2)), (1, 1, 1)]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # aten's oracle, not xkernels
@pytest.mark.parametrize("KH,KW,dilation", SAME, ids=[f"k{a}x{b}-d{d}" for a, b, d in SAME])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_padding_same(backend, dtype, KH, KW, dilation):
    case = Case(2, 4, 9, 8, 6, KH, KW, padding="same", dilation=dilation, groups=2)
    out, _ = check_forward_backward(case.ours, case.oracle, case.tensors(dtype), NAMES, dtype, "conv2d[same]")
    assert out.shape[-2:] == (9, 8)


@pytest.mark.parametrize("stride", [1, (2, 3)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_padding_valid(backend, dtype, stride):
    case = Case(2, 3, 9, 10, 5, 3, 2, stride=stride, padding="valid", dilation=(1, 2))
    check_forward_backward(case.ours, case.oracle, case.tensors(dtype), NAMES, dtype, "conv2d[valid]")


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_padding_same_channels_last(backend):
    case = Case(2, 4, 7, 6, 5, 4, 3, padding="same")
    x, w, b = case.tensors(torch.float32)
    x = x.to(memory_format=CL)
    out, _ = check_forward_backward(case.ours, case.oracle, [x, w, b], NAMES, torch.float32, "conv2d[same,cl]")
    assert memory_formats(out) == memory_formats(case.oracle(x, w, b))  # torch's, same dtype and device


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_no_input_channels(backend, dtype, with_bias):
    """C = 0: every output is an empty sum, i.e. the bias (or 0). (aten returns a 0-channel tensor
    here, which contradicts its own shape rule, so the oracle is written out.)"""
    x, w = randn(2, 0, 5, 4, dtype=dtype), randn(3, 0, 3, 3, dtype=dtype)
    b = randn(3, dtype=dtype) if with_bias else None
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    bs = b.clone().requires_grad_() if with_bias else None
    out = xkernels.conv2d(xs, ws, bs, padding=1)
    expected = torch.zeros(2, 3, 5, 4, dtype=dtype) + (b.view(1, 3, 1, 1) if with_bias else 0)
    assert torch.equal(out, expected)
    grads = torch.autograd.grad(out, [t for t in (xs, ws, bs) if t is not None], torch.ones_like(out))
    assert grads[0].shape == x.shape and grads[1].shape == w.shape
    if with_bias:
        assert torch.equal(grads[2], torch.full((3,), 40.0, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_no_output_channels(backend, dtype):
    """O = 0 (aten rejects it; the empty result and zero grads are the obvious answer)."""
    xs = randn(2, 3, 5, 4, dtype=dtype).requires_grad_()
    ws = randn(0, 3, 3, 3, dtype=dtype).requires_grad_()
    bs = randn(0, dtype=dtype).requires_grad_()
    out = xkernels.conv2d(xs, ws, bs, padding=1)
    assert out.shape == (2, 0, 5, 4) and out.dtype == dtype
    gx, gw, gb = torch.autograd.grad(out, [xs, ws, bs], torch.ones_like(out))
    assert torch.equal(gx, torch.zeros_like(xs)) and gw.shape == ws.shape and gb.shape == (0,)


@pytest.mark.parametrize("case", ["basic", "primes_strided_dilated", "groups_asymmetric"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_small_integers_exact(backend, case, channels_last):
    """Integer inputs: every product and partial sum is exact in float32, so results must be exact."""
    c = CASES[case]
    x = small_ints(c.N, c.C, c.H, c.W)
    w = small_ints(c.O, c.C // c.groups, c.KH, c.KW)
    b = small_ints(c.O)
    if channels_last:
        x = x.to(memory_format=CL)
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    out = c.ours(xs, ws, bs)
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    expected = c.oracle(*ref)
    assert torch.equal(out, expected.float())
    go = small_ints(*out.shape)
    grads = torch.autograd.grad(out, [xs, ws, bs], go)
    ref_grads = torch.autograd.grad(expected, ref, go.double())
    for n, g, r in zip(NAMES, grads, ref_grads):
        assert torch.equal(g, r.float()), f"grad of {n} not exact"


def test_via_torch_ops(backend):
    x, w, b = torch.randn(1, 2, 6, 5), torch.randn(3, 2, 3, 3), torch.randn(3)
    x64, w64, b64 = x.double(), w.double(), b.double()
    assert_close(
        torch.ops.xkernels.conv2d(x, w, b, [1, 1], [1, 1], [1, 1], 1),
        F.conv2d(x64, w64, b64, 1, 1),
        torch.float32,
        "conv2d",
    )
    assert_close(
        torch.ops.xkernels.conv2d.padding(x, w, b, [1, 1], "same", [1, 1], 1),
        F.conv2d(x64, w64, b64, padding="same"),
        torch.float32,
        "conv2d.padding",
    )
