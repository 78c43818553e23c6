"""xkernels.optimize() and module hooks, against torch: a hook registered on a module that optimize() replaces
runs as often, and sees the same tensors (within float32 tolerance), on the optimized model as on the original
one, in eval and in train mode; a fusion that would remove what a hook sees is not done, and the report says so."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import xkernels
import xkernels.nn as xnn
from xkernels.parity import tensor_error


class Recorder:
    """Every hook kind, recording (kind, tensors) per call; registered on one module."""

    KINDS = ("pre", "pre_kw", "fwd", "fwd_kw", "fwd_always", "bwd", "bwd_pre", "state")

    def __init__(self, module: nn.Module, kinds=KINDS):
        self.calls: list[tuple[str, list[torch.Tensor]]] = []
        self.handles = []
        r = self.handles.append
        if "pre" in kinds:
            r(module.register_forward_pre_hook(lambda m, args: self._rec("pre", args)))
        if "pre_kw" in kinds:
            r(module.register_forward_pre_hook(lambda m, a, kw: self._rec("pre_kw", a), with_kwargs=True))
        if "fwd" in kinds:
            r(module.register_forward_hook(lambda m, args, out: self._rec("fwd", args, out)))
        if "fwd_kw" in kinds:
            r(module.register_forward_hook(lambda m, a, kw, out: self._rec("fwd_kw", a, out), with_kwargs=True))
        if "fwd_always" in kinds:
            r(module.register_forward_hook(lambda m, a, out: self._rec("fwd_always", a, out), always_call=True))
        if "bwd" in kinds:
            r(module.register_full_backward_hook(lambda m, gi, go: self._rec("bwd", gi, go)))
        if "bwd_pre" in kinds:
            r(module.register_full_backward_pre_hook(lambda m, go: self._rec("bwd_pre", go)))
        if "state" in kinds:
            r(module.register_state_dict_post_hook(lambda m, sd, prefix, local: self._rec("state", [len(sd)])))

    def _rec(self, kind, *groups):
        flat = []
        for g in groups:
            for t in g if isinstance(g, (tuple, list)) else (g,):
                flat.append(t.detach().clone() if isinstance(t, torch.Tensor) else t)
        self.calls.append((kind, flat))

    def take(self):
        out, self.calls = self.calls, []
        return out


def _same_calls(got, want, ref):
    """The optimized model's hook calls `got` are the original's `want`: the same kinds in the same order, the
    same non-tensor values, and tensors within xkernels' float32 budget of the float64 model's `ref` (relative
    to torch's own float32 error, as the parity harness measures it)."""
    assert [k for k, _ in got] == [k for k, _ in want] == [k for k, _ in ref]
    for (kind, g), (_, w), (_, r) in zip(got, want, ref, strict=True):
        assert len(g) == len(w) == len(r), kind
        for a, b, c in zip(g, w, r, strict=True):
            if isinstance(b, torch.Tensor):
                err = tensor_error(kind, a, c, torch.float32, b)
                assert err.passed, err
            else:
                assert a == b == c, kind


def _run(model, x, train):
    """Forward (and backward in train mode) and a state_dict; returns the output."""
    model.train(train)
    if train:
        x = x.clone().requires_grad_(True)
        out = model(x)
        out.square().sum().backward()
    else:
        with torch.no_grad():
            out = model(x)
    model.state_dict()
    return out.detach()


def _compare(model, make_opt, hooked, x, train, kinds=Recorder.KINDS):
    """Runs the original `model`, its float64 copy and the optimized model with a Recorder on `hooked` (a path);
    the hooks must run the same number of times with the same tensors. Returns (optimized model, report, calls
    on the original)."""
    rec = Recorder(model.get_submodule(hooked), kinds)
    m64 = copy.deepcopy(model).double()  # its hooks are the same functions: they record into `rec` too
    want_out = _run(model, x, train)
    want = rec.take()
    ref_out = _run(m64, x.double(), train)
    ref = rec.take()
    report = []
    opt = make_opt(model, report)
    got_out = _run(opt, x, train)
    got = rec.take()
    err = tensor_error("output", got_out, ref_out, torch.float32, want_out)
    assert err.passed, err
    _same_calls(got, want, ref)
    # Backward hooks run only with a backward (train mode here); every other kind ran on the original.
    assert want or (not train and set(kinds) <= {"bwd", "bwd_pre"}), "the hooks ran on the original model"
    return opt, report, want


class SharedConv(nn.Module):
    """One conv used twice (the case that dropped its hooks: 0 calls instead of 2)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(self.conv(torch.relu(self.conv(x))))


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_hooks_on_a_shared_conv_used_twice(train):
    torch.manual_seed(0)
    model = SharedConv()
    x = torch.randn(2, 3, 6, 6)
    opt, report, want = _compare(model, lambda m, r: xkernels.optimize(m, report=r), "conv", x, train)
    assert type(opt.conv) is xnn.Conv2d and type(opt.norm) is xnn.LayerNorm
    assert sum(k == "fwd" for k, _ in want) == 2 and sum(k == "pre" for k, _ in want) == 2
    if train:
        assert sum(k == "bwd" for k, _ in want) == 2 and sum(k == "bwd_pre" for k, _ in want) == 2
    assert [r[2] for r in report] == ["xkernels.nn.Conv2d", "xkernels.nn.LayerNorm"]


def test_shared_module_gets_one_replacement_and_handles_keep_working():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 3, 1)
    model = nn.Sequential(conv, nn.ReLU(), conv)
    calls = []
    handle = conv.register_forward_hook(lambda m, a, o: calls.append(type(m)))
    opt = xkernels.optimize(model)
    assert opt[0] is opt[2] and type(opt[0]) is xnn.Conv2d
    x = torch.randn(1, 3, 4, 4)
    with torch.no_grad():
        opt(x)
    assert calls == [xnn.Conv2d, xnn.Conv2d]
    handle.remove()  # the handle returned by the original module removes the hook from the replacement too
    with torch.no_grad():
        opt(x)
    assert len(calls) == 2


def test_hooks_on_layer_norm_and_the_whole_model():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    _compare(SharedConv(), lambda m, r: xkernels.optimize(m, report=r), "norm", x, train=True)
    holder = nn.Sequential(nn.LayerNorm(6))
    opt, _, _ = _compare(holder, lambda m, r: xkernels.optimize(m[0], report=r), "0", x, train=True)
    assert type(opt) is xnn.LayerNorm  # the model itself was the one replaceable layer


# ----------------------------------------------------------------------------- BatchNorm folding (eval)


def _conv_bn_relu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))
    with torch.no_grad():
        model[1].running_mean.normal_()
        model[1].running_var.uniform_(0.5, 2)
    return model.eval(), torch.randn(2, 3, 5, 5)


@pytest.mark.parametrize(
    "hooked, kinds",
    [("0", ("fwd",)), ("0", ("bwd_pre",)), ("0", ("state",)), ("1", ("pre",)), ("1", ("fwd_always",))],
    ids=["conv-forward", "conv-backward-pre", "conv-state_dict", "bn-pre", "bn-forward"],
)
def test_hook_that_folding_would_remove_keeps_the_batchnorm(hooked, kinds):
    model, x = _conv_bn_relu()
    opt, report, want = _compare(model, lambda m, r: xkernels.optimize(m, report=r), hooked, x, False, kinds)
    assert type(opt[1]) is nn.BatchNorm2d and type(opt[0]) is xnn.Conv2d and type(opt[2]) is nn.ReLU
    unchanged = [r for r in report if r[2].startswith("unchanged")]
    assert [(r[0], r[1]) for r in unchanged] == [("0", "Conv2d+BatchNorm2d")]
    module = "Conv2d '0'" if hooked == "0" else "BatchNorm2d '1'"
    assert unchanged[0][2].startswith(f"unchanged: BatchNorm2d not folded: {module} has a")
    # In train mode nothing is folded anyway: the same hooks run as on torch's modules.
    _compare(model, lambda m, r: xkernels.optimize(m.train(), report=r), hooked, x, True, kinds)


def test_forward_pre_hook_on_a_folded_conv_is_carried():
    model, x = _conv_bn_relu()
    opt, report, _ = _compare(model, lambda m, r: xkernels.optimize(m, report=r), "0", x, False, ("pre", "pre_kw"))
    assert type(opt[0]) is xnn.Conv2dEpilogue and opt[0].folded_batchnorm and type(opt[1]) is nn.Identity


# ----------------------------------------------------------------------------- Linear + ReLU


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3)), torch.randn(4, 5)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize(
    "hooked, kinds",
    [("0", ("fwd",)), ("0", ("bwd",)), ("1", ("pre",)), ("1", ("fwd_kw",)), ("1", ("bwd",))],
    ids=["linear-forward", "linear-backward", "relu-pre", "relu-forward", "relu-backward"],
)
def test_hook_that_fusion_would_remove_keeps_linear_and_relu(hooked, kinds, train):
    model, x = _mlp()
    opt, report, _ = _compare(model, lambda m, r: xkernels.optimize(m, report=r), hooked, x, train, kinds)
    assert type(opt[0]) is nn.Linear and type(opt[1]) is nn.ReLU
    assert len(report) == 1 and report[0][:2] == ("0", "Linear+ReLU")
    assert report[0][2].startswith("unchanged: not fused: ")


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_linear_input_and_state_hooks_carried_into_the_fused_module(train):
    model, x = _mlp()
    opt, report, _ = _compare(
        model, lambda m, r: xkernels.optimize(m, report=r), "0", x, train, ("pre", "pre_kw", "state")
    )
    assert type(opt[0]) is xnn.FusedLinearReLU and type(opt[1]) is nn.Identity
    _compare(model, lambda m, r: xkernels.optimize(m, report=r), "1", x, train, ("state",))


# ----------------------------------------------------------------------------- conv epilogues (eval)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.relu(self.a(x))
        return torch.relu(self.b(y) + x)


@pytest.mark.parametrize(
    "hooked, kinds, fused",
    [
        ("a", ("fwd",), ["b"]),
        ("relu", ("pre",), ["b"]),
        ("relu", ("fwd",), ["b"]),
        ("b", ("bwd",), ["a"]),
        ("b", ("pre",), ["a"]),  # with a residual the fused call's input is (input, residual)
        ("a", ("pre", "pre_kw", "state"), ["a", "b"]),  # no residual: same input, same state
    ],
    ids=["conv-forward", "relu-pre", "relu-forward", "conv-backward", "residual-conv-pre", "conv-pre-and-state"],
)
def test_epilogue_not_fused_where_a_hook_sees_the_intermediate(hooked, kinds, fused):
    torch.manual_seed(0)
    model, x = Residual().eval(), torch.randn(2, 4, 5, 5)
    opt, report, _ = _compare(model, lambda m, r: xkernels.optimize(m, report=r), hooked, x, False, kinds)
    assert sorted(r[0] for r in report if r[2] == "xkernels.nn.Conv2dEpilogue") == fused
    assert [type(getattr(opt, n)) is xnn.Conv2dEpilogue for n in "ab"] == [n in fused for n in "ab"]
    unchanged = [r for r in report if r[2].startswith("unchanged")]
    assert len(unchanged) == 2 - len(fused)
    assert all(r[2].startswith("unchanged: not fused: ") for r in unchanged)


def test_container_hooks_carried_to_the_rewritten_graph_module():
    torch.manual_seed(0)
    model, x = Residual().eval(), torch.randn(2, 4, 5, 5)
    outer = nn.Sequential(model)
    opt, _, _ = _compare(
        outer, lambda m, r: xkernels.optimize(m, report=r), "0", x, False, ("pre", "fwd", "fwd_kw", "state")
    )
    assert isinstance(opt[0], torch.fx.GraphModule)


def test_old_style_backward_hook_blocks_replacement():
    torch.manual_seed(0)
    model = SharedConv()
    model.conv.register_backward_hook(lambda m, gi, go: None)
    report = []
    opt = xkernels.optimize(model, report=report)
    assert type(opt.conv) is nn.Conv2d and type(opt.norm) is xnn.LayerNorm
    assert report[0] == (
        "conv",
        "Conv2d",
        "unchanged: not replaced: Conv2d 'conv' has a non-full backward hook (register_backward_hook)",
    )
