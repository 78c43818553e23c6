"""fused_linear_relu's bfloat16 forward on AMX (csrc/sycl/kernels/amx_gemm.hpp).

On a CPU with AMX (amx_bf16 and amx_tile in /proc/cpuinfo) xkernels sets the OpenCL CPU compiler's target to
sapphirerapids at import, and bf16 forward passes whose feature counts are multiples of 32 run on the matrix
unit (joint_matrix kernels built at run time). XKERNELS_SYCL_GEMM_VARIANT=amx insists on that path (an error
where it cannot run), cpu/gpu keep the FMA kernels. The kernel tests skip, with the reason, on CPUs without AMX;
the guard's tests run everywhere, the AMX-building ones in child processes (a wrong guard aborts a process).
"""

from __future__ import annotations

import os

import pytest
import torch

import xkernels
from xkernels import _C, _env
from xkernels.tolerances import assert_close, between_backends

import _amx_guard
import _backends

VARIANT_ENV = "XKERNELS_SYCL_GEMM_VARIANT"
AMX_TARGETS = ("sapphirerapids", "graniterapids")


def amx_on() -> tuple[bool, str]:
    on, why = _C.sycl.amx_status()
    return bool(on), str(why)


@pytest.fixture(scope="module")
def sycl_available():
    _backends.get("sycl")


@pytest.fixture
def amx(sycl_available, monkeypatch):
    """The AMX path forced (XKERNELS_SYCL_GEMM_VARIANT=amx) on the sycl backend; skips where there is none."""
    on, why = amx_on()
    if not on:
        pytest.skip(f"no AMX path on this machine: {why}")
    monkeypatch.setenv(VARIANT_ENV, "amx")
    with xkernels.use_backend("sycl"):
        yield


def oracle(x, w, b):
    return torch.relu(x.double() @ w.double().t() + (0 if b is None else b.double()))


# ---------------------------------------------------------------------------------------------- the guard


def test_the_guard_agrees_with_the_cpu_and_the_compiler_target(sycl_available):
    """amx_status is on exactly where the CPU has AMX, the compiler target is an AMX architecture and it is not
    turned off; its reason names what is missing."""
    on, why = amx_on()
    flags = _env.cpu_flags()
    target = os.environ.get("CL_CONFIG_CPU_TARGET_ARCH", "")
    off = os.environ.get("XKERNELS_SYCL_AMX") == "0"
    expected = {"amx_bf16", "amx_tile"} <= flags and target in AMX_TARGETS and not off
    assert on == expected, f"amx_status says {on} ({why}); flags/target/off say {expected} ({target!r}, {off})"
    if off:
        assert "XKERNELS_SYCL_AMX=0" in why
    elif not {"amx_bf16", "amx_tile"} <= flags:
        assert "/proc/cpuinfo" in why
    elif not on:
        assert "CL_CONFIG_CPU_TARGET_ARCH" in why
    assert xkernels.info()["sycl"]["amx"] == {"on": on, "why": why}


def test_import_sets_the_target_only_on_amx_cpus(monkeypatch):
    """_env sets CL_CONFIG_CPU_TARGET_ARCH=sapphirerapids where the CPU has AMX, and never over the user's value,
    with XKERNELS_SYCL_AMX=0, or once the OpenCL CPU runtime is loaded (it has read its target then)."""
    monkeypatch.delenv("CL_CONFIG_CPU_TARGET_ARCH", raising=False)
    monkeypatch.delenv("XKERNELS_SYCL_AMX", raising=False)
    monkeypatch.setattr(_env, "_mapped", lambda name: False)
    monkeypatch.setattr(_env, "cpu_flags", lambda: {"avx512f", "amx_bf16", "amx_tile"})
    assert _env._amx_target() == "sapphirerapids"
    monkeypatch.setattr(_env, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert _env._amx_target() is None
    monkeypatch.setattr(_env, "cpu_flags", lambda: {"amx_bf16", "amx_tile"})
    monkeypatch.setenv("XKERNELS_SYCL_AMX", "0")
    assert _env._amx_target() is None
    monkeypatch.delenv("XKERNELS_SYCL_AMX")
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "auto")
    assert _env._amx_target() is None
    monkeypatch.delenv("CL_CONFIG_CPU_TARGET_ARCH")
    monkeypatch.setattr(_env, "_mapped", lambda name: name == "libintelocl")
    assert _env._amx_target() is None


def test_the_amx_path_runs_in_a_child_process():
    """conftest ran the AMX path in a child before the suite used SYCL (tests/_amx_guard.py): it must have
    succeeded where the CPU has AMX."""
    if _amx_guard.result is None:
        pytest.skip("the CPU has no AMX (or XKERNELS_SYCL_AMX=0): no AMX kernel to build")
    ok, out = _amx_guard.result
    assert ok, f"the AMX path failed in a child process (turned off for this run):\n{out}"


def test_a_target_without_amx_keeps_the_fma_kernels_and_the_process_alive(sycl_available):
    """With the user's CL_CONFIG_CPU_TARGET_ARCH=auto (the target that aborts a joint_matrix build on this
    project's AMX VMs) the guard is off, a bf16 forward that would fit AMX runs on the FMA kernels, and the
    process lives. On CPUs without AMX the same holds with any target."""
    code, out = _amx_guard.run_child({"CL_CONFIG_CPU_TARGET_ARCH": "auto", "XKERNELS_SYCL_GEMM_VARIANT": "auto"})
    assert code == 0 and "AMX-STATUS False" in out and "AMX-CHILD-OK" in out, out[-3000:]
    assert "CL_CONFIG_CPU_TARGET_ARCH" in out or "/proc/cpuinfo" in out, out[-3000:]


# ---------------------------------------------------------------------------------------------- the kernels

# (M, N, K): M across the 16-row tile and the 32-row work-group (1, 15, 16, 17, 31, 33, 100), N = one and
# several 32-channel blocks, K = one and several 32-k steps.
SHAPES = [(1, 32, 32), (15, 64, 96), (16, 32, 64), (17, 96, 32), (31, 32, 128), (33, 64, 320), (100, 160, 256)]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("M,N,K", SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in SHAPES])
def test_matches_float64(amx, M, N, K, with_bias):
    scale = K**-0.25
    x = (torch.randn(M, K) * scale).bfloat16()
    w = (torch.randn(N, K) * scale).bfloat16()
    b = torch.randn(N).bfloat16() if with_bias else None
    with torch.no_grad():
        y = xkernels.fused_linear_relu(x, w, b)
    assert_close(y, oracle(x, w, b), torch.bfloat16, f"fused_linear_relu[amx] M={M} N={N} K={K}", terms=K)
    assert (y > 0).any() and (y == 0).any()


def test_integers_are_exact_and_equal_the_fma_kernels(amx, monkeypatch):
    """Small integers: every product and sum is exact in fp32 whatever the order, so AMX, the FMA kernels and
    float64 agree bit for bit (an indexing slip of one row, column or k step cannot hide in the tolerance)."""
    M, N, K = 37, 96, 160
    x = torch.randint(-3, 4, (M, K)).bfloat16()
    w = torch.randint(-3, 4, (N, K)).bfloat16()
    b = torch.randint(-3, 4, (N,)).bfloat16()
    with torch.no_grad():
        y = xkernels.fused_linear_relu(x, w, b)
        monkeypatch.setenv(VARIANT_ENV, "cpu")
        y_fma = xkernels.fused_linear_relu(x, w, b)
    assert torch.equal(y, oracle(x, w, b).bfloat16())
    assert torch.equal(y, y_fma)


BLOCKS_ENV = "XKERNELS_AMX_GEMM_BLOCKS"
# B blocks per work-group and work-group order (csrc/sycl/amx_gemm.h amx_blocks): one block, the default four, sets
# that do not divide the blocks (a short last set), A blocks fastest, more blocks than there are.
# linear=rows | weight: fused_linear_relu's operand roles (the activations' rows as A with the weight packed, or the
# weight's rows as A with the activations packed and the output transposed).
BLOCK_SETTINGS = [
    "b=1,order=b",
    "b=4,order=b",
    "b=3,order=b",
    "b=3,order=a",
    "b=1,order=a",
    "b=16,order=a",
    "linear=rows",
    "linear=weight",
    "b=3,order=a,linear=rows",
    "b=1,order=b,linear=rows",
]


def test_work_group_order_and_grouping_do_not_change_bits(amx, monkeypatch):
    """Every XKERNELS_AMX_GEMM_BLOCKS setting computes each output with the same sum in the same order: the same
    bits, within bf16's tolerance of float64, for the linear (out transposed; 7 B blocks of 32 rows, the last
    partial, K long enough for two L2 chunks of B; with linear=rows its 219 rows as A, the last 27 from the padded
    copy) and a 1x1 convolution (7 blocks of output channels)."""
    M, N, K = 7 * 32 - 5, 96, 4096
    x = (torch.randn(M, K) * K**-0.25).bfloat16()
    w = (torch.randn(N, K) * K**-0.25).bfloat16()
    b = torch.randn(N).bfloat16()
    xc = _cl(torch.randn(2, 2048, 5, 7).bfloat16())
    wc = (torch.randn(224, 2048, 1, 1) * 2048**-0.5).bfloat16()
    results = {}
    with torch.no_grad():
        for setting in BLOCK_SETTINGS:
            monkeypatch.setenv(BLOCKS_ENV, setting)
            before = _launches()
            results[setting] = (xkernels.fused_linear_relu(x, w, b), xkernels.conv2d_relu(xc, wc, b[:1].expand(224)))
            assert _launches() >= before + 2, f"{setting}: the AMX GEMM did not run both"
    first_lin, first_conv = results[BLOCK_SETTINGS[0]]
    for setting, (lin, conv) in results.items():
        assert_close(lin, oracle(x, w, b), torch.bfloat16, f"fused_linear_relu[amx, {setting}]", terms=K)
        assert_close(
            conv,
            conv_oracle(xc, wc, b[:1].expand(224), relu=True),
            torch.bfloat16,
            f"conv2d[amx, {setting}]",
            terms=2048,
        )
        assert torch.equal(lin, first_lin), setting
        assert torch.equal(conv, first_conv), setting


@pytest.mark.parametrize("value", ["b=0", "b=x", "order=c", "rows=2", "linear=cols"])
def test_a_bad_blocks_setting_names_the_variable(amx, monkeypatch, value):
    monkeypatch.setenv(BLOCKS_ENV, value)
    with pytest.raises(RuntimeError, match=BLOCKS_ENV):
        xkernels.fused_linear_relu(torch.randn(32, 64).bfloat16(), torch.randn(32, 64).bfloat16())


def test_a_3d_input_and_views(amx):
    """A [B, T, K] input, a transposed (non-contiguous) weight and an input view at an odd element offset (the
    packing kernel moves bf16 pairs as 32-bit words: such a view is copied first)."""
    x = torch.randn(2, 9, 64).bfloat16()
    w = torch.randn(64, 32).bfloat16().t()  # [32, 64], not contiguous
    b = torch.randn(32).bfloat16()
    flat = torch.randn(1 + 13 * 64).bfloat16()
    odd = flat[1:].view(13, 64)
    with torch.no_grad():
        y = xkernels.fused_linear_relu(x, w, b)
        y_odd = xkernels.fused_linear_relu(odd, w, b)
    assert_close(y, oracle(x.reshape(-1, 64), w, b).reshape(2, 9, 32), torch.bfloat16, "3-D input", terms=64)
    assert_close(y_odd, oracle(odd, w, b), torch.bfloat16, "odd offset", terms=64)


def test_nan_and_inf_propagate_like_torch(amx):
    """NaN in an input row gives NaN in that row's outputs (ReLU keeps NaN); +Inf gives +Inf or NaN as torch's."""
    x = torch.randn(20, 64).bfloat16()
    w = torch.randn(32, 64).bfloat16()
    x[3, 5] = float("nan")
    x[7, 0] = float("inf")
    with torch.no_grad():
        y = xkernels.fused_linear_relu(x, w, None)
    expected = torch.relu(x.float() @ w.float().t())
    assert torch.equal(torch.isnan(y), torch.isnan(expected))
    assert torch.equal(torch.isinf(y), torch.isinf(expected))
    assert torch.isnan(y[3]).all()


def test_auto_takes_the_amx_path_and_cpu_does_not(sycl_available, monkeypatch):
    """With the variant on auto a fitting bf16 forward builds and uses the AMX kernel file (the provider lists
    the group for the device); the module layer does not pre-pack such a weight."""
    on, why = amx_on()
    if not on:
        pytest.skip(f"no AMX path on this machine: {why}")
    monkeypatch.setenv(VARIANT_ENV, "auto")
    with xkernels.use_backend("sycl"), torch.no_grad():
        xkernels.fused_linear_relu(torch.randn(5, 64).bfloat16(), torch.randn(32, 64).bfloat16(), None)
    groups = {g for d in _C.sycl.provider_devices() for g in d["groups"]}
    assert "amx_gemm.hpp" in groups, groups
    assert _C.sycl.linear_amx_for_cpu_tensors(32, 64)
    assert not _C.sycl.linear_amx_for_cpu_tensors(33, 64) and not _C.sycl.linear_amx_for_cpu_tensors(32, 48)
    m = xkernels.nn.FusedLinearReLU(64, 32, pack_weight=True).bfloat16()
    with xkernels.use_backend("sycl"), torch.no_grad():
        y = m(torch.randn(3, 64).bfloat16())
    assert "_packed_cache" not in m.__dict__ and y.shape == (3, 32)
    monkeypatch.setenv(VARIANT_ENV, "cpu")
    assert not _C.sycl.linear_amx_for_cpu_tensors(32, 64)


def test_forcing_amx_where_it_cannot_run_names_the_reason(sycl_available, monkeypatch):
    monkeypatch.setenv(VARIANT_ENV, "amx")
    on, why = amx_on()
    with xkernels.use_backend("sycl"), torch.no_grad():
        if not on:
            with pytest.raises(RuntimeError, match="GEMM variant 'amx'.*not available"):
                xkernels.fused_linear_relu(torch.randn(4, 64).bfloat16(), torch.randn(32, 64).bfloat16(), None)
            return
        with pytest.raises(ValueError, match="out_features % 32 == 0, got in_features=64, out_features=48"):
            xkernels.fused_linear_relu(torch.randn(4, 64).bfloat16(), torch.randn(48, 64).bfloat16(), None)
        with pytest.raises(ValueError, match="bfloat16 only, got input dtype Float"):
            xkernels.fused_linear_relu(torch.randn(4, 64), torch.randn(32, 64), None)


def test_backward_through_an_amx_forward(amx):
    """Training in bf16: the forward runs on AMX, the backward on the FMA kernels; gradients within bf16's
    tolerance of float64 and of the reference backend's."""
    x = torch.randn(24, 64).bfloat16().requires_grad_()
    w = (torch.randn(32, 64) * 0.2).bfloat16().requires_grad_()
    b = torch.randn(32).bfloat16().requires_grad_()
    y = xkernels.fused_linear_relu(x, w, b)
    go = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, b), go)
    ref = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref_grads = torch.autograd.grad(oracle(*ref), ref, go.double())
    for name, g, r in zip(("input", "weight", "bias"), grads, ref_grads):
        assert_close(g, r, torch.bfloat16, f"grad of {name}", terms=64)
    with xkernels.use_backend("reference"):
        y_ref = xkernels.fused_linear_relu(x.detach(), w.detach(), b.detach())
    rtol, atol = between_backends(torch.bfloat16, terms=64)
    torch.testing.assert_close(y.detach().float(), y_ref.float(), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------- conv2d 1x1

# (N, C, O, H, W): pixel counts N*H*W that fill whole 32-pixel blocks (32, 64) and that leave a tail (49, 15, 98).
CONV_SHAPES = [(1, 32, 32, 4, 8), (2, 64, 32, 4, 4), (1, 96, 64, 7, 7), (1, 32, 96, 5, 3), (2, 64, 64, 7, 7)]


def _launches() -> int:
    return int(_C.sycl.amx_gemm_launches())


def _cl(t):
    return t.contiguous(memory_format=torch.channels_last)


def conv_oracle(x, w, b, res=None, relu=False):
    y = torch.nn.functional.conv2d(x.double(), w.double(), None if b is None else b.double())
    if res is not None:
        y = y + res.double()
    return torch.relu(y) if relu else y


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("N,C,O,H,W", CONV_SHAPES, ids=[f"N{n}-C{c}-O{o}-{h}x{w}" for n, c, o, h, w in CONV_SHAPES])
def test_conv2d_1x1_matches_float64(sycl_available, N, C, O, H, W, with_bias):
    """bf16 1x1 convolutions of channels_last inputs run on AMX (the launch counter moves): conv2d, conv2d_relu
    and conv2d_relu with a residual, within bf16's tolerance of float64, output channels_last."""
    on, why = amx_on()
    if not on:
        pytest.skip(f"no AMX path on this machine: {why}")
    x = _cl(torch.randn(N, C, H, W).bfloat16())
    w = (torch.randn(O, C, 1, 1) * C**-0.5).bfloat16()
    b = torch.randn(O).bfloat16() if with_bias else None
    res = _cl(torch.randn(N, O, H, W).bfloat16())
    with xkernels.use_backend("sycl"), torch.no_grad():
        before = _launches()
        y = xkernels.conv2d(x, w, b)
        y_relu = xkernels.conv2d_relu(x, w, b)
        y_res = xkernels.conv2d_relu(x, w, b, residual=res)
        assert _launches() > before, "the AMX GEMM was not launched"
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert_close(y, conv_oracle(x, w, b), torch.bfloat16, "conv2d[amx]", terms=C)
    assert_close(y_relu, conv_oracle(x, w, b, relu=True), torch.bfloat16, "conv2d_relu[amx]", terms=C)
    assert_close(y_res, conv_oracle(x, w, b, res, relu=True), torch.bfloat16, "conv2d_relu+res[amx]", terms=C + 1)


def test_conv2d_1x1_integers_equal_the_fma_kernels(sycl_available):
    """Small integers: exact in fp32 in any order, so AMX (channels_last) and the FMA kernels (the same input in
    NCHW, which AMX does not take) agree bit for bit, tail pixels included."""
    on, why = amx_on()
    if not on:
        pytest.skip(f"no AMX path on this machine: {why}")
    x = torch.randint(-3, 4, (2, 64, 5, 7)).bfloat16()
    w = torch.randint(-3, 4, (96, 64, 1, 1)).bfloat16()
    b = torch.randint(-3, 4, (96,)).bfloat16()
    with xkernels.use_backend("sycl"), torch.no_grad():
        before = _launches()
        y_fma = xkernels.conv2d_relu(x, w, b)
        assert _launches() == before, "an NCHW input must not take the AMX path"
        y_amx = xkernels.conv2d_relu(_cl(x), w, b)
        assert _launches() > before
    assert torch.equal(y_amx.contiguous(), y_fma.contiguous())
    assert torch.equal(y_amx, conv_oracle(x, w, b, relu=True).bfloat16())


# (N, C, O, H, W, kernel, padding, dilation): 3x3 with ResNet's padding and without, dilated, asymmetric padding
# and dilation, tiny images whose padded pixels outnumber the real ones.
WINDOWS = [
    (1, 32, 32, 7, 7, (3, 3), (1, 1), (1, 1)),
    (2, 64, 32, 5, 6, (3, 3), (1, 1), (1, 1)),
    (1, 32, 64, 8, 8, (3, 3), (0, 0), (1, 1)),
    (1, 32, 32, 9, 9, (3, 3), (2, 2), (2, 2)),
    (2, 32, 32, 4, 9, (3, 3), (0, 1), (1, 1)),
    (1, 64, 32, 6, 5, (3, 3), (1, 0), (1, 2)),
    (1, 32, 32, 2, 3, (3, 3), (1, 1), (1, 1)),
]


@pytest.mark.parametrize(
    "case", WINDOWS, ids=[f"{c[5][0]}x{c[5][1]}-p{c[6][0]}{c[6][1]}-d{c[7][0]}-{c[3]}x{c[4]}" for c in WINDOWS]
)
def test_conv2d_windows_match_float64(sycl_available, case):
    """3x3 windows, stride 1: each tap a GEMM on the zero-padded input shifted by whole rows. Against
    float64 with bias, ReLU and a residual, and bit for bit against the FMA kernels on small integers."""
    on, why = amx_on()
    if not on:
        pytest.skip(f"no AMX path on this machine: {why}")
    N, C, O, H, W, k, pad, dil = case
    taps = k[0] * k[1]
    x = _cl(torch.randn(N, C, H, W).bfloat16())
    w = (torch.randn(O, C, *k) * (taps * C) ** -0.5).bfloat16()
    b = torch.randn(O).bfloat16()
    with xkernels.use_backend("sycl"), torch.no_grad():
        before = _launches()
        y = xkernels.conv2d(x, w, b, padding=pad, dilation=dil)
        assert _launches() > before, "the AMX GEMM was not launched"
        res = _cl(torch.randn_like(y))
        y_res = xkernels.conv2d_relu(x, w, b, padding=pad, dilation=dil, residual=res)
        xi = torch.randint(-2, 3, (N, C, H, W)).bfloat16()
        wi = torch.randint(-2, 3, (O, C, *k)).bfloat16()
        y_int = xkernels.conv2d(_cl(xi), wi, b.round(), padding=pad, dilation=dil)
        y_int_fma = xkernels.conv2d(xi, wi, b.round(), padding=pad, dilation=dil)  # NCHW: the FMA kernels
    oracle = torch.nn.functional.conv2d(x.double(), w.double(), b.double(), padding=pad, dilation=dil)
    assert y.is_contiguous(memory_format=torch.channels_last) and y.shape == oracle.shape
    assert_close(y, oracle, torch.bfloat16, "conv2d window[amx]", terms=taps * C)
    assert_close(y_res, torch.relu(oracle + res.double()), torch.bfloat16, "conv2d_relu window[amx]", terms=taps * C)
    assert torch.equal(y_int.contiguous(), y_int_fma.contiguous())


def test_conv2d_that_amx_does_not_take(sycl_available):
    """5x5, 1x3, 2x2, stride 2, 1x1 with padding, groups, channel counts off 32, float32: the FMA kernels."""
    x = _cl(torch.randn(1, 64, 8, 8).bfloat16())
    cases = [
        (torch.randn(32, 64, 5, 5).bfloat16(), {}),
        (torch.randn(32, 64, 1, 3).bfloat16(), {"padding": (0, 1)}),
        (torch.randn(32, 64, 2, 2).bfloat16(), {}),
        (torch.randn(32, 64, 3, 3).bfloat16(), {"stride": 2}),
        (torch.randn(32, 64, 1, 1).bfloat16(), {"stride": 2}),
        (torch.randn(32, 64, 1, 1).bfloat16(), {"padding": 1}),
        (torch.randn(32, 32, 1, 1).bfloat16(), {"groups": 2}),
        (torch.randn(48, 64, 1, 1).bfloat16(), {}),
    ]
    with xkernels.use_backend("sycl"), torch.no_grad():
        before = _launches()
        for w, kw in cases:
            xkernels.conv2d(x, w, None, **kw)
        xkernels.conv2d(x.float(), torch.randn(32, 64, 1, 1), None)
        assert _launches() == before
    assert not _C.sycl.conv2d_amx_for_cpu_tensors(32, 64, 5, 5, (1, 1), (2, 2), 1)
    assert not _C.sycl.conv2d_amx_for_cpu_tensors(32, 64, 1, 1, (2, 2), (0, 0), 1)
    assert _C.sycl.conv2d_amx_for_cpu_tensors(32, 64, 3, 3, (1, 1), (1, 1), 1) == amx_on()[0]
    assert _C.sycl.conv2d_amx_for_cpu_tensors(32, 64, 1, 1, (1, 1), (0, 0), 1) == amx_on()[0]


def test_optimize_bf16_resnet_block_on_amx(sycl_available):
    """optimize(pack_weights=True) of a bf16 bottleneck: its convolutions run on AMX unpacked (the modules keep no
    packed copy of those weights); the output within bf16's tolerance."""
    on, why = amx_on()
    if not on:
        pytest.skip(f"no AMX path on this machine: {why}")
    torch.manual_seed(0)
    block = (
        torch.nn.Sequential(
            torch.nn.Conv2d(64, 32, 1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 1),
        )
        .eval()
        .bfloat16()
    )
    x = torch.randn(2, 64, 7, 7).bfloat16()
    with torch.no_grad():
        ref = block.double()(x.double())
        block = block.bfloat16()
        opt = xkernels.optimize(block, pack_weights=True)
        with xkernels.use_backend("sycl"):
            before = _launches()
            y = opt(x)
            assert _launches() >= before + 3
    convs = [m for m in opt.modules() if isinstance(m, xkernels.nn.Conv2d)]
    assert convs and not any("_packed_cache" in m.__dict__ for m in convs)  # all three on AMX, unpacked
    assert_close(y, ref, torch.bfloat16, "bf16 bottleneck", terms=64 * 9)
