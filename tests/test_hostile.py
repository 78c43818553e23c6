"""Hostile inputs: NaN, +-Inf, denormals, huge magnitudes, all-equal rows, eps 0 or negative, and
sizes above 2^31 elements. Every op (forward and backward) on every available backend must give
PyTorch's result -- the same NaN and Inf positions (and Inf signs) as PyTorch in the same dtype,
finite values within the float64 error bound -- or raise a clear xkernels error. Never a crash:
the cases run in child processes, so a crash (signal, abort) fails the case it happened in and
the remaining cases continue in a fresh child.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import BOUND_SAFETY, DTYPES, huge_mean_layer_norm_allowed, u_acc, u_out

import _backends
from _reliability import assert_within, child_env, describe_result, mem_available_bytes, run_python, supports

pytestmark = pytest.mark.explicit_device  # cases run in child processes, on the backend's device

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
    out = call(xkernels.fused_linear_relu, x, w, b)
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
    out = call(xkernels.conv2d, x, w, b, **args)
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
    out = call(xkernels.layer_norm, x, norm, w, b, eps)
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
            out = call(xkernels.layer_norm, x.to(dev), [N], w.to(dev), b.to(dev), 1e-5)
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
    ours = call(xkernels.layer_norm, x.to(dev), [64], None, None, 1e-5).cpu().double()
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


# ============================================================================ child process runner


def child_main(backend: str, names: list[str]) -> None:
    """Runs the named cases for every dtype in this process, one JSON line per result."""
    dev = _backends.device_of(backend)
    with xkernels.use_backend(backend):
        for name in names:
            for dt in DTYPES:
                key = f"{name}/{str(dt).removeprefix('torch.')}"
                print(json.dumps({"start": key}), flush=True)
                if not supports(backend, dt):
                    res = {"case": key, "status": "unsupported"}
                else:
                    try:
                        CASES[name](dev, dt)
                        res = {"case": key, "status": "ok"}
                    except ClearError as e:
                        res = {"case": key, "status": "clear_error", "msg": str(e)}
                    except BaseException as e:  # noqa: BLE001 - report everything to the parent
                        res = {"case": key, "status": "fail", "msg": f"{type(e).__name__}: {e}"}
                print(json.dumps(res), flush=True)


_results: dict[str, dict] = {}


def results_for(backend: str) -> dict:
    """All cases x dtypes for `backend`, run in children; a crashed child is recorded against the
    case that was running and the rest continue in a new child."""
    if backend in _results:
        return _results[backend]
    out: dict[str, dict] = {}
    todo = list(CASES)
    while todo:
        r = run_python(
            f"import test_hostile as h; h.child_main({str(backend)!r}, {todo!r})", timeout=900, env=child_env()
        )
        running = None
        for line in r.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                running = msg["start"]
            else:
                out[msg["case"]] = msg
                running = None
        crashed = None
        if running is not None or r.returncode != 0:
            crashed = running or "?"
            out[crashed] = {"case": crashed, "status": "crash", "msg": describe_result(r)}
        if crashed is None or crashed == "?":
            break  # finished, or the child died before any case started (recorded as '?'): no progress possible
        # go on after the case that crashed (its other dtypes are skipped: one crash report is enough)
        done = {k.split("/")[0] for k in out}
        todo = [n for n in todo if n not in done]
    _results[backend] = out
    return out


# Every (case, dtype) must give PyTorch's result ("ok") on every backend, except the ones listed here, which
# must raise exactly this xkernels error (its first line). A dtype the backend's device cannot compute in
# (_reliability.supports) must be refused as "unsupported" there.
REFUSED: dict[tuple[str, str], str] = {}


def expected_outcome(backend: str, case: str, dt: torch.dtype) -> tuple[str, str | None]:
    """(status, message) the child must report for `case` in `dt` on `backend`."""
    if not supports(backend, dt):
        return "unsupported", None
    key = (case, str(dt).removeprefix("torch."))
    if key in REFUSED:
        return "clear_error", REFUSED[key]
    return "ok", None


@pytest.mark.parametrize("case", list(CASES))
def test_hostile(backend, case):
    res = results_for(backend.name)
    problems = [f"a child died before any case started: {res['?']['msg']}"] if "?" in res else []
    for dt in DTYPES:
        key = f"{case}/{str(dt).removeprefix('torch.')}"
        got = res.get(key)
        if got is None:
            problems.append(f"{key}: no result (the child died before it ran)")
            continue
        status, msg = expected_outcome(backend.name, case, dt)
        if got["status"] != status or (msg is not None and got.get("msg") != msg):
            want = status if msg is None else f"{status}: {msg}"
            problems.append(f"{key}: expected {want}; got {got['status']}: {got.get('msg', '')}")
    assert not problems, "\n".join(problems)


# ============================================================================ > 2^31 elements


BIG_CHILD = r"""
import sys, torch, xkernels
backend, dev, op = sys.argv[1], torch.device(sys.argv[2]), sys.argv[3]
dt = torch.bfloat16
with xkernels.use_backend(backend):
    if op == "fused_linear_relu":
        # output [M, N] with M*N > 2^31; K = 1, small integers: every product is exact in bfloat16
        M, N = 65537, 32769
        x = ((torch.arange(M) % 7) - 3).to(dt).view(M, 1).to(dev)
        w = ((torch.arange(N) % 5) - 2).to(dt).view(N, 1).to(dev)
        y = xkernels.fused_linear_relu(x, w, None)
        assert y.shape == (M, N)
        # rows at the start, around the 2^31st element, and at the end
        r0 = (2**31) // N
        for r in (0, 1, r0 - 1, r0, r0 + 1, M - 2, M - 1):
            ref = torch.relu(x[r].cpu().float() * w.cpu().float().view(-1)).to(dt)
            assert torch.equal(y[r].cpu(), ref), f"row {r} wrong"
    elif op == "layer_norm":
        # one tensor of M*N > 2^31 elements; rows of small integers
        M, N = 2**20 + 3, 2049
        x = ((torch.arange(N) % 9) - 4).to(dt).view(1, N).expand(M, N).contiguous().to(dev)
        x[M - 1, 0] = 7
        y = xkernels.layer_norm(x, [N])
        # both sides rounded to bfloat16, |y| < 2: at most 1 ulp (2^-7) apart; the between-backends atol is 2
        from xkernels.tolerances import between_backends
        atol = between_backends(dt)[1]
        for r in (0, (2**31) // N, M - 2, M - 1):
            ref = torch.nn.functional.layer_norm(x[r].cpu().double(), [N]).to(dt)
            assert (y[r].cpu().double() - ref.double()).abs().max() <= atol, f"row {r} wrong"
    elif op == "conv2d":
        # input and output [1, 1, H, W] with H*W > 2^31; a 1x1 kernel of weight 2
        H, W = 65537, 32769
        x = ((torch.arange(W) % 5) - 2).to(dt).view(1, 1, 1, W).expand(1, 1, H, W).contiguous().to(dev)
        x[0, 0, H - 1, W - 1] = 3
        w = torch.full((1, 1, 1, 1), 2.0, dtype=dt, device=dev)
        y = xkernels.conv2d(x, w)
        for r in (0, (2**31) // W, H - 1):
            assert torch.equal(y[0, 0, r].cpu(), (2 * x[0, 0, r].cpu().float()).to(dt)), f"row {r} wrong"
print("OK")
"""

# Bytes of the big tensors each case holds at once (bfloat16): the output, plus the input for layer_norm
# and conv2d. Measured peak RSS of the child (/usr/bin/time): 8.8 GB for layer_norm and conv2d on both CPU
# backends, 12-27 s each on 2 cores.
BIG_NEED = {
    "fused_linear_relu": 2 * 65537 * 32769,
    "layer_norm": 2 * 2 * (2**20 + 3) * 2049,
    "conv2d": 2 * 2 * 65537 * 32769,
}
BIG_HEADROOM = 2**31  # torch, the SYCL runtime, the small reference rows


@pytest.mark.parametrize("op", ["fused_linear_relu", "layer_norm", "conv2d"])
def test_more_than_2_31_elements(backend, op):
    """int64 indexing: a result with more than 2^31 elements (bfloat16) is right at the start, around
    element 2^31 and at the end. Runs in a child; skipped when the machine lacks the memory."""
    _backends.skip_if_slow(backend, "a > 2^31-element problem takes too long there (int64 indexing is the same code)")
    need = BIG_NEED[op]
    if backend.device.type == "cuda":
        free = torch.cuda.mem_get_info()[0]
        if free < 2 * need:
            pytest.skip(f"needs {2 * need / 2**30:.1f} GiB free GPU memory, {free / 2**30:.1f} GiB free")
    avail = mem_available_bytes()
    if avail < need + BIG_HEADROOM:
        pytest.skip(
            f"needs ~{(need + BIG_HEADROOM) / 2**30:.1f} GiB available memory, {avail / 2**30:.1f} GiB available"
        )
    r = subprocess.run(
        [sys.executable, "-c", BIG_CHILD, backend.name, backend.device.type, op],
        capture_output=True,
        text=True,
        timeout=1200,
        env=child_env(),
    )
    assert r.returncode == 0 and "OK" in r.stdout, describe_result(r)
