"""The hostile inputs of tests/test_hostile.py (NaN, +-Inf, denormals, huge magnitudes, all-equal rows,
eps 0 or negative), their checkers and bounds, shared with tests/test_cuda_sim_hostile.py, which runs the same
cases through the native CUDA kernels executed by the CPU simulator.

Each case takes (device, dtype) and raises AssertionError on a wrong answer. The cases call the ops of
``ops()``: the ``xkernels`` module (its selected backend) unless ``use_ops(namespace)`` substitutes another
object with the same three functions (fused_linear_relu, conv2d, layer_norm) and the same semantics.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import BOUND_SAFETY, huge_mean_layer_norm_allowed, u_acc, u_out

from _reliability import assert_within

_OPS: list = [xkernels]


def ops():
    """The object whose fused_linear_relu / conv2d / layer_norm the cases call."""
    return _OPS[-1]


@contextlib.contextmanager
def use_ops(namespace):
    """Runs the cases against `namespace`'s ops instead of xkernels'."""
    _OPS.append(namespace)
    try:
        yield namespace
    finally:
        _OPS.pop()


NAN, INF = float("nan"), float("inf")


class ClearError(Exception):
    """The op refused the input with an xkernels error message (acceptable for hostile input)."""


def call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, ValueError) as e:
        if str(e).lstrip().startswith("xkernels.") or "xkernels." in str(e).split("\n")[0]:
            raise ClearError(str(e).split("\n")[0]) from e
        raise AssertionError(f"unclear error for hostile input: {type(e).__name__}: {e}") from e


def check_like_torch(name, ours, torch_same, exact64, bound):
    """NaN and Inf exactly where PyTorch (same dtype) has them; finite values within `bound` of
    the float64 result."""
    o = ours.detach().cpu().to(torch.float64)
    t = torch_same.detach().cpu().to(torch.float64)
    assert o.shape == t.shape, f"{name}: shape {tuple(o.shape)} vs PyTorch {tuple(t.shape)}"
    assert torch.equal(o.isnan(), t.isnan()), (
        f"{name}: NaN at {o.isnan().nonzero().tolist()[:8]}, PyTorch at {t.isnan().nonzero().tolist()[:8]}"
    )
    inf_t = t.isinf()
    assert torch.equal(o.isinf(), inf_t) and torch.equal(o[inf_t], t[inf_t]), (
        f"{name}: Inf at {o.isinf().nonzero().tolist()[:8]} ({o[o.isinf()].tolist()[:8]}), PyTorch at "
        f"{inf_t.nonzero().tolist()[:8]} ({t[inf_t].tolist()[:8]})"
    )
    fin = torch.isfinite(t)
    e = exact64.detach().cpu().to(torch.float64)
    assert bool(torch.isfinite(e[fin]).all()), f"{name}: test bug, float64 result not finite where PyTorch's is"
    assert_within(
        name,
        ours.detach().cpu()[fin].to(ours.dtype),
        e[fin],
        bound.detach().cpu().to(torch.float64).expand(e.shape)[fin],
        "",
    )


def check_honest(name, ours, exact64, bound, magnitude, dt):
    """For overflowing inputs, where PyTorch's own NaN/Inf pattern depends on its BLAS path and
    summation order: never a wrong finite number. Where no intermediate can overflow (the sum of
    the magnitudes of all terms, `magnitude`, stays far below the accumulation type's largest value)
    the result must be right; elsewhere it may be NaN or +-Inf, or a finite value within the bound."""
    o = ours.detach().cpu().to(torch.float64)
    e = exact64.detach().cpu().to(torch.float64)
    assert o.shape == e.shape, f"{name}: shape {tuple(o.shape)} vs {tuple(e.shape)}"
    acc_max = torch.finfo(torch.float64 if dt == torch.float64 else torch.float32).max
    safe = (magnitude.detach().cpu().double() < acc_max / 4) & ((e.abs() + bound) < torch.finfo(dt).max) & ~e.isnan()
    assert_within(f"{name} (no overflow possible)", ours.detach().cpu()[safe], e[safe], bound.expand(e.shape)[safe])
    fin = torch.isfinite(o) & ~safe
    assert_within(f"{name} (finite despite overflow)", ours.detach().cpu()[fin], e[fin], bound.expand(e.shape)[fin])


def _tiny(dt):
    return torch.finfo(dt).tiny * torch.finfo(dt).eps  # smallest subnormal


# ============================================================================ case bodies
# Each takes (device, dtype) and raises AssertionError on a wrong answer.


def _linear_case(dev, dt, x64, w64, b64, dy64=None, honest=False):
    """Forward and backward of fused_linear_relu vs torch.relu(F.linear) (same dtype and float64)."""
    K = x64.shape[-1]
    x = x64.to(dt).to(dev).requires_grad_(True)
    w = w64.to(dt).to(dev).requires_grad_(True)
    b = b64.to(dt).to(dev).requires_grad_(True) if b64 is not None else None
    out = call(ops().fused_linear_relu, x, w, b)
    xs, ws = x64.to(dt).requires_grad_(True), w64.to(dt).requires_grad_(True)
    bs = b64.to(dt).requires_grad_(True) if b64 is not None else None
    ts = (
        torch.relu(F.linear(xs.float(), ws.float(), bs.float() if bs is not None else None)).to(dt)
        if dt in (torch.float16, torch.bfloat16)
        else torch.relu(F.linear(xs, ws, bs))
    )
    xd, wd = x64.to(dt).double().requires_grad_(True), w64.to(dt).double().requires_grad_(True)
    bd = b64.to(dt).double().requires_grad_(True) if b64 is not None else None
    e = torch.relu(F.linear(xd, wd, bd))
    babs = bd.detach().abs() if bd is not None else None
    absb = F.linear(xd.detach().abs(), wd.detach().abs(), babs)
    bound = 2 * u_out(dt) * e.detach().abs() + BOUND_SAFETY * (K + 2) * u_acc(dt) * absb + _tiny(dt)
    if honest:
        check_honest("fused_linear_relu output", out, e, bound, absb, dt)
    else:
        check_like_torch("fused_linear_relu output", out, ts, e, bound)
    if dy64 is None:
        return
    dy = dy64.to(dt)
    grads = torch.autograd.grad(out, [x, w] + ([b] if b is not None else []), dy.to(dev))
    # PyTorch's same-dtype grads (relu backward = threshold_backward on the output)
    tgr = torch.autograd.grad(ts, [xs, ws] + ([bs] if bs is not None else []), dy)
    # float64 grads from OUR output's ReLU mask (the op's contract; where our forward overflowed
    # to Inf/NaN but float64 did not, the masks differ): grad passes where NOT (out <= 0)
    passes = ~(out.detach().cpu().double() <= 0)
    g = torch.where(passes, dy.double(), torch.zeros((), dtype=torch.float64)).reshape(-1, w64.shape[0])
    x2 = xd.detach().reshape(-1, K)
    egr = [(g @ wd.detach()).reshape(x64.shape), g.T @ x2, g.sum(0)][: 2 + (b is not None)]
    n = {0: w64.shape[0], 1: g.numel() // max(w64.shape[0], 1), 2: g.numel() // max(w64.shape[0], 1)}
    g2 = g.abs().nan_to_num(0)
    abs_terms = [g2 @ wd.detach().abs().nan_to_num(0), g2.T @ xd.detach().reshape(-1, K).abs().nan_to_num(0), g2.sum(0)]
    for i, (got, tg, eg) in enumerate(zip(grads, tgr, egr)):
        bnd = (
            2 * u_out(dt) * eg.abs()
            + BOUND_SAFETY * (n[i] + 2) * u_acc(dt) * abs_terms[i].reshape(eg.shape)
            + _tiny(dt)
        )
        if honest:
            check_honest(f"fused_linear_relu grad[{i}]", got, eg, bnd, abs_terms[i].reshape(eg.shape), dt)
        else:
            check_like_torch(f"fused_linear_relu grad[{i}]", got, tg, eg, bnd)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def linear_nan_input(dev, dt):
    x, w, b = _randn(4, 9), _randn(5, 9, seed=1), _randn(5, seed=2)
    x[1, 3] = NAN
    x[3, :] = NAN
    _linear_case(dev, dt, x, w, b, _randn(4, 5, seed=3))


def linear_inf_input(dev, dt):
    x, w, b = _randn(4, 9), _randn(5, 9, seed=1), _randn(5, seed=2)
    x[0, 0], x[2, 4] = INF, -INF
    w[3, 4] = 0.0  # -inf * 0 = NaN in row 2, column 3
    x[1, 5], x[1, 6] = INF, INF  # +inf and (w sign dependent) -inf terms
    _linear_case(dev, dt, x, w, b, _randn(4, 5, seed=3))


def linear_nan_inf_params(dev, dt):
    x, w, b = _randn(3, 7), _randn(6, 7, seed=1), _randn(6, seed=2)
    w[1, 2] = NAN
    b[3], b[4], b[5] = NAN, INF, -INF
    _linear_case(dev, dt, x, w, b, _randn(3, 6, seed=3))


def linear_nan_grad(dev, dt):
    x, w, b = _randn(4, 6), _randn(5, 6, seed=1), _randn(5, seed=2)
    dy = _randn(4, 5, seed=3)
    dy[0, 0], dy[2, :] = NAN, NAN
    _linear_case(dev, dt, x, w, b, dy)


def linear_denormal(dev, dt):
    sub = _tiny(dt)
    x = torch.randint(1, 4, (3, 8), generator=torch.Generator().manual_seed(0)).double() * sub
    w = torch.randint(-2, 3, (4, 8), generator=torch.Generator().manual_seed(1)).double()
    b = torch.zeros(4, dtype=torch.float64)
    # products and sums of small integer multiples of the smallest subnormal are exact: a kernel
    # that flushes denormals to zero gives 0 here
    _linear_case(dev, dt, x, w, b, _randn(3, 4, seed=3))


def linear_huge(dev, dt):
    big = 1e20 if dt in (torch.float32, torch.bfloat16) else (1e200 if dt == torch.float64 else 3e2)
    x, w = _randn(3, 5) * big, _randn(4, 5, seed=1) * big  # products overflow: +-Inf and NaN (inf - inf)
    x[2] = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0]) * big
    w[0] = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0])  # row 2 x col 0: big - big = 0 exactly
    _linear_case(dev, dt, x, w, None, _randn(3, 4, seed=3), honest=True)


def _conv_case(dev, dt, x64, w64, b64, dy64=None, channels_last=False, honest=False, **args):
    x = x64.to(dt).to(dev)
    w = w64.to(dt).to(dev)
    if channels_last:
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    w.requires_grad_(True)
    b = b64.to(dt).to(dev).requires_grad_(True) if b64 is not None else None
    out = call(ops().conv2d, x, w, b, **args)
    cdt = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    xs, ws = x64.to(dt).to(cdt).requires_grad_(True), w64.to(dt).to(cdt).requires_grad_(True)
    bs = b64.to(dt).to(cdt).requires_grad_(True) if b64 is not None else None
    ts = F.conv2d(xs, ws, bs, **args)
    xd, wd = x64.to(dt).double().requires_grad_(True), w64.to(dt).double().requires_grad_(True)
    bd = b64.to(dt).double().requires_grad_(True) if b64 is not None else None
    e = F.conv2d(xd, wd, bd, **args)
    absb = F.conv2d(xd.detach().abs(), wd.detach().abs(), bd.detach().abs() if bd is not None else None, **args)
    n_red = w64.shape[1] * w64.shape[2] * w64.shape[3]
    bound = 2 * u_out(dt) * e.detach().abs() + BOUND_SAFETY * (n_red + 2) * u_acc(dt) * absb + _tiny(dt)
    if honest:
        check_honest("conv2d output", out, e, bound, absb, dt)
    else:
        check_like_torch("conv2d output", out, ts.to(dt), e, bound)
    if dy64 is None:
        return
    dy = dy64.to(dt)
    grads = torch.autograd.grad(out, [x, w] + ([b] if b is not None else []), dy.to(dev))
    tgr = torch.autograd.grad(ts, [xs, ws] + ([bs] if bs is not None else []), dy.to(cdt))
    egr = torch.autograd.grad(e, [xd, wd] + ([bd] if bd is not None else []), dy.double())
    xa = xd.detach().abs().nan_to_num(0).requires_grad_(True)
    wa = wd.detach().abs().nan_to_num(0).requires_grad_(True)
    ba = bd.detach().abs().requires_grad_(True) if bd is not None else None
    ya = F.conv2d(xa, wa, ba, **args)
    agr = torch.autograd.grad(ya, [xa, wa] + ([ba] if ba is not None else []), dy.double().abs().nan_to_num(0))
    n = max(n_red, e.numel())
    for i, (got, tg, eg, ag) in enumerate(zip(grads, tgr, egr, agr)):
        bnd = 2 * u_out(dt) * eg.abs() + BOUND_SAFETY * (n + 2) * u_acc(dt) * ag + _tiny(dt)
        if honest:
            check_honest(f"conv2d grad[{i}]", got, eg, bnd, ag, dt)
        else:
            check_like_torch(f"conv2d grad[{i}]", got, tg.to(dt), eg, bnd)


def conv_nan_input(dev, dt):
    x, w, b = _randn(2, 3, 7, 6), _randn(4, 3, 3, 3, seed=1), _randn(4, seed=2)
    x[0, 1, 3, 2] = NAN  # poisons only the outputs whose window covers it
    for cl in (False, True):
        _conv_case(dev, dt, x, w, b, _randn(2, 4, 7, 6, seed=3), channels_last=cl, padding=1)


def conv_inf_input(dev, dt):
    x, w, b = _randn(1, 2, 6, 6), _randn(3, 2, 2, 2, seed=1), _randn(3, seed=2)
    x[0, 0, 2, 2], x[0, 1, 4, 1] = INF, -INF
    w[1, 0, 1, 0] = 0.0  # inf * 0 = NaN for that filter
    _conv_case(dev, dt, x, w, b, _randn(1, 3, 3, 3, seed=3), stride=2)


def conv_nan_params_and_grad(dev, dt):
    x, w, b = _randn(2, 4, 5, 5), _randn(4, 2, 3, 3, seed=1), _randn(4, seed=2)
    w[1, 0, 0, 0] = NAN
    b[2] = INF
    dy = _randn(2, 4, 5, 5, seed=3)
    dy[1, 3, 2, 2] = NAN
    _conv_case(dev, dt, x, w, b, dy, padding=1, groups=2)


def conv_denormal(dev, dt):
    sub = _tiny(dt)
    x = torch.randint(1, 4, (1, 2, 5, 5), generator=torch.Generator().manual_seed(0)).double() * sub
    w = torch.randint(-2, 3, (2, 2, 2, 2), generator=torch.Generator().manual_seed(1)).double()
    _conv_case(dev, dt, x, w, None, None)


def conv_huge(dev, dt):
    big = 1e20 if dt in (torch.float32, torch.bfloat16) else (1e200 if dt == torch.float64 else 3e2)
    _conv_case(
        dev,
        dt,
        _randn(1, 2, 4, 4) * big,
        _randn(2, 2, 2, 2, seed=1) * big,
        None,
        _randn(1, 2, 3, 3, seed=3),
        honest=True,
    )


def _layer_norm_case(dev, dt, x64, norm, w64=None, b64=None, eps=1e-5, dy64=None, honest=False):
    x = x64.to(dt).to(dev).requires_grad_(True)
    w = w64.to(dt).to(dev).requires_grad_(True) if w64 is not None else None
    b = b64.to(dt).to(dev).requires_grad_(True) if b64 is not None else None
    out = call(ops().layer_norm, x, norm, w, b, eps)
    xs = x64.to(dt).requires_grad_(True)
    ws = w64.to(dt).requires_grad_(True) if w64 is not None else None
    bs = b64.to(dt).requires_grad_(True) if b64 is not None else None
    ts = F.layer_norm(xs, norm, ws, bs, eps)
    xd = x64.to(dt).double().requires_grad_(True)
    wd = w64.to(dt).double().requires_grad_(True) if w64 is not None else None
    bd = b64.to(dt).double().requires_grad_(True) if b64 is not None else None
    e = F.layer_norm(xd, norm, wd, bd, eps)
    from test_fuzz import _layer_norm_bounds

    xb = xd.detach().nan_to_num(0, 0, 0)
    fwd, gin, gw, gb = _layer_norm_bounds(
        xb,
        wd.detach() if wd is not None else None,
        bd.detach() if bd is not None else None,
        dy64.to(dt).double().nan_to_num(0) if dy64 is not None else None,
        max(eps, 0.0) or 1e-300,
        len(norm),
        dt,
    )
    if honest:  # the variance may overflow: NaN, or the right values
        o = out.detach().cpu()
        fin = torch.isfinite(o)
        assert_within("layer_norm output (finite despite overflow)", o[fin], e.detach()[fin], fwd[fin])
        return
    check_like_torch("layer_norm output", out, ts, e, fwd.nan_to_num(INF) + _tiny(dt))
    if dy64 is None:
        return
    dy = dy64.to(dt)
    params = [p for p in (x, w, b) if p is not None]
    grads = torch.autograd.grad(out, params, dy.to(dev))
    tgr = torch.autograd.grad(ts, [p for p in (xs, ws, bs) if p is not None], dy)
    egr = torch.autograd.grad(e, [p for p in (xd, wd, bd) if p is not None], dy.double())
    bounds = [gin] + ([gw] if w is not None else []) + ([gb] if b is not None else [])
    for i, (got, tg, eg, bnd) in enumerate(zip(grads, tgr, egr, bounds)):
        check_like_torch(f"layer_norm grad[{i}]", got, tg, eg, bnd.nan_to_num(INF) + _tiny(dt))


def layer_norm_nan_inf_rows(dev, dt):
    x = _randn(5, 16)
    x[1, 3] = NAN
    x[2, 0] = INF
    x[3, 5], x[3, 6] = INF, -INF
    dy = _randn(5, 16, seed=3)
    dy[4, 2] = NAN
    _layer_norm_case(dev, dt, x, [16], _randn(16, seed=1), _randn(16, seed=2), dy64=dy)


def layer_norm_all_equal_rows(dev, dt):
    """Equal values normalize to exactly the bias (the mean is the value), for values whose row sum
    does not overflow -- whatever sum/N rounds to."""
    for v in (0.1, 3.3, -7.0, 12345.678, 1e-3, 1e15 if dt != torch.float16 else 6e4, 0.0):
        for N in (1, 3, 7, 11, 100, 1001):
            x = torch.full((3, N), v, dtype=torch.float64).to(dt)
            b = _randn(N, seed=N).to(dt)
            w = _randn(N, seed=N + 1).to(dt)
            out = call(ops().layer_norm, x.to(dev), [N], w.to(dev), b.to(dev), 1e-5)
            assert torch.equal(out.cpu(), b.expand(3, N)), (
                f"layer_norm of rows all equal to {v} (N={N}, {dt}) must be exactly the bias; max deviation "
                f"{float((out.cpu().double() - b.double()).abs().max())}"
            )
    # and the backward at a constant row: xhat = 0, so grad_input = rstd * (g - mean(g))
    x = torch.full((2, 9), 0.1, dtype=torch.float64)
    _layer_norm_case(dev, dt, x, [9], _randn(9, seed=1), _randn(9, seed=2), dy64=_randn(2, 9, seed=3))


def layer_norm_eps_zero_and_negative(dev, dt):
    x = torch.full((2, 8), 3.0, dtype=torch.float64)
    _layer_norm_case(dev, dt, x, [8], eps=0.0, dy64=_randn(2, 8, seed=3))  # var 0, eps 0: NaN (0 * inf)
    _layer_norm_case(dev, dt, x, [8], eps=-1.0)  # sqrt(-1): NaN
    y = _randn(3, 8)
    _layer_norm_case(dev, dt, y, [8], eps=0.0, dy64=_randn(3, 8, seed=3))  # ordinary rows: finite
    _layer_norm_case(dev, dt, y, [8], eps=-1e-6, dy64=_randn(3, 8, seed=3))


def layer_norm_huge_mean_tiny_variance(dev, dt):
    """Rows with mean ~1e15 and variance ~1 (float64) / mean 1e15 and spread 1e9 (float32):
    the result must be as accurate as PyTorch's (xkernels.tolerances.huge_mean_layer_norm_allowed)."""
    if dt not in (torch.float64, torch.float32):
        return
    spread = 1.0 if dt == torch.float64 else 1e9
    x = (1e15 + spread * _randn(4, 64)).to(dt)
    shift = x[:, :1].double()
    exact = F.layer_norm(x.double() - shift, [64])  # exact: the shift is exact, the rest well conditioned
    ours = call(ops().layer_norm, x.to(dev), [64], None, None, 1e-5).cpu().double()
    theirs = F.layer_norm(x, [64]).double()
    err_ours, err_torch = float((ours - exact).abs().max()), float((theirs - exact).abs().max())
    assert math.isfinite(err_ours) and err_ours <= huge_mean_layer_norm_allowed(dt, err_torch), (
        f"layer_norm at mean 1e15: max error {err_ours:.3g}, PyTorch's {err_torch:.3g}"
    )


def layer_norm_denormal_and_huge(dev, dt):
    sub = _tiny(dt)
    x = torch.randint(-3, 4, (3, 10), generator=torch.Generator().manual_seed(0)).double() * sub
    _layer_norm_case(dev, dt, x, [10], dy64=_randn(3, 10, seed=3))
    big = 1e20 if dt in (torch.float32, torch.bfloat16) else (1e200 if dt == torch.float64 else 1e3)
    _layer_norm_case(dev, dt, _randn(3, 10) * big, [10], honest=True)  # the variance overflows


CASES = {
    f.__name__: f
    for f in [
        linear_nan_input,
        linear_inf_input,
        linear_nan_inf_params,
        linear_nan_grad,
        linear_denormal,
        linear_huge,
        conv_nan_input,
        conv_inf_input,
        conv_nan_params_and_grad,
        conv_denormal,
        conv_huge,
        layer_norm_nan_inf_rows,
        layer_norm_all_equal_rows,
        layer_norm_eps_zero_and_negative,
        layer_norm_huge_mean_tiny_variance,
        layer_norm_denormal_and_huge,
    ]
}
