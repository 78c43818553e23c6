"""xkernels.nn modules as drop-in replacements, state_dict compatibility both ways, and
optimize() on nested models (outputs, shared parameters, training, torch.compile)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import xkernels
import xkernels.nn as xnn
from xkernels.parity import tensor_error
from xkernels.tolerances import (
    COMPILED_VS_EAGER,
    DTYPES,
    LOSS_AFTER_TRAINING_REL,
    MODEL_AGAINST_TORCH,
    after_sgd_step,
    against_torch,
    assert_close,
)

import _backends


def _within_budget(name, got, module64, inputs, same_dtype):
    """`got` against the float64 copy of the torch module, budget relative to the torch module
    in the same dtype."""
    ref = module64(*[t.detach().double() for t in inputs])
    err = tensor_error(name, got, ref, got.dtype, same_dtype)
    assert err.passed, err


def _pair_modules(torch_module: nn.Module, x_module: nn.Module, x: torch.Tensor, dtype):
    """Forward and parameter gradients of the xkernels module vs the torch module holding
    the same state, both against the float64 torch module."""
    torch_module = torch_module.to(dtype)
    x_module.load_state_dict(torch_module.state_dict())
    x_module = x_module.to(dtype)
    xin = x.to(dtype)
    m64 = copy.deepcopy(torch_module).double()
    x_t, x_x, x64 = (xin.clone().requires_grad_(), xin.clone().requires_grad_(), xin.double().requires_grad_())
    out_t = torch_module(x_t)
    out_x = x_module(x_x)
    _within_budget("output", out_x, m64, [xin], out_t)
    g = torch.randn(out_t.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out_t.backward(g.to(dtype))
    out_x.backward(g.to(dtype))
    m64(x64).backward(g)
    err = tensor_error("grad_input", x_x.grad, x64.grad, dtype, x_t.grad)
    assert err.passed, err
    for (n, p_t), (_, p_x), (_, p64) in zip(
        torch_module.named_parameters(), x_module.named_parameters(), m64.named_parameters()
    ):
        err = tensor_error(f"grad_{n}", p_x.grad, p64.grad, dtype, p_t.grad)
        assert err.passed, err


# ------------------------------------------------------------------------------ FusedLinearReLU


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_linear_relu_module_matches_linear_relu(dtype, bias):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(13, 7, bias=bias), nn.ReLU())
    xm = xnn.FusedLinearReLU(13, 7, bias=bias)
    x = torch.randn(5, 13)
    _pair_modules(ref, nn.Sequential(xm), x, dtype)


def test_fused_linear_relu_same_init_params_and_keys_as_linear():
    torch.manual_seed(3)
    lin = nn.Linear(11, 6)
    torch.manual_seed(3)
    fused = xnn.FusedLinearReLU(11, 6)
    assert list(fused.state_dict()) == list(lin.state_dict()) == ["weight", "bias"]
    assert torch.equal(fused.weight, lin.weight) and torch.equal(fused.bias, lin.bias)
    assert [n for n, _ in fused.named_parameters()] == ["weight", "bias"]
    assert "in_features=11, out_features=6, bias=True" in repr(fused)
    nb = xnn.FusedLinearReLU(4, 3, bias=False, dtype=torch.float64)
    assert nb.bias is None and nb.weight.dtype == torch.float64 and list(nb.state_dict()) == ["weight"]


def test_fused_linear_relu_state_dict_round_trip_both_ways():
    torch.manual_seed(0)
    lin, fused = nn.Linear(9, 4), xnn.FusedLinearReLU(9, 4)
    fused.load_state_dict(lin.state_dict())  # Linear checkpoint -> FusedLinearReLU
    assert torch.equal(fused.weight, lin.weight) and torch.equal(fused.bias, lin.bias)
    lin2 = nn.Linear(9, 4)
    with torch.no_grad():
        fused.weight.mul_(2)
    lin2.load_state_dict(fused.state_dict())  # and back
    assert torch.equal(lin2.weight, fused.weight) and torch.equal(lin2.bias, fused.bias)
    x = torch.randn(3, 9)
    rtol, atol = against_torch(torch.float32)
    torch.testing.assert_close(fused(x), torch.relu(lin2(x)), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------ Conv2d


CONV_CONFIGS = [
    dict(kernel_size=3, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(kernel_size=4, padding="same"),
    dict(kernel_size=3, padding="same", dilation=2),
    dict(kernel_size=3, padding="valid", stride=2),
    dict(kernel_size=1, groups=2, bias=False),
]


@pytest.mark.parametrize("cfg", CONV_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_module_matches_torch(cfg, dtype):
    torch.manual_seed(0)
    ref = nn.Conv2d(4, 6, **cfg)
    xm = xnn.Conv2d(4, 6, **cfg)
    x = torch.randn(2, 4, 9, 8)
    _pair_modules(ref, xm, x, dtype)


def test_conv2d_is_a_torch_conv2d_with_same_init_keys_and_repr():
    torch.manual_seed(5)
    ref = nn.Conv2d(3, 8, 3, stride=2, padding="valid")
    torch.manual_seed(5)
    xm = xnn.Conv2d(3, 8, 3, stride=2, padding="valid")
    assert isinstance(xm, nn.Conv2d)
    assert list(xm.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    assert torch.equal(xm.weight, ref.weight) and torch.equal(xm.bias, ref.bias)
    assert repr(xm).startswith("xkernels.nn.Conv2d(3, 8, kernel_size=(3, 3), stride=(2, 2), padding=valid")
    ref.load_state_dict(xm.state_dict())
    xm.load_state_dict(ref.state_dict())


PADDING_MODES = ["zeros", "reflect", "replicate", "circular"]
PADDING_MODE_CONFIGS = [
    dict(kernel_size=3, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(2, 1), dilation=(1, 2)),
    dict(kernel_size=4, padding="same"),  # odd total padding: torch puts the extra row/column right/bottom
    dict(kernel_size=(2, 3), padding="same", dilation=(3, 2)),
    dict(kernel_size=3, padding="valid", stride=2),
    dict(kernel_size=3, padding=(0, 2), groups=2, bias=False),
]


@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize("cfg", PADDING_MODE_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_conv2d_padding_modes_match_torch(backend, mode, cfg, dtype):
    """Every padding_mode x padding form, forward and backward (input, weight, bias), against torch.nn.Conv2d."""
    ref = nn.Conv2d(4, 6, padding_mode=mode, **cfg)
    xm = xnn.Conv2d(4, 6, padding_mode=mode, **cfg)
    assert xm._reversed_padding_repeated_twice == ref._reversed_padding_repeated_twice
    _pair_modules(ref, xm, torch.randn(2, 4, 9, 8), dtype)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_padding_modes_all_dtypes_unbatched_and_channels_last(backend, mode, dtype):
    ref = nn.Conv2d(3, 5, 3, padding=(1, 2), padding_mode=mode)
    xm = xnn.Conv2d(3, 5, 3, padding=(1, 2), padding_mode=mode)
    _pair_modules(ref, xm, torch.randn(2, 3, 7, 6), dtype)
    _pair_modules(ref, xm, torch.randn(3, 7, 6), dtype)  # unbatched
    _pair_modules(ref, xm, torch.randn(2, 3, 7, 6).contiguous(memory_format=torch.channels_last), dtype)


def test_conv2d_padding_mode_constructor_arguments_and_errors_as_torch():
    """Every torch.nn.Conv2d constructor argument is taken (positionally too) with torch's result and errors."""
    args = (4, 6, (3, 2), (2, 1), "valid", (1, 2), 2, False, "circular", "cpu", torch.float64)
    torch.manual_seed(7)
    ref = nn.Conv2d(*args)
    torch.manual_seed(7)
    xm = xnn.Conv2d(*args)
    assert xm.bias is None and xm.weight.dtype == torch.float64 and xm.padding_mode == "circular"
    assert torch.equal(xm.weight, ref.weight)
    assert repr(xm) == "xkernels.nn." + repr(ref)
    for bad in (dict(padding_mode="mirror"), dict(padding=1, groups=4), dict(padding="same", stride=2)):
        kw = dict(kernel_size=3) | bad
        with pytest.raises(ValueError) as want:
            nn.Conv2d(4, 6, **kw)
        with pytest.raises(ValueError) as got:
            xnn.Conv2d(4, 6, **kw)
        assert str(got.value) == str(want.value)
    # F.pad's own error for a reflect padding wider than the input, as torch.nn.Conv2d raises it.
    ref, xm = (
        nn.Conv2d(1, 1, 3, padding=4, padding_mode="reflect"),
        xnn.Conv2d(1, 1, 3, padding=4, padding_mode="reflect"),
    )
    x = torch.randn(1, 1, 3, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        ref(x)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        xm(x)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv2d_from_conv2d_and_optimize_keep_padding_mode(mode):
    ref = nn.Sequential(nn.Conv2d(3, 4, 3, padding="same", padding_mode=mode), nn.ReLU())
    x = torch.randn(2, 3, 6, 5)
    xm = xnn.Conv2d.from_conv2d(ref[0])
    assert xm.padding_mode == mode and xm.weight is ref[0].weight
    rtol, atol = against_torch(torch.float32)
    torch.testing.assert_close(xm(x), ref[0](x), rtol=rtol, atol=atol)
    opt = xkernels.optimize(ref)
    assert getattr(opt[0], "padding_mode", mode) == mode
    torch.testing.assert_close(opt(x), ref(x), rtol=rtol, atol=atol)
    m = xnn.Conv2d(3, 4, 3, padding=1)
    m.padding_mode = mode  # changed after construction, as on a torch.nn.Conv2d: the next call pads in it
    t = nn.Conv2d(3, 4, 3, padding=1)
    t.load_state_dict(m.state_dict())
    t.padding_mode = mode
    torch.testing.assert_close(m(x), t(x), rtol=rtol, atol=atol)


def test_conv2d_unbatched_and_channels_last():
    torch.manual_seed(0)
    ref = nn.Conv2d(3, 5, 3, padding=1)
    xm = xnn.Conv2d.from_conv2d(ref)
    x = torch.randn(3, 7, 7)
    rtol, atol = against_torch(torch.float32)
    torch.testing.assert_close(xm(x), ref(x), rtol=rtol, atol=atol)
    xc = torch.randn(2, 3, 7, 7).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(xm(xc), ref(xc), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------ LayerNorm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "kw",
    [dict(), dict(elementwise_affine=False), dict(bias=False), dict(eps=1e-3)],
    ids=["affine", "no-affine", "no-bias", "eps"],
)
def test_layer_norm_module_matches_torch(dtype, kw):
    torch.manual_seed(0)
    ref = nn.LayerNorm([3, 10], **kw)
    if ref.weight is not None:
        with torch.no_grad():  # non-trivial affine parameters
            ref.weight.normal_()
            if ref.bias is not None:
                ref.bias.normal_()
    xm = xnn.LayerNorm([3, 10], **kw)
    assert list(xm.state_dict()) == list(ref.state_dict())
    _pair_modules(ref, xm, torch.randn(4, 3, 10), dtype)


def test_layer_norm_state_dict_round_trip_and_type():
    ref = nn.LayerNorm(12)
    xm = xnn.LayerNorm.from_layer_norm(ref)
    assert isinstance(xm, nn.LayerNorm) and xm.weight is ref.weight and xm.bias is ref.bias
    with torch.no_grad():
        ref.weight.uniform_()
    fresh = xnn.LayerNorm(12)
    fresh.load_state_dict(ref.state_dict())
    back = nn.LayerNorm(12)
    back.load_state_dict(fresh.state_dict())
    assert torch.equal(back.weight, ref.weight)


# ------------------------------------------------------------------------------ optimize()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding="same")
        self.norm = nn.LayerNorm([8, 6, 6])
        self.keep = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect")  # optimize() leaves it as it is

    def forward(self, x):
        return self.keep(self.norm(torch.relu(self.conv(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(Block(), nn.ReLU())
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Sequential(nn.Linear(288, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU()),
            nn.Linear(16, 10),
            nn.ReLU(),  # Linear+ReLU at the end of the outer Sequential too
            nn.Linear(10, 5),
        )

    def forward(self, x):
        return self.head(self.features(x))


def _net():
    torch.manual_seed(0)
    return Net(), torch.randn(4, 3, 6, 6)


def test_optimize_nested_model_replaces_and_shares_parameters():
    model, x = _net()
    before = {n: type(m) for n, m in model.named_modules()}
    report = []
    opt = xkernels.optimize(model, report=report)
    assert {n for n, _, _ in report} == {"features.0.conv", "features.0.norm", "head.1.0", "head.1.2", "head.2"}
    assert type(opt.features[0].conv) is xnn.Conv2d and type(opt.features[0].norm) is xnn.LayerNorm
    assert type(opt.features[0].keep) is nn.Conv2d  # reflect padding left alone
    assert type(opt.head[1][0]) is xnn.FusedLinearReLU and type(opt.head[1][1]) is nn.Identity
    assert type(opt.head[2]) is xnn.FusedLinearReLU and type(opt.head[4]) is nn.Linear
    # The very same Parameter objects, and the same state_dict keys.
    assert all(p is q for p, q in zip(opt.parameters(), model.parameters()))
    assert list(opt.state_dict()) == list(model.state_dict())
    # The original model is untouched (inplace=False).
    assert {n: type(m) for n, m in model.named_modules()} == before
    assert opt is not model and opt.features[0] is not model.features[0]
    # Same function within the float32 budget of the float64 model.
    m64 = copy.deepcopy(model).double()
    err = tensor_error("out", opt(x), m64(x.double()), torch.float32, model(x))
    assert err.passed, err
    # Idempotent.
    again = []
    xkernels.optimize(opt, report=again)
    assert again == []


def test_optimize_inplace_and_single_layer_model():
    model, x = _net()
    ref_out = model(x)
    same = xkernels.optimize(model, inplace=True)
    assert same is model and type(model.features[0].conv) is xnn.Conv2d
    rtol, atol = MODEL_AGAINST_TORCH
    torch.testing.assert_close(model(x), ref_out, rtol=rtol, atol=atol)
    ln = nn.LayerNorm(5)
    assert type(xkernels.optimize(ln)) is xnn.LayerNorm and xkernels.optimize(ln).weight is ln.weight
    with pytest.raises(TypeError, match="torch.nn.Module"):
        xkernels.optimize(lambda t: t)


def test_optimize_only_exact_classes_and_consecutive_pairs():
    class MyLinear(nn.Linear):
        pass

    seq = nn.Sequential(MyLinear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh(), nn.ReLU(), nn.Linear(4, 4))
    report = []
    out = xkernels.optimize(seq, report=report)
    assert report == [] and out is seq


_LR = 0.1  # the learning rate of _sgd_steps


def _sgd_steps(model, x, target, steps):
    sgd = torch.optim.SGD(model.parameters(), lr=_LR)
    losses = []
    for _ in range(steps):
        sgd.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        sgd.step()
        losses.append(loss.item())
    return losses


def test_optimized_model_trains_like_the_original():
    model, x = _net()
    target = torch.randn(4, 5, generator=torch.Generator().manual_seed(2))
    twin = copy.deepcopy(model)  # trained with plain torch
    opt = xkernels.optimize(model)
    # One step: the same update as torch's, applied to the original's (shared) parameters.
    _sgd_steps(opt, x, target, 1)
    _sgd_steps(twin, x, target, 1)
    assert all(p is q for p, q in zip(opt.parameters(), model.parameters()))
    rtol, atol = after_sgd_step(_LR)
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=lambda m, n=n: f"{n}: {m}")
    # More steps: it trains. Trajectories are not compared step by step: a pre-activation that
    # lands within rounding distance of 0 flips a ReLU in one run and not in another (float32
    # torch vs float64 vs a backend), after which two correct runs legitimately drift apart.
    losses = _sgd_steps(opt, x, target, 15)
    twin_losses = _sgd_steps(twin, x, target, 15)
    assert losses[-1] < 0.95 * losses[0]
    assert losses[-1] == pytest.approx(twin_losses[-1], rel=LOSS_AFTER_TRAINING_REL)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_optimized_model_under_torch_compile(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.LayerNorm(4 * 5 * 5),
        nn.Linear(100, 16),
        nn.ReLU(),
        nn.Linear(16, 3),
    )
    opt = xkernels.optimize(model)
    x = torch.randn(2, 3, 5, 5)
    eager = opt(x)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in opt.parameters()]
    opt.zero_grad()
    compiled = torch.compile(opt, backend=backend, fullgraph=True)
    out = compiled(x)
    out.sum().backward()
    rtol, atol = COMPILED_VS_EAGER
    torch.testing.assert_close(out, eager, rtol=rtol, atol=atol)
    for g, p in zip(eager_grads, opt.parameters()):
        torch.testing.assert_close(p.grad, g, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- FusedLinearReLU: pre-packed weight cache
def _packed_cache(m):
    return m.__dict__.get("_packed_cache")


@pytest.fixture
def sycl_backend():
    _backends.get("sycl")  # the packed path runs on the SYCL backend only
    with xkernels.use_backend("sycl"):
        yield


def _expected(m, x):
    return torch.relu(torch.nn.functional.linear(x.double(), m.weight.double(), m.bias.double()))


def test_fused_linear_relu_packed_cache_used_and_invalidated(sycl_backend):
    torch.manual_seed(0)
    m = xkernels.nn.FusedLinearReLU(40, 130, pack_weight=True)
    x = torch.randn(100, 40)
    with torch.no_grad():
        y = m(x)
    first = _packed_cache(m)
    assert first is not None, "no-grad forward on the SYCL backend must pack the weight"
    torch.testing.assert_close(y, xkernels.fused_linear_relu(x, m.weight.detach(), m.bias.detach()), rtol=0, atol=0)
    with torch.no_grad():
        m(x)
    assert _packed_cache(m)[2] is first[2], "unchanged weight: the packed copy is reused"
    assert set(m.state_dict()) == {"weight", "bias"}
    # In-place update of the parameter: version changes, so it re-packs and the result follows.
    with torch.no_grad():
        m.weight.add_(1)
        y = m(x)
    assert _packed_cache(m)[2] is not first[2]
    assert_close(y, _expected(m, x), torch.float32, "packed module output")
    # A new Parameter object.
    second = _packed_cache(m)
    m.weight = torch.nn.Parameter(torch.randn(130, 40))
    with torch.no_grad():
        y = m(x)
    assert _packed_cache(m)[2] is not second[2]
    assert_close(y, _expected(m, x), torch.float32, "packed module output")
    # load_state_dict copies in place.
    third = _packed_cache(m)
    m.load_state_dict({"weight": torch.randn(130, 40), "bias": torch.randn(130)})
    with torch.no_grad():
        y = m(x)
    assert _packed_cache(m)[2] is not third[2]
    assert_close(y, _expected(m, x), torch.float32, "packed module output")
    # .to(dtype): the packed copy follows the new dtype.
    m.to(torch.float64)
    with torch.no_grad():
        y = m(x.double())
    assert y.dtype == torch.float64 and _packed_cache(m)[2].dtype == torch.float64
    assert_close(y, _expected(m, x), torch.float64, "packed module output")
    assert set(m.state_dict()) == {"weight", "bias"}


def test_fused_linear_relu_packed_not_used_when_grad_needed(sycl_backend):
    m = xkernels.nn.FusedLinearReLU(16, 8, pack_weight=True)
    x = torch.randn(24, 16)  # more rows than the unpacked small-M route takes
    y = m(x)  # grad mode on, parameters require grad: the plain op, gradients reach the parameters
    assert _packed_cache(m) is None
    y.sum().backward()
    assert m.weight.grad is not None and m.bias.grad is not None
    m.weight.requires_grad_(False)
    m.bias.requires_grad_(False)
    xg = x.clone().requires_grad_()
    m(xg).sum().backward()  # input requires grad: plain op too
    assert _packed_cache(m) is None and xg.grad is not None
    m(x)  # nothing requires grad: packed even with grad mode on
    assert _packed_cache(m) is not None


def test_fused_linear_relu_packed_only_on_sycl():
    m = xkernels.nn.FusedLinearReLU(16, 8, pack_weight=True)
    with xkernels.use_backend("reference"), torch.no_grad():
        with xkernels.dispatch_record() as rec:
            m(torch.randn(24, 16))
    assert _packed_cache(m) is None
    assert {op for op, _b, _d in rec.counts()} == {"fused_linear_relu"}
    m.pack_weight = False
    if xkernels.backends()["sycl"].available:
        with xkernels.use_backend("sycl"), torch.no_grad():
            m(torch.randn(24, 16))
        assert _packed_cache(m) is None, "pack_weight=False turns the cache off"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(16,), (1, 16), (16, 16), (2, 8, 16), (17, 16), (3, 6, 16)])
def test_fused_linear_relu_packed_module_small_m_runs_unpacked(sycl_backend, shape, dtype):
    """pack_weight with at most linear_unpacked_max_rows() rows (the leading dimensions' product; 16 on AVX2 CPUs, 0
    elsewhere) runs fused_linear_relu with the weight as stored, which is faster there, and gives that op's result
    bit for bit; more rows run the packed op. Either way the output is within the float64 oracle's tolerance."""
    limit = xkernels._C.sycl.linear_unpacked_max_rows()
    assert limit in (0, 16)
    torch.manual_seed(0)
    m = xkernels.nn.FusedLinearReLU(16, 40, pack_weight=True).to(dtype)
    x = torch.randn(shape).to(dtype)
    rows = x.numel() // 16  # (40 output features: never AMX's stored-weight route, which needs multiples of 32)
    with torch.no_grad(), xkernels.dispatch_record() as rec:
        y = m(x)
    ops = {op for op, _b, _d in rec.counts()}
    if rows <= limit:  # the same op and kernel, so the same bits (the packed GEMM sums in another order)
        assert ops == {"fused_linear_relu"} and _packed_cache(m) is None, (rows, ops)
        torch.testing.assert_close(y, xkernels.fused_linear_relu(x, m.weight.detach(), m.bias.detach()), rtol=0, atol=0)
    else:
        assert "fused_linear_relu_packed" in ops and _packed_cache(m) is not None, (rows, ops)
    assert y.shape == (*shape[:-1], 40)
    assert_close(y, _expected(m, x), dtype, "packed module output")


def test_fused_linear_relu_packing_is_opt_in_and_data_writes_need_invalidation(sycl_backend):
    # Off by default: a write through .data bypasses the version counter the cache relies on.
    m = xkernels.nn.FusedLinearReLU(64, 96)
    x = torch.randn(128, 64)
    with torch.no_grad():
        m(x)
        assert _packed_cache(m) is None
        m.weight.data.mul_(2)
        assert_close(m(x), _expected(m, x), torch.float32, "module output")
    # Opted in: the stale case the docstring describes, and the documented remedy.
    m.pack_weight = True
    assert "pack_weight=True" in repr(m)
    with torch.no_grad():
        m(x)
        m.weight.data.mul_(2)
        m.invalidate_packed_weight()
        assert _packed_cache(m) is None
        assert_close(m(x), _expected(m, x), torch.float32, "module output")


def test_optimize_pack_weights_flag():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4), torch.nn.ReLU())
    assert not any(getattr(m, "pack_weight", False) for m in xkernels.optimize(model).modules())
    packed = [
        m for m in xkernels.optimize(model, pack_weights=True).modules() if isinstance(m, xkernels.nn.FusedLinearReLU)
    ]
    assert len(packed) == 2 and all(m.pack_weight for m in packed)


# ---------------------------------------------------------------- calls that need no autograd graph
class _CountingGuard:
    """Stands in for torch._C._AutoDispatchBelowAutograd and counts how often it is entered."""

    entered = 0

    def __init__(self):
        self._guard = torch._C._AutoDispatchBelowAutograd()

    def __enter__(self):
        type(self).entered += 1
        return self._guard.__enter__()

    def __exit__(self, *exc):
        return self._guard.__exit__(*exc)


def test_calls_without_grad_skip_the_python_autograd_kernel(monkeypatch):
    """ops._call dispatches below autograd exactly where no graph is built: grad mode off, or no argument requiring
    grad, and no TorchDispatchMode active. With an argument that requires grad, the autograd kernel runs and
    gradients reach it."""
    monkeypatch.setattr(_CountingGuard, "entered", 0)
    monkeypatch.setattr(xkernels.ops, "_below_autograd", _CountingGuard)
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 8), torch.randn(6, 8), torch.randn(6)
    expected = torch.relu(torch.nn.functional.linear(x.double(), w.double(), b.double()))
    with torch.no_grad():
        y = xkernels.fused_linear_relu(x, w, b)
    assert _CountingGuard.entered == 1 and not y.requires_grad
    assert_close(y, expected, torch.float32, "no-grad call")
    y = xkernels.fused_linear_relu(x, w, b)  # grad mode on, nothing requires grad: no graph either
    assert _CountingGuard.entered == 2 and y.grad_fn is None
    wg = w.clone().requires_grad_()
    y = xkernels.fused_linear_relu(x, wg, b)  # a graph: through the autograd kernel
    assert _CountingGuard.entered == 2 and y.grad_fn is not None
    y.sum().backward()
    assert wg.grad is not None and wg.grad.shape == w.shape
    with torch.no_grad():
        xkernels.layer_norm(x, 8)
        xkernels.conv2d(torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3))
    assert _CountingGuard.entered == 4
    # Under a TorchDispatchMode the autograd layer runs as before: the mode sees layer_norm_forward.
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        xkernels.layer_norm(x, 8)
    assert _CountingGuard.entered == 4 and "xkernels::layer_norm_forward" in seen
