"""Rules written once, in C++, and used from Python agree with torch and with the ops: the conv2d output shape
(xkernels._C.conv2d_out_size through ops.conv2d_output_shape, used by the fakes with ints and SymInts, and by
xkernels.nn) against the C++ op and torch, the CPU backend choice
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


def test_conv2d_out_size_floors_like_python():
    # A kernel larger than the padded input: (1 - 2 - 1) // 3 + 1 = 0 (Python's floor), where C++'s truncating
    # division would say 1 and the fakes' "output not empty" check would pass a convolution that has no output.
    assert _C.conv2d_out_size(1, 3, 3, 0, 1) == 0
    assert _C.conv2d_out_size(2, 5, 2, 0, 1) == -1
    for size, k, s, p, d in [(7, 3, 2, 1, 1), (13, 2, 3, 0, 2), (5, 5, 1, 2, 1), (1, 1, 1, 0, 1)]:
        want = F.conv2d(torch.zeros(1, 1, size, 1), torch.zeros(1, 1, k, 1), None, (s, 1), (p, 0), (d, 1)).shape[2]
        assert _C.conv2d_out_size(size, k, s, p, d) == want


def test_shape_rules_take_symints_under_dynamic_compile():
    """The fakes call the C++ rules with SymInts (dynamic=True): strided, dilated and 'same'-padded (the C++
    .padding overload) convolutions give torch's shapes and values for several input sizes, with one graph."""
    torch._dynamo.reset()
    w = torch.randn(4, 3, 3, 2, dtype=torch.float64)

    def f(x):
        return (
            ops.conv2d_relu(x, w, None, (2, 1), (1, 0), (1, 2)),
            ops.conv2d_relu(x, w, None, 1, "same", (2, 1)),
        )

    def want(x):
        return (
            F.relu(F.conv2d(x, w, None, (2, 1), (1, 0), (1, 2))),
            F.relu(F.conv2d(x, w, None, 1, "same", (2, 1))),
        )

    compiled = torch.compile(f, backend="aot_eager", dynamic=True, fullgraph=True)
    with xkernels.use_backend("reference"):
        for H, W in ((9, 7), (12, 11), (17, 8)):
            x = torch.randn(2, 3, H, W, dtype=torch.float64)
            for got, ref in zip(compiled(x), want(x), strict=True):
                assert got.shape == ref.shape
                torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("dtype", dtypes.DTYPES, ids=str)
def test_pack_sizes_come_from_the_ops(dtype):
    """The fakes' pack sizes (C++'s rule, exported) are the sizes the packing ops produce."""
    w = torch.randn(70, 5, dtype=dtype)
    c = _C.linear_pack_columns(str(dtype).removeprefix("torch."))
    assert list(ops.pack_linear_weight(w).shape) == [-(-70 // c), 5, c]
    assert list(ops.pack_linear_weight(w.to("meta")).shape) == [-(-70 // c), 5, c]
    for shape, groups in (((12, 3, 3, 3), 1), ((16, 1, 3, 3), 16), ((64, 8, 1, 1), 2)):
        wc = torch.randn(shape, dtype=dtype)
        n = _C.conv2d_pack_layout(list(shape), groups, str(dtype).removeprefix("torch."))[3]
        assert ops.pack_conv2d_weight(wc, groups).numel() == n
        assert ops.pack_conv2d_weight(wc.to("meta"), groups).numel() == n


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
