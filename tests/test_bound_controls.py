"""Negative controls for the error checks: would they reject a wrong answer?

The property-based and hostile-input tests (test_fuzz.py, test_hostile.py) accept a result when every
element lies within a rigorous bound around the float64 result (python/xkernels/tolerances.py):

    output rounding 2 u_out |y|  +  BOUND_SAFETY * (n + 2) * u_acc * (the same computation on |x|)

A bound that is too loose passes every kernel, right or wrong; these tests show it is not. For each op
and dtype, on the backend under test:

* ``test_tightened_bound_accepts_kernels``: the real kernels stay within the bound with BOUND_SAFETY
  replaced by 1 (TIGHT): the classical worst-case rounding-error bound of a sum of n products in any
  order (Higham, gamma_n), which every correct summation order meets. So the factor 4 is margin, not need.
* ``test_checker_rejects``: results a real bug would give, each checked by the SAME bound and
  assert_within the fuzz tests use (test_fuzz._check_linear_output, test_fuzz._layer_norm_bounds,
  and test_conv2d_fuzz's formula, which `_conv_bound` repeats), must be rejected:
    - ``just-beyond``: one element a few ulps beyond the bound (the comparison itself);
    - ``ulps``: one element off by RESOLUTION (8) times the classical bound at that element;
    - ``dropped-term``: a reduction missing one term (a dropped input channel / K column; layer_norm:
      grad_bias missing a row) whose size is RESOLUTION times the classical bound;
    - ``bias-twice``: the bias (RESOLUTION times the classical bound) added twice.
  The sizes are fixed multiples of the classical bound, not of BOUND_SAFETY: a checker whose factor
  grew to RESOLUTION or more (BOUND_SAFETY = 400) accepts them, and these tests fail. The reductions
  are long (8192 terms), so that the accumulation term, which BOUND_SAFETY scales, dominates the
  output rounding even for bfloat16.

The policy-1 / policy-2 tolerances (assert_close, between_backends, within_budget) get the same
treatment at the end: a result through a lower-precision intermediate, or a few ulps off in the
half types, is rejected.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import (
    DTYPES,
    ELEMENTWISE,
    assert_close,
    between_backends,
    u_acc,
    u_out,
    within_budget,
)

import test_fuzz
from _reliability import assert_within, supports

pytestmark = pytest.mark.explicit_device

TIGHT = 1.0  # the classical bound: BOUND_SAFETY's margin removed
RESOLUTION = 8.0  # the checks must reject errors this many times the classical bound
BITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
CONTROLS = ["just-beyond", "ulps", "dropped-term", "bias-twice"]


def _tiny(dt):
    return torch.finfo(dt).tiny


@pytest.fixture
def safety(monkeypatch):
    """set(value): the factor test_fuzz's checkers use (their module global SAFETY, BOUND_SAFETY at import)."""

    def set_(value):
        monkeypatch.setattr(test_fuzz, "SAFETY", value)

    return set_


def _skip_unsupported(backend, dt):
    if not supports(backend, dt):
        pytest.skip(f"backend '{backend}' cannot run {dt} on this device")


def _ulp(v: torch.Tensor, dt) -> torch.Tensor:
    """The spacing of dt's values at |v| (float64, normal range)."""
    e = torch.floor(torch.log2(v.abs().clamp_min(torch.finfo(dt).tiny)))
    return torch.exp2(e - (BITS[dt] - 1))


def _perturb_one(out: torch.Tensor, e64: torch.Tensor, amount: torch.Tensor) -> torch.Tensor:
    """`out` with its largest-magnitude element moved away from e64 by at least `amount` (that element's
    entry), rounded outward into out's dtype."""
    dt = out.dtype
    o = out.detach().cpu().double().reshape(-1).clone()
    e = e64.detach().cpu().double().reshape(-1)
    i = int(e.abs().argmax())
    sign = 1.0 if o[i] >= e[i] else -1.0
    ulp = float(_ulp(o[i : i + 1], dt)[0])
    amount = amount.detach()
    steps = int(torch.ceil(torch.tensor(float(amount.reshape(-1)[i]) / ulp))) + 1
    o[i] = o[i] + sign * steps * ulp
    res = o.to(dt).reshape(out.shape)
    moved = abs(float(res.reshape(-1)[i].double()) - float(out.detach().cpu().double().reshape(-1)[i]))
    assert moved >= float(amount.reshape(-1)[i]), "test bug: perturbation lost in rounding"
    return res


def _just_beyond(out, e64, bound):
    """One element a few (3) ulps beyond its bound."""
    dt = out.dtype
    o = out.detach().cpu().double().reshape(-1).clone()
    e = e64.detach().cpu().double().reshape(-1)
    b = bound.detach().cpu().double().expand(e64.shape).reshape(-1)
    i = int(e.abs().argmax())
    sign = 1.0 if o[i] >= e[i] else -1.0
    ulp = float(_ulp(o[i : i + 1], dt)[0])
    need = float(b[i]) - abs(float(o[i] - e[i]))
    steps = max(0, int(torch.ceil(torch.tensor(need / ulp)))) + 3
    o[i] = o[i] + sign * steps * ulp
    return o.to(dt).reshape(out.shape)


# ------------------------------------------------------------------------------------------ the ops
# Positive inputs (no cancellation, ReLU passes everything): |y| = the computation on |x|, and the error
# a dropped term or a doubled bias makes is that term exactly.

K_LONG = 8192


def _positive(shape, gen, dt):
    return (1 + torch.rand(shape, generator=gen, dtype=torch.float64)).to(dt).double()


def _linear_case(dt):
    return test_fuzz.LinearCase(dt, (3,), K_LONG, 5, True, (False,) * 3, "normal", (None,) * 4, 0)


def _linear_classical(x64, w64, b64, dt):
    y = F.linear(x64, w64, b64)
    return 2 * u_out(dt) * y.abs() + TIGHT * (x64.shape[-1] + 2) * u_acc(dt) * F.linear(x64.abs(), w64.abs(), b64.abs())


def _linear_check(out, x64, w64, b64, dt):
    test_fuzz._check_linear_output("fused_linear_relu output", out, x64, w64, b64, _linear_case(dt), "control")


def _linear_bound(x64, w64, b64, dt):
    y = torch.relu(F.linear(x64, w64, b64))
    yabs = F.linear(x64.abs(), w64.abs(), b64.abs())
    return 2 * u_out(dt) * y.abs() + test_fuzz.SAFETY * (x64.shape[-1] + 2) * u_acc(dt) * yabs + _tiny(dt)


def _conv_bound(y64, yabs, n_red, dt, factor=None):
    """test_conv2d_fuzz's bound (factor None: test_fuzz.SAFETY, as there)."""
    factor = test_fuzz.SAFETY if factor is None else factor
    return 2 * u_out(dt) * y64.abs() + factor * (n_red + 2) * u_acc(dt) * yabs + _tiny(dt)


CONV_C, CONV_K = K_LONG // 4, 2  # reduction C * KH * KW = 8192


def _conv_values(gen, dt):
    x = _positive((1, CONV_C, 3, 3), gen, dt)
    w = _positive((3, CONV_C, CONV_K, CONV_K), gen, dt) / 4
    b = _positive((3,), gen, dt)
    return x, w, b


def _conv_check(out, x64, w64, b64, dt):
    y = F.conv2d(x64, w64, b64)
    yabs = F.conv2d(x64.abs(), w64.abs(), b64.abs())
    assert_within("conv2d output", out, y, _conv_bound(y, yabs, CONV_C * CONV_K * CONV_K, dt), "control")


def _conv_classical(x64, w64, b64, dt):
    y = F.conv2d(x64, w64, b64)
    yabs = F.conv2d(x64.abs(), w64.abs(), b64.abs())
    return _conv_bound(y, yabs, CONV_C * CONV_K * CONV_K, dt, factor=TIGHT)


LN_M, LN_N = 6, 4099
EPS = 1e-5


def _ln_values(gen, dt):
    x = torch.randn(LN_M, LN_N, generator=gen, dtype=torch.float64).to(dt).double()
    w = (1 + torch.rand(LN_N, generator=gen, dtype=torch.float64)).to(dt).double()
    b = torch.randn(LN_N, generator=gen, dtype=torch.float64).to(dt).double()
    dy = torch.randn(LN_M, LN_N, generator=gen, dtype=torch.float64).to(dt).double()
    return x, w, b, dy


def _ln_run(x64, w64, b64, dy64, dt, dev):
    x = x64.to(dt).to(dev).requires_grad_(True)
    w = w64.to(dt).to(dev).requires_grad_(True)
    b = b64.to(dt).to(dev).requires_grad_(True)
    out = xkernels.layer_norm(x, [LN_N], w, b, EPS)
    gx, gw, gb = torch.autograd.grad(out, [x, w, b], dy64.to(dt).to(dev))
    return out, gx, gw, gb


def _ln_truth(x64, w64, b64, dy64):
    xr, wr, br = (t.clone().requires_grad_(True) for t in (x64, w64, b64))
    y = F.layer_norm(xr, [LN_N], wr, br, EPS)
    gx, gw, gb = torch.autograd.grad(y, [xr, wr, br], dy64)
    return y.detach(), gx, gw, gb


def _ln_bounds(x64, w64, b64, dy64, dt):
    return [b + _tiny(dt) for b in test_fuzz._layer_norm_bounds(x64, w64, b64, dy64, EPS, 1, dt)]


def _ln_check(results, x64, w64, b64, dy64, dt):
    truth = _ln_truth(x64, w64, b64, dy64)
    bounds = _ln_bounds(x64, w64, b64, dy64, dt)
    for name, got, e, bnd in zip(("output", "grad_input", "grad_weight", "grad_bias"), results, truth, bounds):
        assert_within(f"layer_norm {name}", got, e, bnd, "control")


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["fused_linear_relu", "conv2d", "layer_norm"])
def test_tightened_bound_accepts_kernels(backend, op, dtype, safety):
    """The real kernels meet the bounds with BOUND_SAFETY -> TIGHT (1): on signed values with
    cancellation and on positive ones, over reductions of 8192 terms."""
    _skip_unsupported(backend, dtype)
    safety(TIGHT)
    dev, dt = backend.device, dtype
    gen = torch.Generator().manual_seed(1)
    if op == "fused_linear_relu":
        for signed in (True, False):
            mk = (
                (lambda s: torch.randn(s, generator=gen, dtype=torch.float64).to(dt).double())
                if signed
                else (lambda s: _positive(s, gen, dt))
            )
            x, w, b = mk((3, K_LONG)), mk((5, K_LONG)), mk((5,))
            out = xkernels.fused_linear_relu(x.to(dt).to(dev), w.to(dt).to(dev), b.to(dt).to(dev))
            _linear_check(out, x, w, b, dt)
    elif op == "conv2d":
        x, w, b = _conv_values(gen, dt)
        out = xkernels.conv2d(x.to(dt).to(dev), w.to(dt).to(dev), b.to(dt).to(dev))
        _conv_check(out, x, w, b, dt)
        xs = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dt).double()
        out = xkernels.conv2d(xs.to(dt).to(dev), w.to(dt).to(dev), b.to(dt).to(dev))
        _conv_check(out, xs, w, b, dt)
    else:
        x, w, b, dy = _ln_values(gen, dt)
        _ln_check(_ln_run(x, w, b, dy, dt, dev), x, w, b, dy, dt)


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["fused_linear_relu", "conv2d", "layer_norm"])
def test_checker_rejects(backend, op, dtype, control):
    """A wrong result just beyond the bound is rejected by the fuzz tests' checker (and the right one,
    from the same kernel, is accepted)."""
    _skip_unsupported(backend, dtype)
    dev, dt = backend.device, dtype
    gen = torch.Generator().manual_seed(2)
    if op == "fused_linear_relu":
        x, w, b = _positive((3, K_LONG), gen, dt), _positive((5, K_LONG), gen, dt), _positive((5,), gen, dt)
        c = float(_linear_classical(x, w, b, dt).max())
        if control == "dropped-term":
            x[:, 0], w[:, 0] = float(torch.tensor(RESOLUTION * c).to(dt)), 1.0
        if control == "bias-twice":
            b = torch.full_like(b, float(torch.tensor(RESOLUTION * c).to(dt)))
        y64 = torch.relu(F.linear(x, w, b))
        right = xkernels.fused_linear_relu(x.to(dt).to(dev), w.to(dt).to(dev), b.to(dt).to(dev))
        _linear_check(right, x, w, b, dt)
        if control == "dropped-term":
            xd = x.clone()
            xd[:, 0] = 0
            wrong = xkernels.fused_linear_relu(xd.to(dt).to(dev), w.to(dt).to(dev), b.to(dt).to(dev))
        elif control == "bias-twice":
            wrong = xkernels.fused_linear_relu(x.to(dt).to(dev), w.to(dt).to(dev), (2 * b).to(dt).to(dev))
        elif control == "ulps":
            wrong = _perturb_one(right, y64, RESOLUTION * _linear_classical(x, w, b, dt))
        else:
            wrong = _just_beyond(right, y64, _linear_bound(x, w, b, dt))
        with pytest.raises(AssertionError, match="outside the error bound"):
            _linear_check(wrong, x, w, b, dt)
    elif op == "conv2d":
        x, w, b = _conv_values(gen, dt)
        c = float(_conv_classical(x, w, b, dt).max())
        if control == "dropped-term":  # input channel 0 constant, its tap (0, 0) weight 1: a term of size s
            x[:, 0], w[:, 0], w[:, 0, 0, 0] = float(torch.tensor(RESOLUTION * c).to(dt)), 0.0, 1.0
        if control == "bias-twice":
            b = torch.full_like(b, float(torch.tensor(RESOLUTION * c).to(dt)))
        y64 = F.conv2d(x, w, b)
        right = xkernels.conv2d(x.to(dt).to(dev), w.to(dt).to(dev), b.to(dt).to(dev))
        _conv_check(right, x, w, b, dt)
        if control == "dropped-term":
            wd = w.clone()
            wd[:, 0, 0, 0] = 0
            wrong = xkernels.conv2d(x.to(dt).to(dev), wd.to(dt).to(dev), b.to(dt).to(dev))
        elif control == "bias-twice":
            wrong = xkernels.conv2d(x.to(dt).to(dev), w.to(dt).to(dev), (2 * b).to(dt).to(dev))
        elif control == "ulps":
            wrong = _perturb_one(right, y64, RESOLUTION * _conv_classical(x, w, b, dt))
        else:
            y = F.conv2d(x, w, b)
            bound = _conv_bound(y, F.conv2d(x.abs(), w.abs(), b.abs()), CONV_C * CONV_K * CONV_K, dt)
            wrong = _just_beyond(right, y64, bound)
        with pytest.raises(AssertionError, match="outside the error bound"):
            _conv_check(wrong, x, w, b, dt)
    else:
        x, w, b, dy = _ln_values(gen, dt)
        classical = [bd for bd in _classical_ln(x, w, b, dy, dt)]
        if control == "bias-twice":
            b = torch.full_like(b, float(torch.tensor(RESOLUTION * float(classical[0].max())).to(dt)))
        if control == "dropped-term":  # grad_bias = sum over the rows of dy: the last row's term sized
            dy[-1] = float(torch.tensor(RESOLUTION * float(classical[3].max())).to(dt))
        right = _ln_run(x, w, b, dy, dt, dev)
        _ln_check(right, x, w, b, dy, dt)
        truth = _ln_truth(x, w, b, dy)
        wrong = list(right)
        if control == "bias-twice":
            wrong[0] = _ln_run(x, w, 2 * b, dy, dt, dev)[0]
        elif control == "dropped-term":
            dyd = dy.clone()
            dyd[-1] = 0
            wrong[3] = _ln_run(x, w, b, dyd, dt, dev)[3]
        elif control == "ulps":
            wrong[0] = _perturb_one(right[0], truth[0], RESOLUTION * _classical_ln(x, w, b, dy, dt)[0])
        else:
            wrong[0] = _just_beyond(right[0], truth[0], _ln_bounds(x, w, b, dy, dt)[0])
        with pytest.raises(AssertionError, match="outside the error bound"):
            _ln_check(wrong, x, w, b, dy, dt)


def _classical_ln(x, w, b, dy, dt):
    saved = test_fuzz.SAFETY
    test_fuzz.SAFETY = TIGHT
    try:
        return _ln_bounds(x, w, b, dy, dt)
    finally:
        test_fuzz.SAFETY = saved


# ------------------------------------------------------------------------------------------ policy 1 / 2


LOWER = {torch.float64: torch.float32, torch.float32: torch.float16}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_assert_close_rejects(dtype):
    """assert_close (policy 1) accepts the exact result rounded to `dtype` and rejects one that went
    through the next lower precision (float64, float32) or has one element 4 ulps off (half types)."""
    gen = torch.Generator().manual_seed(3)
    e = torch.randn(64, 33, generator=gen, dtype=torch.float64)
    assert_close(e.to(dtype), e, dtype, "exact result rounded once")
    if dtype in LOWER:
        wrong = e.to(LOWER[dtype]).to(dtype)
    else:
        wrong = _perturb_one(e.to(dtype), e, 4 * _ulp(e, dtype))
    with pytest.raises(AssertionError):
        assert_close(wrong, e, dtype, "control")


def test_between_backends_float64_rejects():
    """Two float64 backends agree to FLOAT64_SAME_FORMULA (summation order only): a relative
    difference of 1e-10 (e.g. one term lost in a float32 step) is rejected."""
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(64, 33, generator=gen, dtype=torch.float64)
    rtol, atol = between_backends(torch.float64)
    torch.testing.assert_close(a * (1 + 1e-14), a, rtol=rtol, atol=atol)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(a * (1 + 1e-10) + 1e-10, a, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_within_budget_rejects(dtype):
    """Policy 2: an error 10x PyTorch's own (and above the floor) is rejected, 1x is accepted."""
    gen = torch.Generator().manual_seed(5)
    r = torch.randn(256, generator=gen, dtype=torch.float64)
    scale = max(1.0, float(r.abs().max()))
    torch_err = 10 * ELEMENTWISE[dtype][0] * scale  # PyTorch's own error, 10x the budget's floor
    torch_same = r + torch_err
    ok, err, allowed = within_budget(r + torch_err, torch_same, r, dtype)
    assert ok, f"an error equal to PyTorch's failed: err {err}, allowed {allowed}"
    bad, err, allowed = within_budget(r + 10 * torch_err, torch_same, r, dtype)
    assert not bad, f"an error 10x PyTorch's passed: err {err}, allowed {allowed}"
