"""Winograd F(2x2, 3x3) in conv2d_packed (SYCL backends, CPU tensors, float32): the packed layout's U against an
independent torch construction, results against the float64 oracle (random, small-integer: exact, and hostile
inputs), the epilogues and memory formats, NaN/Inf placement against the direct kernel, the rule that picks it
(a counter proves which path ran) and the XKERNELS_CONV_WINOGRAD switch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels import _C, reference
from xkernels.tolerances import assert_close, within_budget

from compare import randn, small_ints

ENV = "XKERNELS_CONV_WINOGRAD"

# (N, C, H, W, O, padding): odd sizes, sizes not a multiple of the 2x2 tile, channels not a multiple of the
# 16 lanes or of the 64-channel panel, padding 0 / 1 / 2, batch 1 and > 1
CASES = {
    "odd": (2, 70, 7, 9, 100, 1),
    "pad0": (1, 64, 6, 5, 64, 0),
    "pad2": (3, 65, 5, 8, 80, 2),
    "one_tile": (1, 64, 3, 3, 64, 0),  # a single 1x1 output
    "panels": (2, 96, 10, 11, 200, 1),  # 4 panels of 64 output channels, the last one part padding
    "resnet_like": (2, 128, 14, 14, 128, 1),
}


@pytest.fixture
def sycl_cpu(backend):
    if backend.name not in ("sycl", "acpp") or backend.device.type != "cpu":
        pytest.skip(f"Winograd runs in the SYCL backends' conv2d_packed on the CPU; this is '{backend.name}'")
    return backend


def _calls() -> int:
    return _C.sycl.conv2d_winograd_calls()


def _tensors(case, channels_last, gen=randn):
    N, C, H, W, O, pad = case
    x = gen(N, C, H, W, dtype=torch.float32)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w = gen(O, C, 3, 3, dtype=torch.float32)
    b = gen(O, dtype=torch.float32)
    r = gen(N, O, H + 2 * pad - 2, W + 2 * pad - 2, dtype=torch.float32)
    if channels_last:
        r = r.to(memory_format=torch.channels_last)
    return x, w, b, r, pad


def _packed(x, w, b, pad, **kw):
    packed = xkernels.pack_conv2d_weight(w)
    with torch.no_grad():
        return xkernels.conv2d_packed(x, packed, w.shape, b, padding=pad, **kw)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_matches_float64_oracle(sycl_cpu, monkeypatch, case, channels_last):
    """Plain, bias-free and conv2d_relu (residual, ReLU) outputs within the float32 tolerance of the float64
    oracle, in the input's memory format; the Winograd kernels ran for every call."""
    monkeypatch.setenv(ENV, "1")
    x, w, b, r, pad = _tensors(case, channels_last)
    terms = 9 * x.shape[1]
    before = _calls()
    plain = _packed(x, w, b, pad)
    nobias = _packed(x, w, None, pad)
    fused = _packed(x, w, b, pad, residual=r, relu=True)
    assert _calls() == before + 3
    x64, w64, b64, r64 = (t.double() for t in (x, w, b, r))
    ref = F.conv2d(x64, w64, b64, padding=pad)
    assert_close(plain, ref, torch.float32, "winograd", terms=terms)
    assert_close(nobias, F.conv2d(x64, w64, None, padding=pad), torch.float32, "winograd no bias", terms=terms)
    assert_close(fused, torch.relu(ref + r64), torch.float32, "winograd relu", terms=terms)
    for out in (plain, fused):
        assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_small_integers_exact(sycl_cpu, monkeypatch, case):
    """Small-integer inputs: every transform value is a multiple of 1/4 and every sum exact, so the result
    equals the oracle exactly (any wrong coefficient or index shows)."""
    monkeypatch.setenv(ENV, "1")
    x, w, b, r, pad = _tensors(case, False, gen=small_ints)
    before = _calls()
    out = _packed(x, w, b, pad, residual=r, relu=True)
    assert _calls() == before + 1
    ref = torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=pad) + r.double())
    assert torch.equal(out.double(), ref)


def test_unbatched_and_strided_input(sycl_cpu, monkeypatch):
    monkeypatch.setenv(ENV, "1")
    x, w, b, r, pad = _tensors(CASES["odd"], False)
    packed = xkernels.pack_conv2d_weight(w)
    view = torch.randn(2, 140, 7, 9)[:, ::2]  # channel stride 2
    # channel stride 1 (the vector-load input transform) with row stride 2 * W * C and an offset start
    view_cl = torch.randn(2, 70, 15, 9).contiguous(memory_format=torch.channels_last)[:, :, 1::2]
    assert view_cl.stride(1) == 1 and not view_cl.is_contiguous(memory_format=torch.channels_last)
    before = _calls()
    with torch.no_grad():
        out3 = xkernels.conv2d_packed(x[1], packed, w.shape, b, padding=pad)
        outv = xkernels.conv2d_packed(view, packed, w.shape, b, padding=pad)
        outc = xkernels.conv2d_packed(view_cl, packed, w.shape, b, padding=pad)
    assert _calls() == before + 3
    assert_close(
        outc, F.conv2d(view_cl.double(), w.double(), b.double(), padding=pad), torch.float32, "cl view", terms=630
    )
    assert out3.shape == (100, 7, 9)
    assert_close(
        out3, F.conv2d(x[1].double(), w.double(), b.double(), padding=pad), torch.float32, "unbatched", terms=630
    )
    assert_close(outv, F.conv2d(view.double(), w.double(), b.double(), padding=pad), torch.float32, "view", terms=630)


@pytest.mark.parametrize("kind", ["randn", "offset", "wide_range", "large_weights"], ids=str)
def test_error_within_parity_budget(sycl_cpu, monkeypatch, kind):
    """ResNet-50's 3x3 layer classes (channels 64..512): Winograd's max error against the float64 oracle stays
    inside the parity budget relative to torch's own float32 error (policy 2), also for inputs that make the
    transforms cancel (a large common offset, magnitudes spread over 6 decades, large weights)."""
    torch.manual_seed(1)
    for N, C, H in ((1, 64, 16), (1, 256, 14), (1, 512, 7)):
        x = torch.randn(N, C, H, H)
        w = torch.randn(C, C, 3, 3) / (9 * C) ** 0.5
        if kind == "offset":
            x = x + 100.0
        elif kind == "wide_range":
            x = x * torch.exp(torch.empty_like(x).uniform_(-7, 7))
        elif kind == "large_weights":
            w = w * 1e4
        x = x.to(memory_format=torch.channels_last)
        ref = F.conv2d(x.double(), w.double(), padding=1)
        monkeypatch.setenv(ENV, "1")
        wino = _packed(x, w, None, 1)
        ok, err, allowed = within_budget(wino, F.conv2d(x, w, padding=1), ref, torch.float32)
        assert ok, f"{kind} C={C}: error {err:.3g} > allowed {allowed:.3g}"


def test_nan_inf_placement_as_direct(sycl_cpu, monkeypatch):
    """A NaN input reaches exactly the outputs it reaches in the direct kernel (terms with a zero coefficient
    are left out of the transforms); an Inf input makes exactly the same outputs non-finite (Inf - Inf inside
    the transforms may turn the direct kernel's Inf into NaN there); a NaN weight makes its whole channel NaN."""
    x, w, b, _, pad = _tensors(CASES["odd"], True)
    x[0, 3, 2, 4] = float("nan")
    x[1, 5, 0, 0] = float("inf")
    x[1, 6, 6, 8] = float("-inf")
    w2 = w.clone()
    w2[7, 2, 1, 1] = float("nan")
    monkeypatch.setenv(ENV, "0")
    direct, direct_w = _packed(x, w, b, pad), _packed(x.nan_to_num(0, 0, 0), w2, b, pad)
    monkeypatch.setenv(ENV, "1")
    before = _calls()
    wino, wino_w = _packed(x, w, b, pad), _packed(x.nan_to_num(0, 0, 0), w2, b, pad)
    assert _calls() == before + 2
    assert torch.equal(wino.isnan() & ~direct.isinf(), direct.isnan())
    assert torch.equal(wino.isfinite(), direct.isfinite())
    assert direct.isnan().sum() == 9 * 100 and not direct.isfinite().all()  # 3x3 pixels x every channel
    assert torch.equal(wino_w.isnan(), direct_w.isnan())
    assert wino_w[:, 7].isnan().all() and wino_w.isnan().sum() == wino_w[:, 7].numel()


def test_packed_u_matches_torch_construction(sycl_cpu):
    """The device packing of U equals xkernels.reference's torch-op packing bit for bit (the same operation
    order), U is G g G^T, and the body before it is the direct kernel's layout (unpacks to the weight)."""
    w = randn(100, 70, 3, 3, dtype=torch.float32)
    packed = xkernels.pack_conv2d_weight(w)
    with reference.torch_ops():
        packed_t = xkernels.pack_conv2d_weight(w)
    assert torch.equal(packed, packed_t)
    off = reference.conv2d_pack_winograd(w.shape, 1, torch.float32)
    assert off > 0 and off % 16 == 0 and packed.numel() == off + 16 * 2 * 64 * 70
    u = packed[off:].view(4, 4, 2, 70, 64).permute(2, 4, 3, 0, 1).reshape(128, 70, 4, 4)
    G = torch.tensor([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=torch.float64)
    torch.testing.assert_close(u[:100].double(), G @ w.double() @ G.T, rtol=1e-6, atol=1e-6)
    assert not u[100:].any()
    assert torch.equal(reference._t_unpack_conv2d_weight(packed, list(w.shape), 1), w)


def test_choice_and_switch(sycl_cpu, monkeypatch):
    """Unset / 'auto': the rule takes Winograd for a ResNet-50-like layer; '0' turns it off (the direct kernel,
    bit-identical to conv2d); stride 2, dilation 2, groups, float64 and narrow layers never run it; a bad value
    raises."""
    x, w, b, _, pad = _tensors(CASES["resnet_like"], True)
    monkeypatch.delenv(ENV, raising=False)
    before = _calls()
    _packed(x, w, b, pad)
    assert _calls() == before + 1
    monkeypatch.setenv(ENV, "auto")
    _packed(x, w, b, pad)
    assert _calls() == before + 2
    # Few 2x2 tiles (one 5x5 image: 9 tiles x 128 channels, below WinogradConfig::kMinTileChannels): the direct kernel.
    x5 = x[:1, :, :5, :5].contiguous(memory_format=torch.channels_last)
    _packed(x5, w, b, pad)
    assert _calls() == before + 2
    # The smaller channel count weighs the tiles: 16 tiles x 64 -> 256 channels (1024) stays direct, 16 tiles x
    # 128 -> 256 channels (2048) takes Winograd.
    for cin, taken in ((64, 0), (128, 1)):
        xs = torch.randn(1, cin, 7, 7).contiguous(memory_format=torch.channels_last)
        ws = torch.randn(256, cin, 3, 3) / (9 * cin) ** 0.5
        _packed(xs, ws, torch.randn(256), 1)
        assert _calls() == before + 2 + taken, f"{cin} -> 256 channels over 16 tiles"
    before += 1
    monkeypatch.setenv(ENV, "1")
    _packed(x5, w, b, pad)
    assert _calls() == before + 3
    monkeypatch.setenv(ENV, "auto")
    before += 1
    monkeypatch.setenv(ENV, "0")
    off = _packed(x, w, b, pad)
    assert _calls() == before + 2
    assert torch.equal(off, xkernels.conv2d(x, w, b, padding=pad))
    monkeypatch.setenv(ENV, "1")
    packed = xkernels.pack_conv2d_weight(w)
    with torch.no_grad():
        xkernels.conv2d_packed(x, packed, w.shape, b, stride=2, padding=pad)
        xkernels.conv2d_packed(x, packed, w.shape, b, padding=2, dilation=2)
        xkernels.conv2d_packed(x.double(), xkernels.pack_conv2d_weight(w.double()), w.shape, b.double(), padding=1)
        wg = w[:, :64].contiguous()
        xkernels.conv2d_packed(x, xkernels.pack_conv2d_weight(wg, 2), wg.shape, b, padding=1, groups=2)
        wn = w[:, :32].contiguous()  # 32 input channels: the packed weight carries no U
        assert reference.conv2d_pack_winograd(wn.shape, 1, torch.float32) == 0
        xkernels.conv2d_packed(x[:, :32], xkernels.pack_conv2d_weight(wn), wn.shape, b, padding=1)
    assert _calls() == before + 2
    monkeypatch.setenv(ENV, "yes")
    with pytest.raises(ValueError, match=r"XKERNELS_CONV_WINOGRAD must be '0' \(off\), '1'"):
        _packed(x, w, b, pad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", ["odd", "panels", "resnet_like"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_half_types(sycl_cpu, monkeypatch, dtype, case, channels_last):
    """bfloat16 and float16: U float32 in the packed tensor's memory (bit-identical to the torch-op packing of
    the weight widened to float32), the input widened in the transform and the output rounded once: within the
    type's tolerance of the float64 oracle, plain and with the conv2d_relu epilogue, packed and unpacked weights;
    the Winograd kernels ran for every call but an unpacked one that AMX takes."""
    monkeypatch.setenv(ENV, "1")
    x, w, b, r, pad = (t.to(dtype) if isinstance(t, torch.Tensor) else t for t in _tensors(CASES[case], channels_last))
    packed = xkernels.pack_conv2d_weight(w)
    with reference.torch_ops():
        # bit for bit (U's float halves may read as 16-bit NaNs, which torch.equal would call unequal)
        assert torch.equal(packed.view(torch.int16), xkernels.pack_conv2d_weight(w).view(torch.int16))
    off = reference.conv2d_pack_winograd(w.shape, 1, dtype)
    assert off > 0 and off % 32 == 0
    u = packed[off:].view(torch.float32)
    P = reference.conv2d_pack_layout(w.shape, 1, dtype)[2]
    O, C = w.shape[:2]
    u = u.view(4, 4, -(-O // P), C, P).permute(2, 4, 3, 0, 1).reshape(-1, C, 4, 4)[:O]
    assert torch.equal(u, reference.winograd_weight(w.float()))
    terms = 9 * x.shape[1]
    before = _calls()
    with torch.no_grad():
        plain = xkernels.conv2d_packed(x, packed, w.shape, b, padding=pad)
        fused = xkernels.conv2d_packed(x, packed, w.shape, b, padding=pad, residual=r, relu=True)
    unpacked = xkernels.conv2d(x, w, b, padding=pad)
    # On a CPU with AMX the sycl backend runs an unpacked bfloat16 channels_last 3x3 layer with channel counts of
    # multiples of 32 on the matrix unit instead (tests/test_amx.py); the oracle below still checks it.
    amx = (
        sycl_cpu.name == "sycl"
        and dtype == torch.bfloat16
        and channels_last
        and _C.sycl.conv2d_amx_for_cpu_tensors(O, C, 3, 3, (1, 1), (pad, pad), 1)
    )
    assert _calls() == before + (2 if amx else 3)
    x64, w64, b64, r64 = (t.double() for t in (x, w, b, r))
    ref = F.conv2d(x64, w64, b64, padding=pad)
    for out in (plain, fused, unpacked):
        assert out.dtype == dtype
        assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert_close(plain, ref, dtype, "winograd", terms=terms)
    assert_close(unpacked, ref, dtype, "winograd per-call U", terms=terms)
    assert_close(fused, torch.relu(ref + r64), dtype, "winograd relu", terms=terms)
    # One rounding of the float32 result: the float32 Winograd on the widened tensors, rounded, is the same.
    with torch.no_grad():
        f32 = xkernels.conv2d_packed(x.float(), xkernels.pack_conv2d_weight(w.float()), w.shape, b.float(), padding=pad)
    assert torch.equal(plain, f32.to(dtype))
