"""fused_linear_relu forward and backward against torch.nn.functional in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import DTYPES, assert_close

from compare import check_forward_backward, randn, small_ints

NAMES = ("input", "weight", "bias")


def oracle(x, w, b):
    return F.relu(F.linear(x, w, b))


# (input shape [..., K], N)
SHAPES = [
    ((1, 1), 1),
    ((5,), 3),  # 1-D input
    ((1, 67), 19),  # one row (the SYCL dot kernel's single-row tile): a K tail, the last column tile overhangs N
    ((7, 13), 5),
    ((3, 5, 17), 11),
    ((31, 67), 19),
    ((2, 3, 4, 9), 7),
    ((0, 5), 3),  # no rows
    ((2, 0, 5), 3),  # no rows, 3-D
    ((4, 0), 3),  # K = 0: relu(bias) everywhere
    ((4, 5), 0),  # N = 0
]


@pytest.mark.parametrize("shape,N", SHAPES, ids=[f"{'x'.join(map(str, s))}-N{n}" for s, n in SHAPES])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch(backend, dtype, shape, N, with_bias):
    K = shape[-1]
    x, w = randn(*shape, dtype=dtype), randn(N, K, dtype=dtype)
    b = randn(N, dtype=dtype) if with_bias else None
    out, _ = check_forward_backward(xkernels.fused_linear_relu, oracle, [x, w, b], NAMES, dtype, "fused_linear_relu")
    assert out.is_contiguous()


def _layout(kind: str, M: int, K: int, N: int, dtype):
    x, w, b = randn(M, K, dtype=dtype), randn(N, K, dtype=dtype), randn(N, dtype=dtype)
    if kind == "transposed_input":
        x = randn(K, M, dtype=dtype).t()
    elif kind == "transposed_weight":
        w = randn(K, N, dtype=dtype).t()
    elif kind == "sliced":
        x = randn(M, 2 * K, dtype=dtype)[:, ::2]
        w = randn(N, K + 3, dtype=dtype)[:, 1 : K + 1]
    elif kind == "storage_offset":  # contiguous views that do not start at their storage's beginning
        x = randn((M + 1) * K, dtype=dtype)[K:].view(M, K)
        w = randn(N * K + 5, dtype=dtype)[5:].view(N, K)
        b = randn(N + 1, dtype=dtype)[1:]
    elif kind == "strided_bias":
        b = randn(2 * N, dtype=dtype)[::2]
    elif kind == "broadcast_input":  # stride-0 rows
        x = randn(1, K, dtype=dtype).expand(M, K)
    elif kind != "noncontiguous_grad":
        raise AssertionError(kind)
    return x, w, b


LAYOUTS = [
    "transposed_input",
    "transposed_weight",
    "sliced",
    "storage_offset",
    "strided_bias",
    "broadcast_input",
    "noncontiguous_grad",
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts(backend, dtype, layout):
    x, w, b = _layout(layout, 9, 14, 6, dtype)
    if layout in ("transposed_input", "sliced", "broadcast_input"):
        assert not x.is_contiguous()
    if layout == "storage_offset":
        assert x.storage_offset() > 0 and w.storage_offset() > 0
    check_forward_backward(
        xkernels.fused_linear_relu,
        oracle,
        [x, w, b],
        NAMES,
        dtype,
        f"fused_linear_relu[{layout}]",
        noncontiguous_grad=layout == "noncontiguous_grad",
    )


@pytest.mark.parametrize("needs", ["input", "weight", "bias", "input+bias", "weight+bias"])
def test_partial_grads(backend, needs):
    """Only the requested grads are computed (output_mask); they are still right."""
    dtype = torch.float32
    x, w, b = randn(6, 10, dtype=dtype), randn(4, 10, dtype=dtype), randn(4, dtype=dtype)
    want = needs.split("+")
    ours = [t.clone().requires_grad_(n in want) for n, t in zip(NAMES, (x, w, b))]
    ref = [t.double().requires_grad_(n in want) for n, t in zip(NAMES, (x, w, b))]
    out, expected = xkernels.fused_linear_relu(*ours), oracle(*ref)
    go = randn(6, 4, dtype=dtype)
    out.backward(go)
    expected.backward(go.double())
    for n, a, r in zip(NAMES, ours, ref):
        if n in want:
            assert_close(a.grad, r.grad, dtype, f"grad of {n}")
        else:
            assert a.grad is None


def test_small_integers_exact(backend):
    """Integer inputs: every product and partial sum is exact in float32, so results must be exact."""
    M, K, N = 23, 97, 17
    x, w, b = small_ints(M, K), small_ints(N, K), small_ints(N)
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    out = xkernels.fused_linear_relu(xs, ws, bs)
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    expected = oracle(*ref)
    assert torch.equal(out, expected.float())
    assert (out > 0).any() and (out == 0).any()  # the ReLU mask matters
    go = small_ints(M, N)
    out.backward(go)
    expected.backward(go.double())
    for n, a, r in zip(NAMES, (xs, ws, bs), ref):
        assert torch.equal(a.grad, r.grad.float()), f"grad of {n} not exact"


def test_relu_propagates_nan(backend):
    """relu(NaN) is NaN, as torch.relu (a max(0, x) that drops NaN would differ)."""
    x, w = torch.randn(3, 4), torch.randn(2, 4)
    x[1, 2] = float("nan")
    out = xkernels.fused_linear_relu(x, w)
    assert_close(out, oracle(x.double(), w.double(), None), torch.float32, "fused_linear_relu")
    assert out[1].isnan().all() and not out[0].isnan().any()


def test_via_torch_ops(backend):
    x, w, b = torch.randn(4, 5), torch.randn(3, 5), torch.randn(3)
    x64, w64, b64 = x.double(), w.double(), b.double()
    assert_close(torch.ops.xkernels.fused_linear_relu(x, w, b), oracle(x64, w64, b64), torch.float32, "with bias")
    assert_close(torch.ops.xkernels.fused_linear_relu(x, w), oracle(x64, w64, None), torch.float32, "without bias")


# ---------------------------------------------------------------- pre-packed weights
PACKED_SHAPES = [((7, 13), 5), ((3, 5, 17), 70), ((1, 33), 64), ((130, 600), 130), ((97, 64), 129), ((5,), 3)]


@pytest.mark.parametrize("shape,n", PACKED_SHAPES, ids=[f"{'x'.join(map(str, s))}-N{n}" for s, n in PACKED_SHAPES])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_matches_unpacked(cpu_backend, dtype, shape, n, bias):
    K = shape[-1]
    # x scaled by 1/sqrt(K): O(1) sums also for K = 600 (> the GEMM's K block of 512), within the budgets.
    x, w = (torch.randn(*shape) / K**0.5).to(dtype), randn(n, K, dtype=dtype)
    b = randn(n, dtype=dtype) if bias else None
    packed = xkernels.pack_linear_weight(w)
    c = 32 if dtype == torch.float64 else 64
    assert packed.shape == ((n + c - 1) // c, K, c) and packed.is_contiguous()
    # The layout contract (shapes.h): packed[p][k][c] = W[p * C + c][k], zero past N.
    unpacked = packed.transpose(1, 2).reshape(-1, K)
    assert torch.equal(unpacked[:n], w) and not unpacked[n:].any()
    out = xkernels.fused_linear_relu_packed(x, packed, b, n)
    expected = F.relu(F.linear(x.double(), w.double(), None if b is None else b.double()))
    assert_close(out, expected, dtype, "fused_linear_relu_packed")


def _dot_max_rows(backend: str) -> int | None:
    """The backend's fused_linear_relu forward runs its dot kernel up to this many rows and the packed-panel kernel
    (the one fused_linear_relu_packed always runs) above it: from xkernels.info()[backend], where the build
    exports it (the SYCL backend's LinearConfig::kDotMaxRows)."""
    return xkernels.info().get(backend, {}).get("linear_dot_max_rows")


@pytest.mark.parametrize("shape,n", PACKED_SHAPES, ids=[f"{'x'.join(map(str, s))}-N{n}" for s, n in PACKED_SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_bitwise_equal_to_unpacked_on_the_same_kernel(cpu_backend, dtype, shape, n):
    """Where the plain op runs the same kernel as the packed one (reference: always; sycl: above the dot kernel's
    row limit), the results are identical bit for bit."""
    K = shape[-1]
    rows = math.prod(shape[:-1])
    if cpu_backend != "reference":
        limit = _dot_max_rows(cpu_backend.name)
        if limit is None:
            pytest.skip(f"xkernels.info()[{cpu_backend.name!r}] does not export linear_dot_max_rows")
        if rows <= limit:
            pytest.skip(f"{rows} rows <= {limit}: the plain op runs the dot kernel, the packed op the panel kernel")
    x, w, b = (torch.randn(*shape) / K**0.5).to(dtype), randn(n, K, dtype=dtype), randn(n, dtype=dtype)
    out = xkernels.fused_linear_relu_packed(x, xkernels.pack_linear_weight(w), b, n)
    torch.testing.assert_close(out, xkernels.fused_linear_relu(x, w, b), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_rows_do_not_depend_on_the_batch(cpu_backend, dtype):
    """A row's result is the same bit for bit whether it is computed alone (M = 1, the decode step), in a batch of any
    size or inside a larger one: the SYCL panel kernel's single-row tile (M = 1, and the last row of 13 = 2 x 6 + 1)
    sums the same terms in the same order as its 6-row tile. K = 700 spans two of the panel kernel's K blocks (partial
    sums between them); N = 90 ends in a part-filled column tile at every lane width. Each single row is also checked
    against the float64 oracle."""
    K, n = 700, 90
    x, w, b = (torch.randn(13, K) / K**0.5).to(dtype), randn(n, K, dtype=dtype), randn(n, dtype=dtype)
    packed = xkernels.pack_linear_weight(w)
    whole = xkernels.fused_linear_relu_packed(x, packed, b, n)
    for m in range(1, 13):  # every tail of a 6-row tile: 1-5 rows past a multiple of 6, or none
        first = xkernels.fused_linear_relu_packed(x[:m], packed, b, n)
        torch.testing.assert_close(first, whole[:m], rtol=0, atol=0, msg=f"the first {m} rows")
    for i in (0, 5, 6, 12):
        alone = xkernels.fused_linear_relu_packed(x[i : i + 1], packed, b, n)
        torch.testing.assert_close(alone, whole[i : i + 1], rtol=0, atol=0, msg=f"row {i}")
        expected = F.relu(F.linear(x[i : i + 1].double(), w.double(), b.double()))
        assert_close(alone, expected, dtype, f"fused_linear_relu_packed, row {i} alone")


def test_packed_layout_same_on_every_backend(cpu_backend):
    w = torch.randn(100, 37)
    with xkernels.use_backend("reference"):
        ref = xkernels.pack_linear_weight(w)
    assert torch.equal(xkernels.pack_linear_weight(w), ref)
    assert torch.equal(xkernels.pack_linear_weight(w.t().contiguous().t()), ref)  # any weight strides


def test_packed_empty(cpu_backend):
    x, w, b = torch.randn(4, 0), torch.randn(3, 0), torch.randn(3)
    assert torch.equal(
        xkernels.fused_linear_relu_packed(x, xkernels.pack_linear_weight(w), b, 3), b.clamp_min(0).expand(4, 3)
    )
    w = torch.randn(0, 5)
    assert xkernels.fused_linear_relu_packed(torch.randn(2, 5), xkernels.pack_linear_weight(w), None, 0).shape == (2, 0)
    assert xkernels.fused_linear_relu_packed(
        torch.randn(0, 5), xkernels.pack_linear_weight(torch.randn(3, 5)), None, 3
    ).shape == (0, 3)


def test_packed_not_differentiable(cpu_backend):
    x, w = torch.randn(2, 8), torch.randn(3, 8)
    packed = xkernels.pack_linear_weight(w)
    with pytest.raises(RuntimeError, match=r"xkernels\.fused_linear_relu_packed: not differentiable.*'input'"):
        xkernels.fused_linear_relu_packed(x.requires_grad_(), packed, None, 3)
    with torch.no_grad():
        assert xkernels.fused_linear_relu_packed(x, packed, None, 3).shape == (2, 3)


@pytest.mark.parametrize("case", ["packed-shape", "out-features", "packed-dtype", "packed-noncontiguous", "bias-shape"])
def test_packed_validation(case):
    x, w = torch.randn(2, 8), torch.randn(70, 8)
    packed = xkernels.pack_linear_weight(w)
    call, parts = {
        "packed-shape": (
            lambda: xkernels.fused_linear_relu_packed(torch.randn(2, 9), packed, None, 70),
            ["'packed_weight'", "[2, 8, 64]", "K=9", "[2, 9, 64]"],
        ),
        "out-features": (
            lambda: xkernels.fused_linear_relu_packed(x, packed, None, 129),
            ["'packed_weight'", "out_features=129", "[3, 8, 64]"],
        ),
        "packed-dtype": (
            lambda: xkernels.fused_linear_relu_packed(x, packed.double(), None, 70),
            ["'packed_weight'", "Double", "Float"],
        ),
        "packed-noncontiguous": (
            lambda: xkernels.fused_linear_relu_packed(x, torch.randn(2, 64, 8).transpose(1, 2), None, 70),
            ["'packed_weight'", "contiguous", "strides"],
        ),
        "bias-shape": (
            lambda: xkernels.fused_linear_relu_packed(x, packed, torch.randn(69), 70),
            ["'bias'", "[70]", "[69]"],
        ),
    }[case]
    with pytest.raises((ValueError, RuntimeError)) as info:
        call()
    for part in ["xkernels.fused_linear_relu_packed", *parts]:
        assert part in str(info.value), f"{part!r} missing from: {info.value}"
    with pytest.raises(ValueError, match=r"xkernels\.pack_linear_weight: argument 'weight' must be 2-D, got 3-D"):
        xkernels.pack_linear_weight(torch.randn(2, 3, 4))
