"""layer_norm forward and backward against torch.nn.functional.layer_norm in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import DTYPES, assert_close

from compare import check_forward_backward, randn

NAMES = ("input", "weight", "bias")


def run(normalized_shape, eps=1e-5):
    def ours(x, w, b):
        return xkernels.layer_norm(x, normalized_shape, w, b, eps)

    def oracle(x, w, b):
        return F.layer_norm(x, normalized_shape, w, b, eps)

    return ours, oracle


# (input shape, normalized_shape)
SHAPES = [
    ((1, 1), [1]),
    ((31,), [31]),  # one row
    ((7, 13), [13]),
    ((3, 5, 17), [17]),
    ((4, 6, 5), [6, 5]),  # multi-dim normalized_shape
    ((2, 3, 4, 5), [3, 4, 5]),
    ((2, 129), [129]),
    ((5, 1), [1]),  # rows of one element: output is the bias
    ((0, 8), [8]),  # no rows
    ((3, 0), [0]),  # empty rows
]
AFFINE = ["weight+bias", "weight", "bias", "none"]


@pytest.mark.parametrize(
    "shape,normalized_shape", SHAPES, ids=[f"{'x'.join(map(str, s))}-ns{'x'.join(map(str, n))}" for s, n in SHAPES]
)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch(backend, dtype, shape, normalized_shape, affine):
    x = randn(*shape, dtype=dtype)
    w = randn(*normalized_shape, dtype=dtype) if "weight" in affine else None
    b = randn(*normalized_shape, dtype=dtype) if "bias" in affine else None
    ours, oracle = run(normalized_shape)
    out, _ = check_forward_backward(ours, oracle, [x, w, b], NAMES, dtype, "layer_norm")
    assert out.is_contiguous()


def _layout(kind, dtype):
    x, w, b = randn(6, 4, 11, dtype=dtype), randn(11, dtype=dtype), randn(11, dtype=dtype)
    if kind == "transposed_rows":
        x = randn(4, 6, 11, dtype=dtype).transpose(0, 1)
    elif kind == "sliced":  # strided inside the normalized dimension
        x = randn(6, 4, 22, dtype=dtype)[:, :, ::2]
    elif kind == "transposed_normalized":  # normalized dims not innermost in memory
        x = randn(6, 11, 4, dtype=dtype).transpose(1, 2)
    elif kind == "storage_offset":
        x = randn(x.numel() + 9, dtype=dtype)[9:].view(6, 4, 11)
        w = randn(12, dtype=dtype)[1:]
        b = randn(13, dtype=dtype)[2:]
    elif kind == "strided_affine":
        w, b = randn(22, dtype=dtype)[::2], randn(33, dtype=dtype)[::3]
    elif kind != "noncontiguous_grad":
        raise AssertionError(kind)
    return x, w, b


LAYOUTS = [
    "transposed_rows",
    "sliced",
    "transposed_normalized",
    "storage_offset",
    "strided_affine",
    "noncontiguous_grad",
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts(backend, dtype, layout):
    x, w, b = _layout(layout, dtype)
    if layout in ("transposed_rows", "sliced", "transposed_normalized"):
        assert not x.is_contiguous()
    ours, oracle = run([11])
    check_forward_backward(
        ours,
        oracle,
        [x, w, b],
        NAMES,
        dtype,
        f"layer_norm[{layout}]",
        noncontiguous_grad=layout == "noncontiguous_grad",
    )


@pytest.mark.parametrize("eps", [1e-5, 0.5])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eps_and_constant_rows(backend, dtype, eps):
    """eps enters as 1/sqrt(var + eps): visible with a large eps, and the only thing keeping
    constant rows (var = 0) finite."""
    x = randn(5, 7, dtype=dtype) * 3
    x[2] = 1.5  # constant row
    w, b = randn(7, dtype=dtype), randn(7, dtype=dtype)
    ours, oracle = run([7], eps)
    out, _ = check_forward_backward(ours, oracle, [x, w, b], NAMES, dtype, f"layer_norm[eps={eps}]")
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_statistics(backend, dtype):
    """layer_norm_forward's mean and rstd: accumulation dtype, broadcastable shape, right values."""
    x = randn(3, 4, 6, 5, dtype=dtype)
    out, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [6, 5], None, None, 1e-5)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert mean.dtype == rstd.dtype == stat_dtype
    assert mean.shape == rstd.shape == (3, 4, 1, 1)
    x64 = x.double()
    ref_mean = x64.mean(dim=(-2, -1), keepdim=True)
    ref_rstd = (x64.var(dim=(-2, -1), unbiased=False, keepdim=True) + 1e-5).rsqrt()
    # Statistics are kept in the accumulation dtype (no rounding to `dtype`): float32 tolerance.
    tol_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert_close(mean.to(tol_dtype), ref_mean, tol_dtype, "mean")
    assert_close(rstd.to(tol_dtype), ref_rstd, tol_dtype, "rstd")
    assert_close(out, F.layer_norm(x64, [6, 5]), dtype, "output")


def test_int_normalized_shape(backend):
    x = torch.randn(4, 9)
    expected = F.layer_norm(x.double(), [9])
    assert_close(xkernels.layer_norm(x, 9), expected, torch.float32, "layer_norm(int)")
    assert_close(torch.ops.xkernels.layer_norm(x, [9]), expected, torch.float32, "torch.ops.xkernels.layer_norm")


# ---------------------------------------------------------------- layer_norm.out (caller-provided output)
OUT_SHAPES = [s for s in SHAPES if 0 not in s[0]] + [((4, 1000), [1000]), ((3, 37), [37])]  # partial sub-group steps


@pytest.mark.parametrize(
    "shape,normalized_shape",
    OUT_SHAPES,
    ids=[f"{'x'.join(map(str, s))}-ns{'x'.join(map(str, n))}" for s, n in OUT_SHAPES],
)
@pytest.mark.parametrize("affine", AFFINE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_out_matches_torch(backend, dtype, shape, normalized_shape, affine):
    x = randn(*shape, dtype=dtype)
    w = randn(*normalized_shape, dtype=dtype) if "weight" in affine else None
    b = randn(*normalized_shape, dtype=dtype) if "bias" in affine else None
    out = torch.full(shape, float("nan"), dtype=dtype)  # every element must be written
    result = xkernels.layer_norm(x, normalized_shape, w, b, 1e-5, out=out)
    assert result is out
    expected = F.layer_norm(
        x.double(), normalized_shape, None if w is None else w.double(), None if b is None else b.double(), 1e-5
    )
    assert_close(out, expected, dtype, "layer_norm(out=)")
    # The same values as the functional op (same kernel, statistics just not stored).
    torch.testing.assert_close(out, xkernels.layer_norm(x, normalized_shape, w, b, 1e-5), rtol=0, atol=0)


@pytest.mark.parametrize("rows", [0, 3])
def test_out_empty(backend, rows):
    x = torch.randn(rows, 0) if rows else torch.randn(0, 5)
    out = torch.empty_like(x)
    assert xkernels.layer_norm(x, [x.shape[-1]], out=out) is out


OUT_LAYOUTS = ["in_place", "transposed_out", "sliced_out", "storage_offset_out", "noncontiguous_input"]


@pytest.mark.parametrize("layout", OUT_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_out_layouts(backend, dtype, layout):
    x, w, b = randn(6, 4, 37, dtype=dtype), randn(37, dtype=dtype), randn(37, dtype=dtype)
    expected = F.layer_norm(x.double(), [37], w.double(), b.double())
    if layout == "in_place":
        out = x.clone()
        src = out
    elif layout == "transposed_out":  # same shape, other strides: filled through a temporary
        out = torch.empty(4, 6, 37, dtype=dtype).transpose(0, 1)
        src = x
    elif layout == "sliced_out":
        base = torch.full((6, 4, 74), 7.0, dtype=dtype)
        out = base[:, :, ::2]
        src = x
    elif layout == "storage_offset_out":
        out = torch.empty(x.numel() + 5, dtype=dtype)[5:].view(x.shape)
        src = x
    else:
        src = randn(6, 37, 4, dtype=dtype).transpose(1, 2)
        expected = F.layer_norm(src.double(), [37], w.double(), b.double())
        out = torch.empty(6, 4, 37, dtype=dtype)
    assert xkernels.layer_norm(src, [37], w, b, out=out) is out
    assert_close(out, expected, dtype, f"layer_norm(out=)[{layout}]")
    if layout == "sliced_out":  # the gaps between out's elements are untouched
        assert (base[:, :, 1::2] == 7.0).all()


def test_out_autograd(backend):
    """Like torch's out= functions: no autograd. Arguments that require grad raise with grad mode on;
    under no_grad the op runs; out's version counter is bumped (autograd sees it was overwritten)."""
    x, w = torch.randn(3, 8), torch.randn(8)
    for name, args in (("input", (x.clone().requires_grad_(), w)), ("weight", (x, w.clone().requires_grad_()))):
        with pytest.raises(
            RuntimeError,
            match=rf"xkernels\.layer_norm\(\): functions with out=\.\.\. arguments "
            rf"don't support automatic differentiation, but argument '{name}'",
        ):
            xkernels.layer_norm(args[0], [8], args[1], out=torch.empty(3, 8))
    with pytest.raises(RuntimeError, match="argument 'out' requires grad"):
        xkernels.layer_norm(x, [8], w, out=torch.empty(3, 8, requires_grad=True))
    out = torch.empty(3, 8)
    v = out._version
    with torch.no_grad():
        xkernels.layer_norm(x.clone().requires_grad_(), [8], w, out=out)
    assert out._version > v
    assert not out.requires_grad
    assert_close(out, F.layer_norm(x.double(), [8], w.double()), torch.float32, "layer_norm(out=) under no_grad")
    # A tensor saved for backward and then overwritten through out= is detected by autograd.
    a = torch.randn(3, 8, requires_grad=True)
    saved = a * 1.0
    y = saved.exp()  # saves its output
    with torch.no_grad():
        xkernels.layer_norm(x, [8], out=y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_out_dispatch_record(backend):
    x = torch.randn(4, 8)
    with xkernels.dispatch_record() as rec:
        xkernels.layer_norm(x, [8], out=torch.empty_like(x))
    assert dict(rec.counts()) == {("layer_norm.out", backend, backend.device.type): 1}


# Rows: one partial block, several blocks with a short last one, and more rows than 256 blocks of 32 (the
# block count's cap: blocks of ceil(M / 256) rows). Columns: < one sub-group, odd, whole steps plus a tail.
BACKWARD_SHAPES = [(1, 5), (33, 17), (100, 40), (8200, 129)]


@pytest.mark.parametrize("rows,cols", BACKWARD_SHAPES, ids=[f"{m}x{n}" for m, n in BACKWARD_SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_outputs_agree_whatever_is_asked(backend, dtype, rows, cols):
    """layer_norm_backward computes each gradient alone (one output of output_mask) or together (the SYCL CPU
    path computes grad_input and the weight / bias partial sums in one pass; GPUs launch them apart): the same
    bits either way, every result within tolerance of float64, and the same bits again on a second call."""
    x, dy = randn(rows, cols, dtype=dtype), randn(rows, cols, dtype=dtype)
    w, b = randn(cols, dtype=dtype), randn(cols, dtype=dtype)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x.double(), [cols], w.double(), b.double(), 1e-5)
    stat = torch.float64 if dtype == torch.float64 else torch.float32  # the accumulation dtype's statistics
    mean, rstd = mean.to(stat), rstd.to(stat)

    def bwd(mask):
        return torch.ops.xkernels.layer_norm_backward(dy, x, [cols], mean, rstd, w, b, mask)

    both = bwd([True, True, True])
    again = bwd([True, True, True])
    alone = [bwd([True, False, False])[0], bwd([False, True, False])[1], bwd([False, False, True])[2]]
    pair = bwd([False, True, True])
    ref = torch.ops.aten.native_layer_norm_backward(
        dy.double(), x.double(), [cols], mean.double(), rstd.double(), w.double(), b.double(), [True, True, True]
    )
    for i, name in enumerate(NAMES):
        assert torch.equal(both[i], again[i]), f"{name}: not repeatable"
        assert torch.equal(both[i], alone[i]), f"{name}: computed alone differs"
        if i:
            assert torch.equal(both[i], pair[i]), f"{name}: without grad_input differs"
        terms = rows if i else cols  # grad_input: sums along a row; weight / bias: down the rows
        assert_close(both[i], ref[i], dtype, f"layer_norm backward {rows}x{cols}: grad of {name}", terms=terms)
