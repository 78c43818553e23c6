"""Rules written once on each side of the C++/Python boundary agree: the Python conv2d output shape and 'same'
padding (xkernels.ops, used by the fakes and xkernels.nn) against the C++ op and torch, the CPU backend choice
(xkernels._C.cpu_backend, used by xkernels.nn) against what the CPU dispatch records, and the dtype facts
(xkernels.dtypes) against torch.finfo and the ops' own statistics dtype."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels import _C, dtypes, nn, ops

# (H, W), (KH, KW), stride, padding, dilation: sizes 1, primes, even and odd kernels, asymmetric everything.
CONV_CASES = [
    ((7, 5), (3, 2), (1, 1), "same", (1, 1)),
    ((8, 6), (4, 3), (1, 1), "same", (2, 1)),
    ((5, 9), (2, 2), (1, 1), "same", (1, 3)),
    ((6, 4), (3, 3), (1, 1), "valid", (1, 1)),
    ((1, 1), (1, 1), (1, 1), "same", (1, 1)),
    ((11, 7), (3, 5), (2, 3), (1, 2), (1, 1)),
    ((13, 10), (3, 2), (3, 1), (0, 1), (2, 3)),
    ((4, 4), (5, 5), (1, 1), (2, 2), (1, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("batched", [True, False], ids=["4d", "3d"])
def test_conv2d_output_shape_matches_the_op_and_torch(case, batched):
    (H, W), (KH, KW), stride, padding, dilation = case
    x = torch.randn(*([2] if batched else []), 3, H, W)
    w = torch.randn(4, 3, KH, KW)
    want = list(F.conv2d(x, w, None, stride, padding, dilation).shape)
    assert ops.conv2d_output_shape(x.shape, w.shape, stride, padding, dilation) == want
    with xkernels.use_backend("reference"):  # the C++ shape rule (csrc/shapes.cpp)
        assert list(ops.conv2d(x, w, None, stride, padding, dilation).shape) == want
        assert list(ops.conv2d_relu(x, w, None, stride, padding, dilation).shape) == want
    # The fakes (meta tensors), through the Python rule.
    assert list(ops.conv2d(x.to("meta"), w.to("meta"), None, stride, padding, dilation).shape) == want
    assert list(ops.conv2d_relu(x.to("meta"), w.to("meta"), None, stride, padding, dilation).shape) == want


def test_conv2d_output_shape_takes_ints():
    assert ops.conv2d_output_shape((1, 3, 9, 9), (2, 3, 3, 3), 2, 1, 1) == [1, 2, 5, 5]
    assert ops.conv2d_output_shape((3, 9, 9), (2, 3, 3, 3), 1, "same", 2) == [2, 9, 9]


# ----------------------------------------------------------------------------- CPU backend choice


@pytest.mark.parametrize("dtype", dtypes.DTYPES, ids=str)
@pytest.mark.parametrize("requested", ["auto", "reference", "sycl"])
def test_cpu_backend_export_is_the_dispatch_decision(dtype, requested):
    name = str(dtype).removeprefix("torch.")
    available = bool(_C.with_sycl) and _C.sycl.cpu_status(name)[0]
    if requested == "sycl" and not available:
        pytest.skip(f"the SYCL CPU device does not run {name} here")
    with xkernels.use_backend(requested):
        chosen = _C.cpu_backend(name)
        assert nn._cpu_backend(dtype) == chosen
        x, w = torch.ones(2, 3, dtype=dtype), torch.ones(4, 3, dtype=dtype)
        with xkernels.dispatch_record() as rec:
            xkernels.fused_linear_relu(x, w)
    ran = {backend for (op, backend, device) in rec.counts() if op == "fused_linear_relu"}
    assert ran == {chosen}
    assert chosen == (requested if requested != "auto" else ("sycl" if available else "reference"))


def test_cpu_backend_export_does_not_check_or_record():
    with xkernels.dispatch_record() as rec:
        assert _C.cpu_backend("float32") in ("sycl", "reference")
    assert rec.events == []
    with pytest.raises(ValueError, match=r"xkernels._C.cpu_backend: argument 'dtype_name' must be one of .*got 'int8'"):
        _C.cpu_backend("int8")


# ----------------------------------------------------------------------------- dtype facts


@pytest.mark.parametrize("dtype", dtypes.DTYPES, ids=str)
def test_dtype_facts_are_torch_finfo(dtype):
    fi = torch.finfo(dtype)
    assert fi.eps == 2.0 ** -dtypes.MANTISSA_BITS[dtype]
    assert fi.tiny == 2.0 ** dtypes.MIN_EXPONENT[dtype]
    assert dtypes.UNIT_ROUNDOFF[dtype] == fi.eps / 2
    limit = dtypes.EXACT_INT_LIMIT[dtype]
    assert torch.tensor(limit, dtype=torch.float64).to(dtype).item() == limit
    assert torch.tensor(limit + 1, dtype=torch.float64).to(dtype).item() != limit + 1
    assert math.log2(limit) == dtypes.MANTISSA_BITS[dtype] + 1


@pytest.mark.parametrize("dtype", dtypes.DTYPES, ids=str)
def test_accumulation_dtype_is_the_statistics_dtype_of_layer_norm(dtype):
    x = torch.randn(3, 5).to(dtype)
    with xkernels.use_backend("reference"):
        _, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [5], None, None, 1e-5)
    _, fmean, _ = torch.ops.xkernels.layer_norm_forward(x.to("meta"), [5], None, None, 1e-5)
    assert mean.dtype == rstd.dtype == fmean.dtype == dtypes.accumulation_dtype(dtype) == dtypes.ACC_DTYPE[dtype]
    assert dtypes.ACC_DTYPE[dtype] in (torch.float32, torch.float64)
    assert list(dtypes.ACC_DTYPE) == list(dtypes.DTYPES)
