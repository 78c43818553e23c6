"""conv2d's GEMM routes on the SYCL backends' CPU devices (csrc/sycl/conv2d.cpp), each against the float64 oracle:

- grad_weight of one-group float/double convolutions: the input's patches (conv2d_im2col, written as the panel
  GEMM's packed operand) times grad_output, in pixel chunks whose products accumulate in the output — vector
  loads (channels_last, channels a multiple of the 64-column panel), gathers (other channel counts, NCHW,
  stride / padding / dilation, the 3-channel stem), both weight-gradient memory orders, several chunks;
- grad_weight of stride-1 windows of channels_last problems with large images over a zero-padded pixel grid (no
  im2col), bit-equal to the im2col route, and its fallback for non-finite input;
- 1x1 stride-1 channels_last convolutions as a GEMM on NHWC memory: forward (no bias, bias + ReLU, and through
  conv2d_packed's pre-packed panels) and grad_input; strided ones: forward with the sampled pixels read in place
  (the GEMM's row map) and grad_input;
- 1x1 stride-1 NCHW convolutions of large images as one GEMM per image (the bias per row): forward, packed
  forward, residual epilogue, grad_input; the other NCHW 1x1 forwards (small images, strides) as the pixel GEMM
  writing the NCHW output in place, the input read in place or first copied to rows, bit-equal to channels_last;
- grad_input of strided windows (the stem) as a GEMM per image into columns and a gathering col2im;
- Winograd for convolutions with unpacked weights (U transformed per call) and for grad_input of 3x3 stride-1
  layers (the flipped, transposed weight); a counter proves the Winograd kernels ran.
The direct kernels these replace stay reachable (groups > 1, half types, residual epilogues): other files test them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _kernel_launches import launches, profiled

import xkernels
from xkernels import _C
from xkernels.tolerances import assert_close

CL = torch.channels_last


@pytest.fixture
def sycl_cpu(backend):
    if backend.name not in ("sycl", "acpp") or backend.device.type != "cpu":
        pytest.skip(f"the GEMM routes are the SYCL backends' CPU paths; this is '{backend.name}'")
    return backend


def _oracle_backward(go, x, w, stride, padding, dilation, mask):
    return torch.ops.aten.convolution_backward(
        go.double(), x.double(), w.double(), None, stride, padding, dilation, False, [0, 0], 1, mask
    )


def _backward(go, x, w, stride, padding, dilation, mask):
    return torch.ops.xkernels.conv2d_backward(go, x, w, stride, padding, dilation, 1, mask)


# (N, C, H, W, O, k, stride, padding, dilation): the vector path (C % 64 == 0, channels_last), gathers (C = 96,
# 3-channel stem, NCHW), strided, padded beyond the window, dilated, a kernel column count that straddles panels; the
# stem with 64 output channels takes the transposed orientation (conv2d.cpp grad_weight_transposed), whose patches of
# a channels_last input are copied as runs of input rows (conv2d_im2col_rows), of an NCHW one gathered (conv2d_im2col).
GW_CASES = {
    "vector_3x3": (2, 64, 9, 11, 40, 3, 1, 1, 1),
    "c96_gather": (1, 96, 7, 6, 70, 3, 1, 1, 1),
    "stem_7x7_s2": (2, 3, 23, 19, 16, 7, 2, 3, 1),
    "stem_7x7_s2_o64": (2, 3, 23, 19, 64, 7, 2, 3, 1),  # transposed: grad_weight^T = patches^T @ grad_output
    "c3_3x3_pad2_o64": (2, 3, 11, 9, 64, 3, 1, 2, 1),  # transposed, padding past the window (whole runs outside)
    "stride2_1x1": (2, 128, 9, 9, 33, 1, 2, 0, 1),
    "pad2_dil2": (1, 64, 10, 9, 20, 3, 1, 2, 2),
    "asym_5x5": (3, 10, 12, 13, 7, 5, 2, 1, 1),
    "pointwise": (2, 70, 9, 7, 100, 1, 1, 0, 1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("memory_format", ["nchw", "channels_last"])
@pytest.mark.parametrize("case", GW_CASES.values(), ids=GW_CASES.keys())
def test_grad_weight_gemm_matches_oracle(sycl_cpu, case, memory_format, dtype):
    N, C, H, W, O, k, s, p, d = case
    fmt = CL if memory_format == "channels_last" else torch.contiguous_format
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, dtype=dtype).contiguous(memory_format=fmt)
    w = torch.randn(O, C, k, k, dtype=dtype)
    go = torch.randn_like(F.conv2d(x, w, None, s, p, d))
    _, gw, _ = _backward(go, x, w, [s, s], [p, p], [d, d], [False, True, False])
    _, ref, _ = _oracle_backward(go, x, w, [s, s], [p, p], [d, d], [False, True, False])
    assert_close(gw, ref, dtype, f"grad_weight {case}", terms=go.numel() // O)
    # the weight gradient's memory format follows the problem's (channels_last for a channels_last input)
    assert gw.is_contiguous(memory_format=fmt)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_pointwise_grad_weight_reads_the_input_in_place(sycl_cpu, dtype):
    """1x1, stride 1, unpadded, channels_last: grad_weight is grad_output^T @ the input's rows as stored (no
    conv2d_im2col copy), 70 input channels (a partial column panel) x 100 output channels, 2 x 33 x 32 pixels
    (many K blocks); NCHW input keeps the im2col route. Both against the float64 oracle."""
    torch.manual_seed(7)
    w = torch.randn(100, 70, 1, 1, dtype=dtype)
    for fmt, in_place in ((CL, True), (torch.contiguous_format, False)):
        x = torch.randn(2, 70, 33, 32, dtype=dtype).contiguous(memory_format=fmt)
        go = torch.randn(2, 100, 33, 32, dtype=dtype).contiguous(memory_format=fmt)
        (_, gw, _), ran = _kernels_run(lambda: _backward(go, x, w, [1, 1], [0, 0], [1, 1], [False, True, False]))
        assert ("conv2d_im2col" in {k.split("<")[0] for k in ran}) != in_place, f"{fmt}: {ran}"
        _, ref, _ = _oracle_backward(go, x, w, [1, 1], [0, 0], [1, 1], [False, True, False])
        assert_close(gw, ref, dtype, f"1x1 grad_weight {fmt}", terms=2 * 33 * 32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_grad_weight_k_ranges_add_in_order(sycl_cpu, dtype):
    """grad_weight's K (the batch's pixels) split into about K / 512 ranges (gemm.h GemmConfig::kSplitKLength), each
    summed by its own work-groups, the ranges then added in order (linear_gemm_panel k_split, linear_column_sum). 1x1
    channels_last (the pixel GEMM; 100 output x 70 input channels: a short row group and a partial panel), images
    of exactly 512 pixels, so range r is image r (1536 pixels: three ranges of 512; 1793: four of 512, the last
    257): the split result must equal, bit for bit, the per-image gradients (one range each, no split) added in
    image order. A skipped,
    repeated or misplaced range, a wrong scratch slab or another order fails."""
    torch.manual_seed(11)
    w = torch.randn(100, 70, 1, 1, dtype=dtype)
    sizes = [(16, 32)] * 3 + [(1, 257)]  # three 512-pixel images, then a 257-pixel one (its own N = 1 problem)
    xs = [torch.randn(1, 70, h, wd, dtype=dtype).contiguous(memory_format=CL) for h, wd in sizes]
    gos = [torch.randn(1, 100, h, wd, dtype=dtype).contiguous(memory_format=CL) for h, wd in sizes]
    args = ([1, 1], [0, 0], [1, 1], [False, True, False])
    # the batch: three 512-pixel images as one N = 3 problem (3 ranges), and the same with the short image appended
    # as a fourth range (images of one batch share a size, so all 1793 pixel rows become one 11 x 163 image)
    x3, go3 = torch.cat(xs[:3]), torch.cat(gos[:3])
    (_, gw3, _), ran = launches(lambda: _backward(go3, x3, w, *args))
    assert ran == {"linear_gemm_panel": 1, "linear_column_sum": 1}, ran
    per_image = [_backward(gos[i], xs[i], w, *args)[1] for i in range(4)]
    torch.testing.assert_close(gw3, (per_image[0] + per_image[1]) + per_image[2], rtol=0, atol=0)
    rows = lambda t: t.permute(0, 2, 3, 1).reshape(-1, t.shape[1])  # noqa: E731  [pixels, channels]
    as_row_image = lambda r: r.reshape(1, 11, 163, r.shape[1]).permute(0, 3, 1, 2)  # noqa: E731  NHWC rows in order
    x4 = as_row_image(torch.cat([rows(t) for t in xs]))
    go4 = as_row_image(torch.cat([rows(t) for t in gos]))
    (_, gw4, _), ran = launches(lambda: _backward(go4, x4, w, *args))
    assert ran == {"linear_gemm_panel": 1, "linear_column_sum": 1}, ran
    torch.testing.assert_close(gw4, ((per_image[0] + per_image[1]) + per_image[2]) + per_image[3], rtol=0, atol=0)
    _, ref, _ = _oracle_backward(go4, x4, w, *args)
    assert_close(gw4, ref, dtype, "grad_weight over four K ranges", terms=3 * 512 + 257)


def test_grad_weight_k_ranges_within_the_scratch_bound(sycl_cpu):
    """A large grad_weight (1024 x 1024, 4 MiB) over 4096 pixels: eight ranges of 512 would need 28 MiB of scratch
    for the later ranges' sums, more than GemmConfig::kSplitKMaxBytes (16 MiB), so there are five ranges of 832
    pixels (the last 768; 16 MiB). Small integers make every sum exact: the result equals the float64 oracle, so a
    range the longer length skips or counts twice fails."""
    torch.manual_seed(12)
    x = torch.randint(-3, 4, (1, 1024, 64, 64)).float().contiguous(memory_format=CL)
    go = torch.randint(-3, 4, (1, 1024, 64, 64)).float().contiguous(memory_format=CL)
    w = torch.zeros(1024, 1024, 1, 1)
    args = ([1, 1], [0, 0], [1, 1], [False, True, False])
    (_, gw, _), ran = launches(lambda: _backward(go, x, w, *args))
    assert ran == {"linear_gemm_panel": 1, "linear_column_sum": 1}, ran
    _, ref, _ = _oracle_backward(go, x, w, *args)
    torch.testing.assert_close(gw, ref.float(), rtol=0, atol=0)


@pytest.mark.parametrize("memory_format", ["nchw", "channels_last"])
def test_grad_weight_gemm_chunks_accumulate(sycl_cpu, memory_format):
    """More patch elements than one chunk holds (Conv2dConfig::kIm2colElements = 4 Mi): 8192 pixels x 576
    columns make two chunks, whose products must add up (the second chunk accumulates into the output). The
    channels_last problem (4096 pixels per image) takes the padded-grid route instead: one GEMM over 8580 grid
    pixels, K blocks accumulating in the output."""
    fmt = CL if memory_format == "channels_last" else torch.contiguous_format
    torch.manual_seed(1)
    x = torch.randn(2, 64, 64, 64).contiguous(memory_format=fmt)
    w = torch.randn(48, 64, 3, 3)
    go = torch.randn(2, 48, 64, 64).contiguous(memory_format=fmt)
    _, gw, _ = _backward(go, x, w, [1, 1], [1, 1], [1, 1], [False, True, False])
    _, ref, _ = _oracle_backward(go, x, w, [1, 1], [1, 1], [1, 1], [False, True, False])
    assert_close(gw, ref, torch.float32, "grad_weight over two chunks", terms=8192)
    # each half of the pixels alone gives its own gradient: the two chunks' sum is the whole
    half = [_backward(go[i : i + 1], x[i : i + 1], w, [1, 1], [1, 1], [1, 1], [False, True, False])[1] for i in (0, 1)]
    torch.testing.assert_close(gw, half[0] + half[1], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("memory_format", ["nchw", "channels_last"])
def test_grad_weight_transposed_chunks_accumulate(sycl_cpu, memory_format):
    """The stem's grad_weight transposed (patches^T @ grad_output, conv2d.cpp grad_weight_transposed) over more
    pixels than one chunk of patches holds (4 Mi elements / 147 columns: 28480 pixels; here 3 x 112 x 112 = 37632):
    the second chunk must add to the first, each chunk read at its own pixels of grad_output. Small integers make
    every sum exact, so the result equals the float64 oracle."""
    fmt = CL if memory_format == "channels_last" else torch.contiguous_format
    torch.manual_seed(5)
    x = torch.randint(-4, 5, (3, 3, 224, 224)).float().contiguous(memory_format=fmt)
    w = torch.zeros(64, 3, 7, 7)
    go = torch.randint(-4, 5, (3, 64, 112, 112)).float().contiguous(memory_format=fmt)
    args = ([2, 2], [3, 3], [1, 1], [False, True, False])
    (_, gw, _), ran = launches(lambda: _backward(go, x, w, *args))
    # two chunks; channels_last patches copied as runs of input rows, NCHW ones gathered
    im2col = "conv2d_im2col_rows" if memory_format == "channels_last" else "conv2d_im2col"
    assert ran[im2col] == 2 and ran["linear_gemm_panel"] == 2, ran
    _, ref, _ = _oracle_backward(go, x, w, *args)
    torch.testing.assert_close(gw, ref.float(), rtol=0, atol=0)
    assert gw.is_contiguous(memory_format=fmt)


# Stride-1 windows of channels_last problems with >= 2048 output pixels per image (Conv2dConfig::kWindowMinPixels)
# and whole panels per kernel row (KW * C a multiple of 64 for float, 32 for double): grad_weight over the zero-padded
# pixel grid. (N, C, H, W, O, KH, KW, padding): same padding, unpadded, 5x5, a 3x1 kernel with one-sided padding.
WINDOW_CASES = {
    "3x3_pad1": (2, 64, 48, 45, 40, 3, 3, (1, 1)),
    "3x3_pad0": (1, 64, 50, 50, 24, 3, 3, (0, 0)),
    "5x5_pad2": (1, 64, 46, 46, 16, 5, 5, (2, 2)),
    "3x1_pad10": (1, 64, 46, 47, 20, 3, 1, (1, 0)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", WINDOW_CASES.values(), ids=WINDOW_CASES.keys())
def test_grad_weight_over_the_padded_grid(sycl_cpu, case, dtype):
    """grad_weight of a stride-1 window without the im2col copy (csrc/sycl/conv2d.cpp grad_weight_window): one GEMM
    of the zero-padded grid's gradient with the padded input, shifted per tap (K split into ranges: one range sum).
    Against the float64 oracle, and with small-integer data (every sum exact) equal to it, as the im2col route is
    (the grid's extra products are zeros); the profiler sees the route's launches."""
    N, C, H, W, O, KH, KW, pad = case
    torch.manual_seed(3)
    x = torch.randn(N, C, H, W, dtype=dtype).contiguous(memory_format=CL)
    w = torch.randn(O, C, KH, KW, dtype=dtype)
    go = torch.randn_like(F.conv2d(x, w, None, 1, pad)).contiguous(memory_format=CL)
    args = ([1, 1], list(pad), [1, 1], [False, True, False])
    (_, gw, _), ran = launches(lambda: _backward(go, x, w, *args))
    # the route: conv2d_im2col twice (the input and grad_output onto the grid, one launch each), then one GEMM whose
    # K ranges (the grid's 2116-4608 pixels: split) one linear_column_sum adds up
    assert ran == {"conv2d_im2col": 2, "linear_gemm_panel": 1, "linear_column_sum": 1}, ran
    assert gw.is_contiguous(memory_format=CL)
    _, ref, _ = _oracle_backward(go, x, w, *args)
    # sums of 2116-4608 products: worst-case float32 error grows with the partial sums' size too, so the bound is
    # taken for twice the terms (one element of 13824 reached 1.3x the plain bound, in both routes alike)
    assert_close(gw, ref, dtype, f"grad_weight over the padded grid {case}", terms=2 * go.numel() // O)
    # Small integers (products <= 16, sums of <= 4608 of them: exact in either precision): the grid route's extra
    # products add exact zeros, so it equals the oracle, as the im2col route (NCHW; one chunk each) does.
    xi = torch.randint(-4, 5, x.shape).to(dtype).contiguous(memory_format=CL)
    wi = torch.randint(-4, 5, w.shape).to(dtype)
    goi = torch.randint(-4, 5, go.shape).to(dtype).contiguous(memory_format=CL)
    _, exact, _ = _oracle_backward(goi, xi, wi, *args)
    (_, gw_grid, _), ran = launches(lambda: _backward(goi, xi, wi, *args))
    assert ran["conv2d_im2col"] == 2, ran
    (_, gw_im2col, _), ran = launches(lambda: _backward(goi.contiguous(), xi.contiguous(), wi, *args))
    assert ran["conv2d_im2col"] == 1, ran
    torch.testing.assert_close(gw_grid, exact.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(gw_im2col, exact.to(dtype), rtol=0, atol=0)


def test_grad_weight_padded_grid_falls_back_on_non_finite_input(sycl_cpu):
    """The padded grid's zero gradients multiply real input pixels: an infinite pixel would turn 0 * inf into NaN in
    taps that never see it (here: the first column's pixel, which tap kw = 2 never reads). A non-finite result is
    recomputed through im2col, so the result has exactly the oracle's non-finite entries and matches it elsewhere."""
    torch.manual_seed(4)
    x = torch.randn(1, 64, 48, 48).contiguous(memory_format=CL)
    x[0, 5, 20, 0] = float("inf")
    w = torch.randn(8, 64, 3, 3)
    go = torch.randn(1, 8, 48, 48).contiguous(memory_format=CL)
    args = ([1, 1], [1, 1], [1, 1], [False, True, False])
    (_, gw, _), ran = launches(lambda: _backward(go, x, w, *args))
    # the grid route (two im2col launches onto the grid, a GEMM), then the fallback (one im2col chunk, a GEMM); each
    # GEMM's K (2304 pixels and more) is split, its ranges added by a linear_column_sum
    assert ran == {"conv2d_im2col": 3, "linear_gemm_panel": 2, "linear_column_sum": 2}, ran
    _, ref, _ = _oracle_backward(go, x, w, *args)
    assert torch.isfinite(ref[:, 5, :, 2]).all()  # the case is meaningful: tap kw = 2 never reads column 0
    assert not torch.isfinite(ref[:, 5, :, :2]).all()
    assert_close(gw, ref, torch.float32, "grad_weight with an infinite input pixel", terms=48 * 48)
    torch.testing.assert_close(torch.isfinite(gw), torch.isfinite(ref))


def _kernels_run(fn):
    """fn()'s result and the labels of the SYCL kernels it launched."""
    out, rows = profiled(fn)
    return out, set(rows)


def _pointwise_layer(N, C, H, W, O, stride, dtype, seed):
    """A 1x1 layer's NCHW input, weight, bias and a residual of the output's shape (NCHW)."""
    torch.manual_seed(seed)
    x = torch.randn(N, C, H, W, dtype=dtype)
    w = torch.randn(O, C, 1, 1, dtype=dtype)
    b = torch.randn(O, dtype=dtype)
    res = torch.randn(N, O, (H - 1) // stride[0] + 1, (W - 1) // stride[1] + 1, dtype=dtype)  # 1x1, unpadded
    return x, w, b, res


def _pointwise_runs(x, w, b, res, stride):
    """The 1x1 forwards of the GEMM-route tests by name, each with its float64 oracle: conv2d without and with
    bias, conv2d_relu with a residual, conv2d_packed with and without the fused bias + ReLU epilogue."""
    x64, w64, b64 = x.double(), w.double(), b.double()
    ref, ref_nobias = F.conv2d(x64, w64, b64, stride), F.conv2d(x64, w64, None, stride)
    packed = xkernels.pack_conv2d_weight(w)
    return {
        "conv2d": (lambda: xkernels.conv2d(x, w, stride=stride), ref_nobias),
        "conv2d_bias": (lambda: xkernels.conv2d(x, w, b, stride=stride), ref),
        "relu_residual": (
            lambda: xkernels.conv2d_relu(x, w, b, stride=stride, residual=res),
            torch.relu(ref + res.double()),
        ),
        "packed_relu": (lambda: xkernels.conv2d_packed(x, packed, w.shape, b, stride=stride, relu=True), ref.relu()),
        "packed": (lambda: xkernels.conv2d_packed(x, packed, w.shape, None, stride=stride), ref_nobias),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_pointwise_forward_and_grad_input_as_gemm(sycl_cpu, dtype):
    """1x1, stride 1, channels_last: conv2d (no bias, bias), conv2d_relu with bias and with bias + residual,
    conv2d_packed with and without ReLU and bias, with a residual (the pre-packed panels read as the GEMM's
    operand), and grad_input; 100 output channels (a partial panel), 70 input channels, 2 x 9 x 7 pixels. The
    residual comes in NCHW (made dense channels_last for the epilogue) and channels_last."""
    torch.manual_seed(2)
    x = torch.randn(2, 70, 9, 7, dtype=dtype).contiguous(memory_format=CL)
    w = torch.randn(100, 70, 1, 1, dtype=dtype)
    b = torch.randn(100, dtype=dtype)
    x64, w64, b64 = x.double(), w.double(), b.double()
    out = xkernels.conv2d(x, w)
    assert out.is_contiguous(memory_format=CL)
    assert_close(out, F.conv2d(x64, w64), dtype, "1x1 conv2d", terms=70)
    assert_close(xkernels.conv2d_relu(x, w, b), torch.relu(F.conv2d(x64, w64, b64)), dtype, "1x1 relu", terms=70)
    packed = xkernels.pack_conv2d_weight(w)
    with torch.no_grad():
        pr = xkernels.conv2d_packed(x, packed, w.shape, b, relu=True)
        pn = xkernels.conv2d_packed(x, packed, w.shape, None)
    assert_close(pr, torch.relu(F.conv2d(x64, w64, b64)), dtype, "1x1 packed relu", terms=70)
    assert_close(pn, F.conv2d(x64, w64), dtype, "1x1 packed", terms=70)
    ref_b = F.conv2d(x64, w64, b64)
    bias_only, ran = _kernels_run(lambda: xkernels.conv2d(x, w, b))
    assert_close(bias_only, ref_b, dtype, "1x1 bias", terms=70)
    assert any(k.startswith("linear_gemm_panel<true, false") for k in ran), f"not the bias-only GEMM: {ran}"
    assert not any(k.startswith("conv2d_igemm") for k in ran), f"the direct kernel ran: {ran}"
    for res in (
        torch.randn(2, 100, 9, 7, dtype=dtype),
        torch.randn(2, 100, 9, 7, dtype=dtype).contiguous(memory_format=CL),
    ):
        ref_r = torch.relu(ref_b + res.double())
        assert_close(xkernels.conv2d_relu(x, w, b, residual=res), ref_r, dtype, "1x1 relu residual", terms=71)
        with torch.no_grad():
            pres, ran = _kernels_run(lambda: xkernels.conv2d_packed(x, packed, w.shape, b, residual=res, relu=True))
        assert any(k.startswith("linear_gemm_panel<true, true") for k in ran), f"not the GEMM: {ran}"
        assert not any(k.startswith("conv2d_igemm") for k in ran), f"the direct kernel ran: {ran}"
        assert pres.is_contiguous(memory_format=CL)
        assert_close(pres, ref_r, dtype, "1x1 packed relu residual", terms=71)
    with torch.no_grad():
        pb = xkernels.conv2d_packed(x, packed, w.shape, b)
    assert_close(pb, ref_b, dtype, "1x1 packed bias", terms=70)
    go = torch.randn_like(out)
    gi, _, _ = _backward(go, x, w, [1, 1], [0, 0], [1, 1], [True, False, False])
    ref, _, _ = _oracle_backward(go, x, w, [1, 1], [0, 0], [1, 1], [True, False, False])
    assert gi.is_contiguous(memory_format=CL)
    assert_close(gi, ref, dtype, "1x1 grad_input", terms=100)


# (N, C, H, W, O, stride): stride 2 with even and odd sizes (odd: the last row / column of the input is a sampled
# pixel; even: the last one gets no gradient), unequal strides, a partial weight panel (O = 33).
STRIDED_GI_CASES = {
    "s2_even": (2, 64, 10, 8, 40, (2, 2)),
    "s2_odd": (1, 48, 9, 7, 33, (2, 2)),
    "s3x2": (2, 16, 7, 9, 70, (3, 2)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", STRIDED_GI_CASES.values(), ids=STRIDED_GI_CASES.keys())
def test_strided_pointwise_grad_input_as_gemm(sycl_cpu, case, dtype):
    """grad_input of a strided 1x1 channels_last convolution: the stride-1 GEMM onto the sampled pixels, zeros
    elsewhere (the oracle checks both), and no direct kernel."""
    N, C, H, W, O, stride = case
    torch.manual_seed(5)
    x = torch.randn(N, C, H, W, dtype=dtype).contiguous(memory_format=CL)
    w = torch.randn(O, C, 1, 1, dtype=dtype)
    OH, OW = (H - 1) // stride[0] + 1, (W - 1) // stride[1] + 1
    go = torch.randn(N, O, OH, OW, dtype=dtype).contiguous(memory_format=CL)
    mask = [True, False, False]
    (gi, _, _), counts = launches(lambda: _backward(go, x, w, list(stride), [0, 0], [1, 1], mask))
    ref, _, _ = _oracle_backward(go, x, w, list(stride), [0, 0], [1, 1], mask)
    assert counts.get("linear_gemm_panel", 0) >= 1 and "conv2d_igemm" not in counts, counts
    assert gi.is_contiguous(memory_format=CL)
    assert_close(gi, ref, dtype, f"strided 1x1 grad_input {case}", terms=O)


# (N, C, H, W, O, stride): even and odd sizes, unequal strides, 3 images of 7 x 7 sampled pixels (147 GEMM rows:
# 6-row tiles straddle output rows and images, several 48-row groups), partial weight panels (O = 70, 49). At least
# 48 output channels: below that, the pre-packed weight has the direct kernel's narrow layout, which that kernel
# reads (shapes.h kConv2dWideMinChannels).
STRIDED_FWD_CASES = {
    "s2_even": (2, 64, 10, 8, 64, (2, 2)),
    "s2_odd": (1, 48, 9, 7, 49, (2, 2)),
    "s3x2": (2, 16, 7, 9, 70, (3, 2)),
    "three_images": (3, 40, 13, 14, 70, (2, 2)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", STRIDED_FWD_CASES.values(), ids=STRIDED_FWD_CASES.keys())
def test_strided_pointwise_forward_as_gemm(sycl_cpu, case, dtype):
    """Forward of a strided 1x1 channels_last convolution: the panel GEMM reads the sampled pixels in place (its
    row map over [N, OH, OW]); conv2d with and without bias, conv2d_relu with a residual, conv2d_packed with and
    without an epilogue, each against the oracle, with the GEMM launched once and no direct kernel. bfloat16 too:
    AMX takes stride-1 problems only, so the strided ones run this GEMM (accumulating in float) on every CPU."""
    N, C, H, W, O, stride = case
    x, w, b, res = _pointwise_layer(N, C, H, W, O, stride, dtype, seed=6)
    x = x.contiguous(memory_format=CL)
    for name, (fn, expected) in _pointwise_runs(x, w, b, res, stride).items():
        with torch.no_grad():
            out, counts = launches(fn)
        assert counts.get("linear_gemm_panel", 0) == 1 and "conv2d_igemm" not in counts, (name, counts)
        assert out.is_contiguous(memory_format=CL)
        assert_close(out, expected, dtype, f"strided 1x1 {name} {case}", terms=C + 1)


# (N, C, H, W, O, (KH, KW), stride, padding): the ResNet stem's window on a small image; a wide-channel 3x3 stride-2
# layer (ResNet v1.5's); unequal strides, an asymmetric kernel and padding; no padding with rows and columns past the
# last window (they get no gradient); padding beyond the window's reach; a row longer than several steps of a
# work-group (32 pixels); a strided 1x1 layer (NCHW: through col2im; channels_last keeps its own GEMM route).
COL2IM_GI_CASES = {
    "stem_7x7_s2": (2, 3, 23, 37, 64, (7, 7), (2, 2), (3, 3)),
    "c80_3x3_s2": (1, 80, 9, 10, 24, (3, 3), (2, 2), (1, 1)),
    "k3x5_s3x2": (2, 5, 11, 13, 7, (3, 5), (3, 2), (1, 2)),
    "unpadded_tail": (1, 4, 10, 12, 6, (3, 3), (2, 3), (0, 0)),
    "wide_pad": (1, 2, 6, 7, 3, (2, 3), (2, 2), (3, 4)),
    "long_row": (1, 3, 5, 150, 9, (5, 3), (2, 2), (2, 1)),
    "pointwise_s2": (2, 24, 9, 11, 40, (1, 1), (2, 2), (0, 0)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("memory_format", ["nchw", "channels_last", "channels_last_weight"])
@pytest.mark.parametrize("case", COL2IM_GI_CASES.values(), ids=COL2IM_GI_CASES.keys())
def test_strided_window_grad_input_as_gemm_and_col2im(sycl_cpu, case, memory_format, dtype):
    """grad_input of a strided window (one group, undilated): per image the GEMM grad_output @ w into columns, then
    conv2d_col2im gathers each input pixel's taps (the oracle checks every pixel, the uncovered ones too); no direct
    kernel. The weight as [O, (kh, kw, c)]: a copy (NCHW weight) or a view (channels_last weight)."""
    N, C, H, W, O, k, stride, padding = case
    fmt = torch.contiguous_format if memory_format == "nchw" else CL
    torch.manual_seed(7)
    x = torch.randn(N, C, H, W, dtype=dtype).contiguous(memory_format=fmt)
    w = torch.randn(O, C, *k, dtype=dtype)
    if memory_format == "channels_last_weight":
        w = w.contiguous(memory_format=CL)
    go = torch.randn_like(F.conv2d(x, w, None, stride, padding)).contiguous(memory_format=fmt)
    mask = [True, False, False]
    (gi, _, _), counts = launches(lambda: _backward(go, x, w, list(stride), list(padding), [1, 1], mask))
    ref, _, _ = _oracle_backward(go, x, w, list(stride), list(padding), [1, 1], mask)
    if k == (1, 1) and fmt == CL:  # the strided 1x1 channels_last route: one GEMM, placed without col2im
        assert "conv2d_col2im" not in counts and counts.get("linear_gemm_panel", 0) == 1, counts
    else:
        assert counts.get("conv2d_col2im", 0) == N and counts.get("linear_gemm_panel", 0) >= N, counts
    assert "conv2d_igemm" not in counts, counts
    assert gi.is_contiguous(memory_format=fmt)
    taps = -(-k[0] // stride[0]) * -(-k[1] // stride[1])
    assert_close(gi, ref, dtype, f"strided window grad_input {case}", terms=O * taps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_nchw_pointwise_per_image_gemm(sycl_cpu, dtype):
    """1x1, stride 1, NCHW with at least 1024 pixels per image (Conv2dConfig::kImageGemmMinPixels): one GEMM per
    image with the weight as A and the image's channel planes as B read in place, the bias per row. 33 x 32 pixels
    (a partial last column panel), 70 -> 100 channels (a partial row group), 2 images; conv2d with and without
    bias, conv2d_relu with a residual, conv2d_packed (the packed panels copied back to rows), grad_input; then the
    same layer on a 16 x 16 slice of the images (not dense: no GEMM reads it in place) keeps the direct kernel."""
    torch.manual_seed(5)
    x = torch.randn(2, 70, 33, 32, dtype=dtype)
    w = torch.randn(100, 70, 1, 1, dtype=dtype)
    b = torch.randn(100, dtype=dtype)
    res = torch.randn(2, 100, 33, 32, dtype=dtype)
    x64, w64, b64 = x.double(), w.double(), b.double()
    ref = F.conv2d(x64, w64, b64)
    packed = xkernels.pack_conv2d_weight(w)
    cases = {
        "bias": (lambda: xkernels.conv2d(x, w, b), ref, 70),
        "no bias": (lambda: xkernels.conv2d(x, w), F.conv2d(x64, w64), 70),
        "relu residual": (
            lambda: xkernels.conv2d_relu(x, w, b, residual=res),
            torch.relu(ref + res.double()),
            71,
        ),
        "packed relu": (lambda: xkernels.conv2d_packed(x, packed, w.shape, b, relu=True), torch.relu(ref), 70),
    }
    for name, (fn, expected, terms) in cases.items():
        with torch.no_grad():
            out, ran = _kernels_run(fn)
        assert any(k.startswith("linear_gemm_panel<") for k in ran), f"{name}: not the GEMM: {ran}"
        assert not any(k.startswith("conv2d_igemm") for k in ran), f"{name}: the direct kernel ran: {ran}"
        assert out.is_contiguous()
        assert_close(out, expected, dtype, f"NCHW 1x1 {name}", terms=terms)
    go = torch.randn(2, 100, 33, 32, dtype=dtype)
    (gi, _, _), ran = _kernels_run(lambda: _backward(go, x, w, [1, 1], [0, 0], [1, 1], [True, False, False]))
    assert any(k.startswith("linear_gemm_panel<false, false") for k in ran), f"grad_input: not the GEMM: {ran}"
    ref_gi, _, _ = _oracle_backward(go, x, w, [1, 1], [0, 0], [1, 1], [True, False, False])
    assert gi.is_contiguous()
    assert_close(gi, ref_gi, dtype, "NCHW 1x1 grad_input", terms=100)
    small, ran = _kernels_run(lambda: xkernels.conv2d(x[:, :, :16, :16], w, b))
    assert any(k.startswith("conv2d_igemm") for k in ran), f"16x16: expected the direct kernel: {ran}"
    assert_close(small, ref[:, :, :16, :16], dtype, "NCHW 1x1 16x16", terms=70)


# (N, C, H, W, O, stride, rows copied): 1x1 NCHW problems the pixel GEMM takes (Conv2dConfig: not stride 1 with
# >= 1024 pixels per image). Rows that straddle images, partial column panels (O = 70, 49: at least 48 output
# channels, else the pre-packed weight has the direct kernel's layout); at a stride with O >= 2C the input is first
# copied to rows (conv2d_im2col), otherwise read in place (channels H * W apart).
NCHW_PIXEL_CASES = {
    "s1_small": (2, 40, 9, 7, 70, (1, 1), False),
    "s1_many_out": (1, 16, 5, 6, 64, (1, 1), False),
    "s2_in_place": (2, 64, 10, 8, 48, (2, 2), False),
    "s2_copied": (3, 24, 13, 14, 70, (2, 2), True),
    "s3x2_copied": (1, 16, 7, 9, 49, (3, 2), True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", NCHW_PIXEL_CASES.values(), ids=NCHW_PIXEL_CASES.keys())
def test_nchw_pointwise_as_pixel_gemm(sycl_cpu, case, dtype):
    """A 1x1 NCHW forward as the pixel GEMM (rows = output pixels, columns = output channels) writing the NCHW
    output in place (its stores scatter over the channels, OH * OW apart): conv2d with and without bias,
    conv2d_relu with an NCHW residual (read at the output's offsets), conv2d_packed with and without the epilogue;
    one GEMM launch, the row copy only where the rule says, no direct kernel; against the oracle, and for float32
    and float64 bit-equal to the channels_last route on the same values (the same products summed in the same
    order): a wrong output or residual offset cannot hide inside the tolerance. At stride 1, grad_input likewise.
    Half types accumulate in float: the oracle only."""
    N, C, H, W, O, stride, copied = case
    x, w, b, res = _pointwise_layer(N, C, H, W, O, stride, dtype, seed=8)
    channels_last = _pointwise_runs(x.contiguous(memory_format=CL), w, b, res, stride)
    for name, (fn, expected) in _pointwise_runs(x, w, b, res, stride).items():
        with torch.no_grad():
            out, counts = launches(fn)
        assert counts.get("linear_gemm_panel", 0) == 1 and "conv2d_igemm" not in counts, (name, counts)
        assert counts.get("conv2d_im2col", 0) == (1 if copied else 0), (name, counts)
        assert out.is_contiguous() and out.shape == expected.shape
        assert_close(out, expected, dtype, f"NCHW pixel GEMM {name} {case}", terms=C + 2)
        if dtype in (torch.float32, torch.float64):
            with torch.no_grad():
                cl = channels_last[name][0]()
            assert torch.equal(out, cl), f"{name}: differs from the channels_last route"
    if stride != (1, 1):  # strided NCHW grad_input: the GEMM per image and col2im (test above)
        return
    # grad_input at stride 1: grad_input [pixels, C] = grad_output [pixels, O] @ w [O, C], grad_output's pixels read
    # in place and grad_input written as NCHW
    go = torch.randn(res.shape, dtype=dtype)
    mask = [True, False, False]
    (gi, _, _), counts = launches(lambda: _backward(go, x, w, [1, 1], [0, 0], [1, 1], mask))
    assert counts.get("linear_gemm_panel", 0) == 1 and "conv2d_igemm" not in counts, counts
    assert gi.is_contiguous()
    ref_gi, _, _ = _oracle_backward(go, x, w, [1, 1], [0, 0], [1, 1], mask)
    assert_close(gi, ref_gi, dtype, f"NCHW pixel GEMM grad_input {case}", terms=O)
    if dtype in (torch.float32, torch.float64):
        gi_cl, _, _ = _backward(go.contiguous(memory_format=CL), x.contiguous(memory_format=CL), w, [1, 1], [0, 0],
                                [1, 1], mask)  # fmt: skip
        assert torch.equal(gi, gi_cl), "grad_input differs from the channels_last route"


# grad_output that is not dense in the problem's format: expanded (what `out.sum().backward()` passes: every
# stride 0), partly broadcast, NCHW memory for a channels_last problem (and the reverse), and a strided slice.
GRAD_KINDS = {
    "expanded": lambda fmt: torch.full((1, 1, 1, 1), 0.75).expand(2, 100, 33, 32),
    "broadcast": lambda fmt: torch.randn(1, 100, 1, 32).expand(2, 100, 33, 32),
    "other_format": lambda fmt: torch.randn(2, 100, 33, 32).contiguous(
        memory_format=torch.contiguous_format if fmt == CL else CL
    ),
    "strided": lambda fmt: torch.randn(2, 100, 33, 64).contiguous(memory_format=fmt)[..., ::2],
}


@pytest.mark.parametrize("kind", GRAD_KINDS.keys())
@pytest.mark.parametrize("memory_format", ["nchw", "channels_last"])
def test_non_dense_grad_output_takes_the_gemm_routes(sycl_cpu, memory_format, kind):
    """conv2d_backward makes grad_output dense in the problem's format once (a channels_last problem on a CPU device
    by a SYCL copy, conv2d_im2col onto an unpadded grid; NCHW by torch), so a 1x1 layer's grad_input still runs as
    a GEMM (not the direct kernel), and every gradient matches the float64 oracle and, bit for bit, the same call
    with a dense grad_output."""
    fmt = CL if memory_format == "channels_last" else torch.contiguous_format
    torch.manual_seed(6)
    x = torch.randn(2, 70, 33, 32).contiguous(memory_format=fmt)
    w = torch.randn(100, 70, 1, 1)
    go = GRAD_KINDS[kind](fmt)
    assert go.shape == (2, 100, 33, 32) and not go.is_contiguous(memory_format=fmt)
    (gi, gw, gb), ran = launches(lambda: _backward(go, x, w, [1, 1], [0, 0], [1, 1], [True, True, True]))
    assert "conv2d_igemm" not in ran, f"the direct kernel ran: {ran}"
    # one conv2d_im2col launch either way: channels_last, the copy (grad_weight reads the input's rows in place);
    # NCHW, grad_weight's patches (the copy is torch's)
    assert ran.get("conv2d_im2col", 0) == 1, ran
    ref = _oracle_backward(go, x, w, [1, 1], [0, 0], [1, 1], [True, True, True])
    dense = _backward(go.contiguous(memory_format=fmt), x, w, [1, 1], [0, 0], [1, 1], [True, True, True])
    for name, got, expected, same, terms in zip(
        ("grad_input", "grad_weight", "grad_bias"), (gi, gw, gb), ref, dense, (100, 2 * 33 * 32, 2 * 33 * 32)
    ):
        assert_close(got, expected, torch.float32, f"{kind} grad_output: {name}", terms=terms)
        torch.testing.assert_close(got, same, rtol=0, atol=0)


def test_backward_with_nothing_asked_launches_nothing(sycl_cpu):
    """output_mask all false: empty gradients, as the reference gives, and no copy of a non-dense grad_output queued
    (it would outlive the call unwaited)."""
    x = torch.randn(1, 8, 5, 5).contiguous(memory_format=CL)
    go = torch.full((1, 1, 1, 1), 1.0).expand(1, 4, 5, 5)
    grads, ran = launches(lambda: _backward(go, x, torch.randn(4, 8, 3, 3), [1, 1], [1, 1], [1, 1], [False] * 3))
    assert ran == {} and all(g.numel() == 0 for g in grads), (ran, grads)


def _calls() -> int:
    return _C.sycl.conv2d_winograd_calls()


@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("memory_format", ["nchw", "channels_last"])
def test_winograd_unpacked_forward_and_grad_input(sycl_cpu, monkeypatch, padding, memory_format):
    """XKERNELS_CONV_WINOGRAD=1: conv2d with an unpacked weight and grad_input of a 3x3 stride-1 convolution run
    the Winograd kernels (one call each) and match the oracle; odd sizes, 70 -> 100 channels."""
    monkeypatch.setenv("XKERNELS_CONV_WINOGRAD", "1")
    fmt = CL if memory_format == "channels_last" else torch.contiguous_format
    torch.manual_seed(3)
    x = torch.randn(2, 70, 9, 11).contiguous(memory_format=fmt)
    w = torch.randn(100, 70, 3, 3)
    before = _calls()
    out = xkernels.conv2d(x, w, padding=padding)
    assert _calls() == before + 1
    assert_close(out, F.conv2d(x.double(), w.double(), padding=padding), torch.float32, "winograd fwd", terms=630)
    go = torch.randn_like(out)
    gi, _, _ = _backward(go, x, w, [1, 1], [padding] * 2, [1, 1], [True, False, False])
    assert _calls() == before + 2
    ref, _, _ = _oracle_backward(go, x, w, [1, 1], [padding] * 2, [1, 1], [True, False, False])
    assert gi.is_contiguous(memory_format=fmt)
    assert_close(gi, ref, torch.float32, "winograd grad_input", terms=900)


def test_winograd_grad_input_rule_and_switch(sycl_cpu, monkeypatch):
    """Unset: a ResNet-like 3x3 layer's grad_input takes Winograd (enough tiles), a 5x5 one does not (too few);
    '0' keeps the direct kernel, whose result agrees within the float32 tolerance; stride 2 and dilation never
    take it."""
    torch.manual_seed(4)
    x = torch.randn(2, 128, 14, 14).contiguous(memory_format=CL)
    w = torch.randn(128, 128, 3, 3)
    go = torch.randn(2, 128, 14, 14).contiguous(memory_format=CL)
    monkeypatch.delenv("XKERNELS_CONV_WINOGRAD", raising=False)
    before = _calls()
    wino, _, _ = _backward(go, x, w, [1, 1], [1, 1], [1, 1], [True, False, False])
    assert _calls() == before + 1
    _backward(go[:1, :, :5, :5], x[:1, :, :5, :5], w, [1, 1], [1, 1], [1, 1], [True, False, False])
    assert _calls() == before + 1
    monkeypatch.setenv("XKERNELS_CONV_WINOGRAD", "0")
    direct, _, _ = _backward(go, x, w, [1, 1], [1, 1], [1, 1], [True, False, False])
    assert _calls() == before + 1
    ref, _, _ = _oracle_backward(go, x, w, [1, 1], [1, 1], [1, 1], [True, False, False])
    assert_close(wino, ref, torch.float32, "winograd grad_input", terms=1152)
    assert_close(direct, ref, torch.float32, "direct grad_input", terms=1152)
    monkeypatch.setenv("XKERNELS_CONV_WINOGRAD", "1")
    go2 = torch.randn(2, 128, 7, 7).contiguous(memory_format=CL)
    _backward(go2, x, w, [2, 2], [1, 1], [1, 1], [True, False, False])
    go3 = torch.randn(2, 128, 12, 12).contiguous(memory_format=CL)
    _backward(go3, x, w, [1, 1], [1, 1], [2, 2], [True, False, False])
    assert _calls() == before + 1
