"""layer_norm forward and backward against torch.nn.functional.layer_norm in float64."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from compare import check_forward_backward, randn
from tolerances import DTYPES, assert_close

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


@pytest.mark.parametrize("shape,normalized_shape", SHAPES,
                         ids=[f"{'x'.join(map(str, s))}-ns{'x'.join(map(str, n))}" for s, n in SHAPES])
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


LAYOUTS = ["transposed_rows", "sliced", "transposed_normalized", "storage_offset", "strided_affine",
           "noncontiguous_grad"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts(backend, dtype, layout):
    x, w, b = _layout(layout, dtype)
    if layout in ("transposed_rows", "sliced", "transposed_normalized"):
        assert not x.is_contiguous()
    ours, oracle = run([11])
    check_forward_backward(ours, oracle, [x, w, b], NAMES, dtype, f"layer_norm[{layout}]",
                           noncontiguous_grad=layout == "noncontiguous_grad")


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
