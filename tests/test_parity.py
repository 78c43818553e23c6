"""The parity harness: error measures, the budget, op-level reports, and model-level reports
that must point at the module where a deliberately perturbed backend diverges."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import xkernels
import xkernels.nn as xnn
from xkernels import parity, reference
from xkernels.tolerances import DTYPES


def rnd(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


class Perturb(TorchDispatchMode):
    """Runs every op normally, then adds `rel` x max|result| to one element of result
    `index` of the `call`-th call (0-based; None = every call) of xkernels op `op`."""

    def __init__(self, op: str, index: int = 0, call: int | None = None, rel: float = 1e-2, zero_positive=False):
        super().__init__()
        self.op, self.index, self.call, self.rel, self.zero_positive = op, index, call, rel, zero_positive
        self.seen = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name != f"xkernels::{self.op}":
            return out
        n, self.seen = self.seen, self.seen + 1
        if self.call is not None and n != self.call:
            return out
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        t = outs[self.index]
        delta = torch.zeros(t.shape, dtype=t.dtype, device=t.device)
        if self.zero_positive:  # turn the first positive element into 0
            k = int((t.flatten() > 0).nonzero()[0])
            delta.view(-1)[k] = -t.flatten()[k]
        else:
            delta.view(-1)[t.numel() // 2] = self.rel * float(t.abs().max()) + self.rel
        outs[self.index] = t + delta
        return tuple(outs) if isinstance(out, (tuple, list)) else outs[0]


def perturbed(name: str, **kw):
    """A backend spec for the harness: the reference backend with a Perturb mode on top."""

    @contextlib.contextmanager
    def ctx():
        with xkernels.use_backend("reference"), Perturb(**kw):
            yield

    return (name, ctx)


# ------------------------------------------------------------------------------ budget and errors


def test_budget_table_covers_every_floating_dtype():
    assert set(parity.BUDGETS) == set(DTYPES)
    for dt, b in parity.BUDGETS.items():
        assert b.rtol_torch >= 1 and 0 < b.atol_rel < 0.05
        assert parity.budget_for(dt) is b
    # Lower precision never gets a tighter floor than higher precision.
    assert (
        parity.BUDGETS[torch.float64].atol_rel
        < parity.BUDGETS[torch.float32].atol_rel
        < parity.BUDGETS[torch.float16].atol_rel
        < parity.BUDGETS[torch.bfloat16].atol_rel
    )
    with pytest.raises(ValueError, match="no error budget for dtype torch.int32"):
        parity.budget_for(torch.int32)


@pytest.mark.parametrize("dtype,ulps", [(torch.float32, 1), (torch.float16, 3), (torch.bfloat16, 2)])
def test_tensor_error_counts_ulps(dtype, ulps):
    r = torch.tensor([1.0, -3.0, 0.5], dtype=torch.float64)
    x = r.to(dtype)
    x[1] = torch.nextafter(x[1], torch.tensor(-10.0, dtype=dtype))  # 1 ULP at 3 (2^1 binade)
    for _ in range(ulps - 1):
        x[1] = torch.nextafter(x[1], torch.tensor(-10.0, dtype=dtype))
    e = parity.tensor_error("t", x, r, dtype)
    assert e.max_ulp == pytest.approx(ulps)
    assert e.max_abs == pytest.approx(ulps * 2.0 ** (1 - parity.mantissa_bits(dtype)))
    assert e.max_rel == pytest.approx(e.max_abs / 3.0)


def test_tensor_error_budget_and_ratio_to_torch():
    r = torch.tensor([2.0, -1.0], dtype=torch.float64)
    b = parity.BUDGETS[torch.float32]
    t = (r + torch.tensor([1e-6, 0.0], dtype=torch.float64)).float()  # "PyTorch" off by ~1e-6
    ok = (r + torch.tensor([0.0, 3e-6], dtype=torch.float64)).float()
    e = parity.tensor_error("t", ok, r, torch.float32, t)
    assert e.passed and e.budget == pytest.approx(b.rtol_torch * e.torch_max_abs + b.atol_rel * 2.0)
    assert e.ratio_to_torch == pytest.approx(e.max_abs / e.torch_max_abs)
    bad = (r + torch.tensor([0.0, 1e-4], dtype=torch.float64)).float()
    e = parity.tensor_error("t", bad, r, torch.float32, t)
    assert not e.passed and e.budget_used > 1
    assert parity.tensor_error("t", bad, r, torch.float32, t, budget_factor=100).passed


def test_tensor_error_nan_inf_shape_and_dtype():
    r = torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.float64)
    same = r.float()
    assert parity.tensor_error("t", same, r, torch.float32).max_abs == 0  # matching NaN/Inf are equal
    bad = torch.tensor([float("nan"), float("nan"), float("inf")])
    e = parity.tensor_error("t", bad, r, torch.float32)
    assert math.isinf(e.max_abs) and not e.passed
    e = parity.tensor_error("t", torch.zeros(2), torch.zeros(3, dtype=torch.float64), torch.float32)
    assert not e.passed and "shape" in e.note
    e = parity.tensor_error(
        "t", torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), torch.float32
    )
    assert not e.passed and "dtype" in e.note
    assert json.loads(json.dumps(parity.tensor_error("t", bad, r, torch.float32).as_dict()))["max_abs"] == "inf"


# ------------------------------------------------------------------------------ op level


def _op_args(op, dtype):
    if op == "fused_linear_relu":
        return (rnd(5, 19, dtype=dtype), rnd(7, 19, dtype=dtype, seed=1), rnd(7, dtype=dtype, seed=2)), {}
    if op == "conv2d":
        return (rnd(2, 4, 6, 5, dtype=dtype), rnd(6, 2, 3, 3, dtype=dtype, seed=1), rnd(6, dtype=dtype, seed=2)), {
            "padding": (1, 0),
            "groups": 2,
        }
    return (rnd(3, 2, 9, dtype=dtype), [2, 9], rnd(2, 9, dtype=dtype, seed=1), rnd(2, 9, dtype=dtype, seed=2)), {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["fused_linear_relu", "conv2d", "layer_norm"])
def test_check_op_every_backend_passes(op, dtype):
    args, kw = _op_args(op, dtype)
    rep = parity.check_op(op, *args, **kw)
    assert [r.backend for r in rep.results] == parity.backends_for_device("cpu")
    assert rep.passed, rep.to_json()
    names = [t.name for t in rep.results[0].tensors]
    assert names == ["output", "grad_input", "grad_weight", "grad_bias"]
    for r in rep.results:  # the dispatch record says the requested backend ran every op
        ran = {e["backend"] for e in r.dispatch}
        assert ran == {r.backend}, r.dispatch
        assert {e["op"] for e in r.dispatch} >= {op if op != "layer_norm" else "layer_norm"}
    d = json.loads(rep.to_json())
    assert d["passed"] and d["results"][0]["tensors"][0]["name"] == "output"


def test_check_op_torch_pseudo_backend_is_the_baseline():
    args, kw = _op_args("conv2d", torch.float16)
    rep = parity.check_op("conv2d", *args, backends=["torch"], **kw)
    assert rep.passed
    for e in rep.results[0].tensors:
        assert e.max_abs == e.torch_max_abs and e.ratio_to_torch in (1.0, None)


def test_check_op_catches_a_wrong_gradient_in_the_right_tensor():
    args, kw = _op_args("conv2d", torch.float32)
    rep = parity.check_op("conv2d", *args, backends=[perturbed("bad-grad-weight", op="conv2d_backward", index=1)], **kw)
    res = {e.name: e.passed for e in rep.results[0].tensors}
    assert res == {"output": True, "grad_input": True, "grad_weight": False, "grad_bias": True}
    assert not rep.passed


def test_check_op_small_forward_error_outside_the_float32_budget():
    args, kw = _op_args("layer_norm", torch.float32)
    rep = parity.check_op(
        "layer_norm", *args, grads=False, backends=[perturbed("tiny", op="layer_norm_forward", index=0, rel=1e-4)]
    )
    assert [e.name for e in rep.results[0].tensors] == ["output"]
    assert not rep.passed  # 1e-4 relative is far above float32 rounding ...
    rep16 = parity.check_op(
        "layer_norm",
        *_op_args("layer_norm", torch.float16)[0],
        grads=False,
        backends=[perturbed("tiny", op="layer_norm_forward", index=0, rel=1e-4)],
    )
    assert rep16.passed  # ... and below float16's


def test_check_op_relu_backward_uses_the_backends_own_mask():
    args, _ = _op_args("fused_linear_relu", torch.float32)
    rep = parity.check_op(
        "fused_linear_relu", *args, backends=[perturbed("flip", op="fused_linear_relu", zero_positive=True)]
    )
    out, *grads = rep.results[0].tensors
    assert not out.passed  # the forward is wrong at one element ...
    assert all(g.passed for g in grads), grads  # ... and the backward is right for that output
    assert "relu mask differs from float64 at 1 element(s)" in grads[0].note


def test_a_run_that_ran_elsewhere_does_not_pass_as_the_requested_backend():
    # Claims to be "sycl" but selects the reference backend: the dispatch record gives it away.
    impostor = ("sycl", lambda: xkernels.use_backend("reference"))
    args, kw = _op_args("layer_norm", torch.float32)
    rep = parity.check_op("layer_norm", *args, backends=[impostor])
    res = rep.results[0]
    assert all(t.passed for t in res.tensors) and not res.dispatch_ok and not rep.passed
    assert "ran elsewhere: layer_norm->reference" in res.note
    assert "ran elsewhere" in _render(parity.summary_table([rep]))
    model, x = _tiny()
    mrep = parity.check_model(model, x, backends=[impostor], include_torch=False)
    assert not mrep.passed and "ran elsewhere" in _render(mrep.summary_table())


def test_check_op_budget_factor_zero_demands_exact():
    args, kw = _op_args("fused_linear_relu", torch.float16)
    assert not parity.check_op("fused_linear_relu", *args, backends=["reference"], budget_factor=0).passed


def test_check_op_reports_a_backend_that_raises():
    @contextlib.contextmanager
    def broken():
        class Raise(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace == "xkernels":
                    raise RuntimeError("xkernels.layer_norm: simulated device failure")
                return func(*args, **(kwargs or {}))

        with Raise():
            yield

    args, kw = _op_args("layer_norm", torch.float32)
    rep = parity.check_op("layer_norm", *args, backends=[("broken", broken), "reference"])
    assert rep.results[0].error == "RuntimeError: xkernels.layer_norm: simulated device failure"
    assert rep.results[1].passed and not rep.passed
    assert "ERROR" in _render(rep.table())


def test_check_op_argument_errors():
    with pytest.raises(ValueError, match="unknown op 'matmul'"):
        parity.check_op("matmul", torch.zeros(2))
    with pytest.raises(ValueError, match="'relu_mask' is not an argument"):
        parity.check_op("fused_linear_relu", rnd(2, 3), rnd(4, 3), relu_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError):
        parity.check_op("layer_norm", rnd(2, 3), 3, nonsense=1)


def test_torch_ops_replaces_every_xkernels_op():
    x, w, b = rnd(4, 6).requires_grad_(), rnd(3, 6, seed=1).requires_grad_(), rnd(3, seed=2).requires_grad_()
    with reference.torch_ops() as calls:
        y = xkernels.fused_linear_relu(x, w, b)
        z = xkernels.layer_norm(y, 3)
        z.sum().backward()
    assert calls == {
        "fused_linear_relu": 1,
        "layer_norm_forward": 1,
        "layer_norm_backward": 1,
        "fused_linear_relu_backward": 1,
    }
    torch.testing.assert_close(z, F.layer_norm(F.relu(F.linear(x, w, b)), [3]))


def _render(table) -> str:
    from rich.console import Console

    c = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    c.print(table)
    return c.export_text()


# ------------------------------------------------------------------------------ model level


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = xnn.Conv2d(2, 4, 3, padding=1)
        self.conv2 = xnn.Conv2d(4, 4, 3, padding=1)
        self.norm = xnn.LayerNorm([4, 5, 5])
        self.head = nn.Sequential(nn.Flatten(), xnn.FusedLinearReLU(100, 8), nn.Linear(8, 3))

    def forward(self, x):
        return self.head(self.norm(self.conv2(torch.relu(self.conv1(x)))))


def _tiny():
    torch.manual_seed(0)
    return Tiny(), torch.randn(3, 2, 5, 5)


def _entry(res, module, kind="output"):
    return next(e for e in res.entries if e.module == module and e.kind == kind)


def test_check_model_passes_and_reports_every_module():
    model, x = _tiny()
    rep = parity.check_model(model, x, backends=["reference"])
    assert rep.passed, rep.to_json()
    torch_row, ref = rep.results
    assert torch_row.backend == "torch" and ref.backend == "reference"
    fwd = [e.module for e in ref.entries if e.kind == "output"]
    assert fwd == ["conv1", "conv2", "norm", "head.0", "head.1", "head.2", "head", ""]  # execution order
    assert {(e.module, e.tensor) for e in ref.entries if e.kind == "param_grad"} == {
        (m, p) for m in ("conv1", "conv2", "norm", "head.1", "head.2") for p in ("weight", "bias")
    }
    bwd = [e.module for e in ref.entries if e.kind == "grad_output"]
    assert bwd.index("head.2") < bwd.index("norm") < bwd.index("conv1")  # backward order
    assert {e["backend"] for e in ref.dispatch} == {"reference"}
    assert {e["op"] for e in ref.dispatch} == {
        "conv2d",
        "conv2d_backward",
        "layer_norm",
        "layer_norm_backward",
        "fused_linear_relu",
        "fused_linear_relu_backward",
    }
    assert torch_row.dispatch == []  # the torch row ran no xkernels kernel
    assert json.loads(rep.to_json())["results"][1]["first_forward_divergence"] is None


def test_check_model_finds_the_perturbed_module_forward():
    model, x = _tiny()
    bad = perturbed("bad-conv2", op="conv2d", call=1)  # the second conv2d call = module conv2
    rep = parity.check_model(model, x, backends=["reference", bad])
    ok, broken = rep.results[1], rep.results[2]
    assert ok.passed
    first = broken.first_forward_divergence
    assert first is not None and first.module == "conv2" and first.kind == "output"
    assert _entry(broken, "conv1").error.passed
    assert not rep.passed
    text = _render(rep.summary_table())
    assert "conv2 (xkernels.nn.Conv2d" in text or "conv2 (Conv2d)" in text


def test_check_model_finds_a_module_perturbed_by_a_hook_under_one_backend():
    model, x = _tiny()

    def misbehave(mod, inp, out):  # only under the reference backend in float32, not in the float64 oracle
        if xkernels.current_backend() == "reference" and out.dtype == torch.float32:
            return out + 1e-3
        return None

    model.norm.register_forward_hook(misbehave)
    rep = parity.check_model(model, x, backends=["reference"])
    torch_row, ref = rep.results
    assert torch_row.passed  # not perturbed when the reference backend is not selected
    assert ref.first_forward_divergence.module == "norm"
    assert [e.error.passed for e in ref.entries if e.kind == "output"][:2] == [True, True]


def test_check_model_finds_a_backward_only_divergence():
    model, x = _tiny()
    bad = perturbed("bad-ln-backward", op="layer_norm_backward", index=0)  # grad_input of the layer norm
    rep = parity.check_model(model, x, backends=[bad], include_torch=False)
    (res,) = rep.results
    assert res.first_forward_divergence is None
    first = res.first_backward_divergence
    # The layer norm's input gradient is what conv2's output receives; norm's own params are fine.
    assert (first.module, first.kind) == ("conv2", "grad_output")
    assert _entry(res, "norm", "param_grad").error.passed
    assert not _entry(res, "conv1", "param_grad").error.passed


def test_check_model_leaves_the_model_untouched():
    model, x = _tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    parity.check_model(model, x, backends=["reference"])
    assert torch.equal(torch.get_rng_state(), rng)  # the caller's random stream is not consumed
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks for m in model.modules())
    assert next(model.parameters()).dtype == torch.float32


def test_check_model_repeated_calls_tuple_outputs_and_kwargs():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(6, 6), nn.ReLU())
            self.ln = nn.LayerNorm(6)

        def forward(self, x, scale=1.0):
            h = self.block(self.block(x))
            return self.ln(h) * scale, h

    torch.manual_seed(0)
    model = xkernels.optimize(Shared())
    rep = parity.check_model(model, {"x": torch.randn(4, 6), "scale": 2.0}, backends=["reference"])
    assert rep.passed
    res = rep.results[1]
    calls = {(e.module, e.call) for e in res.entries if e.kind == "output"}
    assert ("block.0", 0) in calls and ("block.0", 1) in calls
    assert {e.tensor for e in res.entries if e.module == ""} >= {"out[0]", "out[1]"}


def test_check_model_bfloat16():
    model, x = _tiny()
    rep = parity.check_model(model.to(torch.bfloat16), x.to(torch.bfloat16), backends=["reference"])
    assert rep.dtype == "bfloat16" and rep.passed, rep.to_json()
