"""SYCL fused_linear_relu: both GEMM variants, every kernel path, against float64 torch and the reference backend.

The SYCL host wrapper picks its GEMM variant per device from XKERNELS_SYCL_GEMM_VARIANT
(auto | cpu | gpu, read at every call): "cpu" = register-blocked sub-group kernels
(linear_gemm_dot for the forward pass with <= 96 rows, linear_gemm_panel otherwise, with B
packed panel-major by linear_pack_panels when the GEMM has >= 32 rows — a gather-transpose of W
in the forward pass, a row copy of W or X in the backward pass — and K-blocked partial sums when
K > 512: in C itself for float32/float64, in a float32 buffer for float16/bfloat16);
"gpu" = the local-memory tiled kernel. Here both run on the OpenCL CPU device. The shapes
below are chosen to reach each of those paths (M = 1, 3, 17, 64 -> dot; 131 -> packed panel;
K = 521 -> K blocks) with primes and 1 for N and K (partial sub-groups, partial tiles).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _kernel_launches import launches

import xkernels
from xkernels import _C
from xkernels.tolerances import DTYPES, assert_close, between_backends

import _backends
from compare import check_forward_backward, randn, small_ints

NAMES = ("input", "weight", "bias")
VARIANT_ENV = "XKERNELS_SYCL_GEMM_VARIANT"


def oracle(x, w, b):
    return F.relu(F.linear(x, w, b))


@pytest.fixture(scope="module")
def sycl_available():
    _backends.get("sycl")


@pytest.fixture(params=["cpu", "gpu"])
def variant(request, sycl_available, monkeypatch):
    """Runs the test on the SYCL backend with the GEMM variant forced; yields its name."""
    monkeypatch.setenv(VARIANT_ENV, request.param)
    with xkernels.use_backend("sycl"):
        yield request.param


def run_with_grads(backend: str, tensors, grad_out):
    """Output and (input, weight, bias) grads of xkernels.fused_linear_relu on `backend`."""
    ours = [None if t is None else t.detach().clone().requires_grad_(True) for t in tensors]
    with xkernels.use_backend(backend):
        out = xkernels.fused_linear_relu(*ours)
        grads = torch.autograd.grad(out, [t for t in ours if t is not None], grad_out)
    return out, grads


# (M, N, K): M in {1, 3, 17, 64} (forward dot kernel), 131 (forward packed panel); N, K primes and 1;
# K = 521 crosses the panel kernel's K block (512); N = 67 > one 64-column panel.
SHAPES = [
    (1, 1, 1),
    (1, 7, 13),
    (1, 67, 97),
    (3, 1, 13),
    (3, 13, 1),
    (3, 67, 31),
    (17, 7, 97),
    (17, 67, 1),
    (17, 31, 521),
    (64, 1, 97),
    (64, 67, 13),
    (64, 13, 521),
    (131, 1, 13),
    (131, 7, 1),
    (131, 67, 97),
    (131, 67, 521),
]
SHAPE_IDS = [f"M{m}-N{n}-K{k}" for m, n, k in SHAPES]


@pytest.mark.parametrize("M,N,K", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_float64_torch(variant, dtype, M, N, K):
    """Output and all three grads within the per-dtype tolerance of torch in float64. Inputs are
    scaled so the sums stay O(1) for every K (the tolerance budget is for O(1) results)."""
    scale = K**-0.25
    x = (torch.randn(M, K) * scale).to(dtype)
    w = (torch.randn(N, K) * scale).to(dtype)
    b = randn(N, dtype=dtype) if (M + N) % 2 else None
    check_forward_backward(
        xkernels.fused_linear_relu, oracle, [x, w, b], NAMES, dtype, f"fused_linear_relu[sycl/{variant}]"
    )


@pytest.mark.parametrize("M,N,K", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_integers_exact(variant, dtype, M, N, K):
    """Integer inputs: every product and partial sum is an exact float32 (or float64) integer, so
    each result is the exact value rounded once to `dtype` — identical to float64 torch rounded
    to `dtype`, and identical to the reference backend."""
    x, w, b, go = (
        small_ints(M, K, dtype=dtype),
        small_ints(N, K, dtype=dtype),
        small_ints(N, dtype=dtype),
        small_ints(M, N, dtype=dtype),
    )
    out, grads = run_with_grads("sycl", (x, w, b), go)
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    expected = oracle(*ref)
    ref_grads = torch.autograd.grad(expected, ref, go.double())
    assert torch.equal(out, expected.to(dtype)), f"output not exact ({variant}, {dtype})"
    for name, g, rg in zip(NAMES, grads, ref_grads):
        assert torch.equal(g, rg.to(dtype)), f"grad of {name} not exact ({variant}, {dtype})"
    # The same values as the reference backend, bit for bit.
    ref_out, ref_backend_grads = run_with_grads("reference", (x, w, b), go)
    assert torch.equal(out, ref_out)
    for name, g, rg in zip(NAMES, grads, ref_backend_grads):
        assert torch.equal(g, rg), f"grad of {name} differs from the reference backend ({variant}, {dtype})"
    if M * N > 8:
        assert (out > 0).any() and (out == 0).any()  # the ReLU mask is exercised


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference_backend(variant, dtype):
    """Random normal inputs, a 3-D input and a non-contiguous weight: sycl and reference agree
    within the dtype's tolerance (both accumulate in the same type, in different orders)."""
    x = randn(2, 67, 45, dtype=dtype)
    w = randn(45, 29, dtype=dtype).t()  # [29, 45], transposed strides
    b = randn(29, dtype=dtype)
    go = randn(2, 67, 29, dtype=dtype)
    out, grads = run_with_grads("sycl", (x, w, b), go)
    ref_out, ref_grads = run_with_grads("reference", (x, w, b), go)
    rtol, atol = between_backends(dtype)
    torch.testing.assert_close(out, ref_out, rtol=rtol, atol=atol)
    for name, g, rg in zip(NAMES, grads, ref_grads):
        assert g.shape == rg.shape and g.dtype == rg.dtype, name
        torch.testing.assert_close(g, rg, rtol=rtol, atol=atol, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize(
    "mask",
    [
        (True, False, False),
        (False, True, False),
        (False, False, True),
        (True, False, True),
        (False, True, True),
        (True, True, True),
        (False, False, False),
    ],
)
def test_backward_output_mask(variant, mask):
    """Unrequested grads come back empty; requested ones are exact (small integers)."""
    M, N, K = 37, 19, 23
    x, w, b, go = small_ints(M, K), small_ints(N, K), small_ints(N), small_ints(M, N)
    out = torch.ops.xkernels.fused_linear_relu(x, w, b)
    gi, gw, gb = torch.ops.xkernels.fused_linear_relu_backward(go, x, w, out, list(mask))
    gp = go.double() * (out > 0)
    expected = (gp @ w.double(), gp.t() @ x.double(), gp.sum(0))
    for name, want, got, exp in zip(NAMES, mask, (gi, gw, gb), expected):
        if want:
            assert torch.equal(got, exp.float()), f"grad of {name}"
        else:
            assert got.numel() == 0, f"grad of {name} was not requested but has shape {tuple(got.shape)}"


def test_relu_mask_uses_output_sign(variant):
    """grad is blocked where output <= 0 and flows elsewhere, NaN outputs included (torch's relu backward)."""
    x = torch.tensor([[1.0, -1.0], [2.0, 0.5]])
    w = torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.0, 1.0]])  # outputs: [0, 2, -1] and [2.5, 1.5, 0.5]
    out = torch.ops.xkernels.fused_linear_relu(x, w, None)
    out_with_nan = out.clone()
    out_with_nan[1, 0] = float("nan")
    go = torch.ones(2, 3)
    gi, gw, gb = torch.ops.xkernels.fused_linear_relu_backward(go, x, w, out_with_nan, [True, True, True])
    mask = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # [1, 0] is NaN: passes
    assert torch.equal(gb, mask.sum(0))
    assert torch.equal(gi, mask @ w)
    assert torch.equal(gw, mask.t() @ x)


def test_variants_agree_bitwise_on_integers(sycl_available, monkeypatch):
    """cpu and gpu variants compute the same exact results (a check that the switch is honoured
    without relying on timing: both must be right, and so must the automatic choice)."""
    M, N, K = 131, 67, 521
    x, w, b = small_ints(M, K), small_ints(N, K), small_ints(N)
    outs = {}
    with xkernels.use_backend("sycl"):
        for v in ("auto", "cpu", "gpu", "GPU"):
            monkeypatch.setenv(VARIANT_ENV, v)
            outs[v] = xkernels.fused_linear_relu(x, w, b)
    expected = oracle(x.double(), w.double(), b.double()).float()
    for v, o in outs.items():
        assert torch.equal(o, expected), v


def test_variant_switch_is_honoured(sycl_available, monkeypatch):
    """With few rows the cpu variant sums each dot product in 16 strided partial sums plus a
    sub-group reduction, the gpu variant in one sequential chain: on random float32 data the two
    orders must round differently somewhere (if the setting were ignored they would be identical),
    and both must stay within tolerance of float64."""
    M, N, K = 8, 64, 1000
    x, w = torch.randn(M, K), torch.randn(N, K)
    outs = {}
    with xkernels.use_backend("sycl"):
        for v in ("cpu", "gpu"):
            monkeypatch.setenv(VARIANT_ENV, v)
            outs[v] = xkernels.fused_linear_relu(x, w)
    assert not torch.equal(outs["cpu"], outs["gpu"])
    expected = oracle(x.double(), w.double(), None)
    for v, o in outs.items():
        assert_close(o, expected, torch.float32, f"variant {v}", terms=K)


def test_invalid_variant_raises(sycl_available, monkeypatch):
    monkeypatch.setenv(VARIANT_ENV, "fastest")
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    with xkernels.use_backend("sycl"):
        with pytest.raises(ValueError, match=r"XKERNELS_SYCL_GEMM_VARIANT.*'fastest'"):
            xkernels.fused_linear_relu(x, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["strided", "offset", "broadcast"])
def test_noncontiguous_and_offset_inputs(variant, dtype, layout):
    """Inputs that are strided (both strides != 1), storage-offset or broadcast (stride 0), and a transposed
    grad_output, reach the op as they are (no copies on the test side): output and all three grads must be the
    float64 oracle's on the values those layouts hold, on each GEMM variant."""
    M, N, K = 70, 11, 29
    if layout == "strided":
        x = randn(K, 2 * M, dtype=dtype).t()[::2]  # [M, K], strides (2, 2M)
        w = randn(K, N, dtype=dtype).t()  # [N, K], transposed
        b = randn(2 * N, dtype=dtype)[::2]
    elif layout == "offset":
        x = randn(M * K + 5, dtype=dtype)[5:].view(M, K)
        w = randn(N * K + 3, dtype=dtype)[3:].view(N, K)
        b = randn(N + 1, dtype=dtype)[1:]
    else:
        x = randn(1, K, dtype=dtype).expand(M, K)  # every row the same memory
        w = randn(N, 1, dtype=dtype).expand(N, K)
        b = randn(1, dtype=dtype).expand(N)
    assert all(not t.is_contiguous() or t.storage_offset() > 0 for t in (x, w, b))
    check_forward_backward(
        xkernels.fused_linear_relu,
        oracle,
        [x, w, b],
        NAMES,
        dtype,
        f"fused_linear_relu[sycl/{variant}, {layout}]",
        noncontiguous_grad=True,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_panel_blocks_cover_every_tile(sycl_available, monkeypatch, dtype):
    """The panel GEMM walks its column panels in blocks (gemm.h, GemmConfig::kPanelBlockBytes) when A is larger
    than a block's budget: here A is 300 x 700 (840 KiB in float32), a 700-row panel 175 KiB in either dtype
    (float32: 64 columns, float64: 32), so blocks of 2 panels and a narrower last block of 1 (float32: 3 panels;
    float64: 5), over 7 row groups. Integer inputs make every output exact: a tile skipped, or computed from the
    wrong panel or row group, changes the result."""
    monkeypatch.setenv(VARIANT_ENV, "cpu")
    torch.manual_seed(11)
    M, N, K = 300, 150, 700
    x, w, b = small_ints(M, K, dtype=dtype), small_ints(N, K, dtype=dtype), small_ints(N, dtype=dtype)
    with xkernels.use_backend("sycl"), torch.no_grad():
        out = xkernels.fused_linear_relu(x, w, b)
        packed = xkernels.pack_linear_weight(w)
        out_packed = xkernels.fused_linear_relu_packed(x, packed, b, N)
    expected = oracle(x.double(), w.double(), b.double()).to(dtype)
    assert torch.equal(out, expected)
    assert torch.equal(out_packed, expected)
    assert (out > 0).any() and (out == 0).any()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_packed_few_rows_whole_row_tiles(sycl_available, dtype, bias):
    """On AVX2 CPUs (16 vector registers) the packed forward of one row, or of at most 8 rows where N gives 16 or more
    64-column work-groups, runs linear_gemm_row (whole packed panel rows per work-group, rows one at a time; gemm.h
    GemmConfig::kWideMaxRows) instead of linear_gemm_panel. N = 16 * 64 + 37 (17 work-groups, the last part-filled),
    K = 700 (two K blocks, partial sums between them). Every row count 1-9 against the float64 oracle, and bit for bit
    against the same rows of a 13-row call (the panel kernel); on AVX2 CPUs also which kernel ran."""
    torch.manual_seed(5)
    M, N, K = 13, 16 * 64 + 37, 700
    x = (torch.randn(M, K) / K**0.5).to(dtype)
    w, b = randn(N, K, dtype=dtype), (randn(N, dtype=dtype) if bias else None)
    avx2 = _C.sycl.linear_unpacked_max_rows() > 0
    with xkernels.use_backend("sycl"), torch.no_grad():
        packed = xkernels.pack_linear_weight(w)
        whole, ran = launches(lambda: xkernels.fused_linear_relu_packed(x, packed, b, N))
        assert "linear_gemm_row" not in ran, ran
        for m in range(1, 10):
            out, ran = launches(lambda m=m: xkernels.fused_linear_relu_packed(x[:m], packed, b, N))
            if avx2:
                expected_kernel = "linear_gemm_row" if m <= 8 else "linear_gemm_panel"
                assert ran.get(expected_kernel) == 1 and len(ran) == 1, (m, ran)
            torch.testing.assert_close(out, whole[:m], rtol=0, atol=0, msg=f"the first {m} rows")
            ref = oracle(x[:m].double(), w.double(), None if b is None else b.double())
            assert_close(out, ref, dtype, f"fused_linear_relu_packed, {m} rows", terms=K)
        # Too few work-groups for several rows (N = 4 * 64: 4 groups): the panel kernel; one row: the row kernel.
        narrow = xkernels.pack_linear_weight(w[:256])
        b_narrow = None if b is None else b[:256]
        for m, kernel in ((1, "linear_gemm_row"), (8, "linear_gemm_panel")):
            out, ran = launches(lambda m=m: xkernels.fused_linear_relu_packed(x[:m], narrow, b_narrow, 256))
            if avx2:
                assert ran.get(kernel) == 1 and len(ran) == 1, (m, ran)
            torch.testing.assert_close(out, whole[:m, :256], rtol=0, atol=0, msg=f"{m} rows of 256 columns")
