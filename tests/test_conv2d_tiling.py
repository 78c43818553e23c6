"""conv2d's work-group shape and weight packing on the SYCL backends: the per-layer tiling (pixel tiles per
work-group, K blocking; overridable through XKERNELS_CONV2D_TILING for measuring) never changes a bit of the
result, and the packing kernels copy the weight's elements exactly, from any weight layout. The forward's row runs
(a kernel row's taps from one address per pixel, taken without K blocks) are checked the same way: every K-blocked
tiling runs the same products tap by tap."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels import reference
from xkernels.tolerances import DTYPES, assert_close

from compare import randn

TILING_ENV = "XKERNELS_CONV2D_TILING"

# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups)
LAYERS = {
    "deep3x3": (2, 96, 5, 6, 80, 3, 3, 1, 1, 1, 1),  # reduction 864 steps: several K blocks
    # A 1x1 window with padding: the direct kernel (the GEMM routes take unpadded 1x1 layers in both formats).
    "pointwise": (1, 72, 7, 7, 64, 1, 1, 1, 1, 1, 1),
    "strided_groups": (2, 64, 9, 8, 96, 3, 3, 2, 1, 1, 2),
    # The forward without K blocks runs a kernel row's taps as one row run (one address per pixel; channels_last:
    # KW * C contiguous elements) where every pixel of a tile has the whole row inside the input, in both memory
    # formats: the 3-channel 7x7 stride-2 stem (64 channels: the wide 6-pixel tile; output columns 2-16 of 19
    # have their rows inside), and a 3x5 window whose padding (1) is short of KW // 2 (16 channels: the narrow
    # 8-pixel tile), so the tile of row 1's last 8 output pixels (m0 = 48) has one pixel whose run would end
    # exactly one past the input row.
    "stem_7x7_s2": (2, 3, 23, 37, 64, 7, 7, 2, 3, 1, 1),
    "row_run_edge": (1, 5, 6, 30, 16, 3, 5, 1, 1, 1, 1),
}
TILINGS = ["tiles=1,kblock=0", "tiles=3,kblock=100", "tiles=8,kblock=7", "kblock=1", "tiles=32"]


@pytest.fixture
def sycl_conv_backend(backend):
    if backend.name not in ("sycl", "acpp") or backend.device.type != "cpu":
        pytest.skip(f"the tiling override is read by the SYCL backends' CPU conv2d; this is '{backend.name}'")
    return backend


def _layer(case, dtype, channels_last=False):
    N, C, H, W, O, KH, KW, stride, padding, dilation, groups = case
    x = randn(N, C, H, W, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w = randn(O, C // groups, KH, KW, dtype=dtype)
    b = randn(O, dtype=dtype)
    return x, w, b, (stride, padding, dilation, groups)


@pytest.mark.parametrize("case", LAYERS.values(), ids=LAYERS.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_tiling_does_not_change_bits(sycl_conv_backend, monkeypatch, dtype, case, channels_last):
    """Every tiling (K blocks resume from partial sums stored exactly in the output; 16-bit types ignore
    kblock) gives the default tiling's bits: forward, conv2d_relu with a residual, packed, and grad_input."""
    # The direct kernel's tiling: its packed form too (not the Winograd kernels, which deep3x3 would take).
    monkeypatch.setenv("XKERNELS_CONV_WINOGRAD", "0")
    x, w, b, args = _layer(case, dtype, channels_last)
    r = randn(*F.conv2d(x.float(), w.float(), None, *args).shape, dtype=dtype)
    packed = xkernels.pack_conv2d_weight(w, args[3])
    g = randn(*r.shape, dtype=dtype)

    def run():
        xg = x.clone().requires_grad_()
        out = xkernels.conv2d(xg, w, b, *args)
        (gi,) = torch.autograd.grad(out, xg, g)
        with torch.no_grad():
            fused = xkernels.conv2d_relu(x, w, b, *args, residual=r)
            pk = xkernels.conv2d_packed(x, packed, w.shape, b, *args, residual=r, relu=True)
        return out.detach(), gi, fused, pk

    monkeypatch.delenv(TILING_ENV, raising=False)
    want = run()
    terms = case[1] // case[10] * case[5] * case[6]
    expected = F.conv2d(x.double(), w.double(), b.double(), *args)
    assert_close(want[0], expected, dtype, "conv2d (default tiling)", terms=terms)
    assert torch.equal(want[2], want[3])
    for tiling in TILINGS:
        monkeypatch.setenv(TILING_ENV, tiling)
        got = run()
        for name, a, e in zip(("output", "grad_input", "conv2d_relu", "conv2d_packed"), got, want, strict=True):
            assert torch.equal(a, e), f"{TILING_ENV}={tiling}: {name} differs from the default tiling"


@pytest.mark.parametrize("value", ["tiles=0", "kblock=-1", "tiles=2,foo=3", "kblock", "tiles=2x"])
def test_tiling_override_errors(sycl_conv_backend, monkeypatch, value):
    x, w, b, args = _layer(LAYERS["pointwise"], torch.float32)
    monkeypatch.setenv(TILING_ENV, value)
    with pytest.raises(ValueError, match=rf"xkernels\.conv2d: environment variable {TILING_ENV} must be .*'{value}'"):
        xkernels.conv2d(x, w, b, *args)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,groups",
    [((200, 8, 3, 3), 1), ((160, 40, 1, 1), 2), ((32, 1, 3, 3), 32), ((5, 3, 3, 2), 1)],
    ids=["panels", "group_panels", "depthwise", "narrow"],
)
def test_pack_kernel_copies_bits_from_any_layout(sycl_conv_backend, dtype, shape, groups):
    """The packing kernels copy elements bit for bit (NaN payloads, -0.0, subnormals kept) from contiguous,
    channels_last and strided weights: the result equals xkernels.reference's torch-op packing."""
    w = randn(*shape, dtype=dtype)
    flat = _bits(w.view(-1))
    flat[::7] = _bits(torch.tensor([float("nan")], dtype=dtype))[0] + 3  # a NaN with a payload
    w.view(-1)[1::11] = -0.0
    want = reference._t_pack_conv2d_weight(w, groups)
    views = {
        "contiguous": w,
        "channels_last": w.to(memory_format=torch.channels_last),
        "strided": torch.cat([w, w], dim=3)[..., : shape[3]],
    }
    for name, v in views.items():
        assert torch.equal(_bits(v.contiguous()), _bits(w)), name
        got = xkernels.pack_conv2d_weight(v, groups)
        assert got.shape == want.shape and torch.equal(_bits(got), _bits(want)), f"{name} weight"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grad_input_packing_from_channels_last_weight(sycl_conv_backend, dtype):
    """grad_input packs the weight transposed (source and destination channels swapped), also from a
    channels_last weight: the gradient matches float64 torch."""
    x, w, b, args = _layer(LAYERS["strided_groups"], dtype)
    wc = w.to(memory_format=torch.channels_last)
    xg = x.clone().requires_grad_()
    out = xkernels.conv2d(xg, wc, b, *args)
    g = randn(*out.shape, dtype=dtype)
    (gi,) = torch.autograd.grad(out, xg, g)
    x64 = x.double().requires_grad_()
    (want,) = torch.autograd.grad(F.conv2d(x64, w.double(), b.double(), *args), x64, g.double())
    assert_close(gi, want, dtype, "conv2d grad_input (channels_last weight)", terms=96 // 2 * 9)
