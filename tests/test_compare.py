"""xkernels.parity.compare: any model under two configurations, each against the same float64
oracle. A planted divergence (a module that perturbs its output, or the gradient passing back
through it, under one configuration only) must be found at the right module, forward and backward."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import xkernels
from xkernels import parity
from xkernels.__main__ import main

# torch.compile through dynamo and AOTAutograd, running the traced aten graphs as they are (no code
# generation, so the tests take seconds): the per-module machinery is the same as with inductor.
COMPILE = "compile:backend=aot_eager"


class _GradBump(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        bump = torch.zeros_like(g).flatten()
        bump[g.numel() // 2] = 1.0
        return g + bump.view_as(g) * (0.1 * g.abs().amax() + 0.1)


class Planted(nn.Module):
    """The identity, except when `when()` is true: then it adds 10% of max|x| (+0.1) to one element of
    its output (where='forward') or of the gradient passing back through it (where='backward')."""

    def __init__(self, when, where: str):
        super().__init__()
        self.when, self.where = when, where

    def forward(self, x):
        if not self.when():
            return x
        if self.where == "backward":
            return _GradBump.apply(x)
        bump = torch.zeros_like(x).flatten()
        bump[x.numel() // 2] = 1.0
        return x + bump.view_as(x) * (0.1 * x.abs().amax() + 0.1)


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, h):
        return h + self.fc2(F.gelu(self.fc1(self.ln(h))))


class Net(nn.Module):
    """embed -> block0 -> planted -> block1 -> head, plain PyTorch."""

    def __init__(self, planted: nn.Module | None = None, d: int = 16):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.block0 = Block(d)
        self.planted = planted if planted is not None else nn.Identity()
        self.block1 = Block(d)
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        return self.head(self.block1(self.planted(self.block0(self.embed(x)))))


def _net(planted=None):
    torch.manual_seed(0)
    return Net(planted), torch.randn(6, 8, generator=torch.Generator().manual_seed(1))


def _entry(side, module, kind="output"):
    return next(e for e in side.entries if e.module == module and e.kind == kind)


# ------------------------------------------------------------------------------ configurations


def test_parse_config_tokens():
    c = parity.parse_config("cpu+bf16-autocast+compile:backend=aot_eager:dynamic=false")
    assert c.device == torch.device("cpu") and c.autocast and c.autocast_dtype == torch.bfloat16
    assert c.compile == {"backend": "aot_eager", "dynamic": False} and c.compile_scope == "leaf"
    assert c.dtype is None and c.backend is None and not c.optimize
    c = parity.parse_config("cuda:1+fp16+optimize+backend=reference+compile:scope=model")
    assert (c.device, c.dtype, c.optimize, c.backend, c.compile, c.compile_scope) == (
        torch.device("cuda", 1),
        torch.float16,
        True,
        "reference",
        {},
        "model",
    )
    assert parity.parse_config("eager").compile is None
    assert parity.parse_config("torch-ops").backend == "torch"
    assert parity.parse_config(torch.bfloat16).dtype == torch.bfloat16
    assert parity.parse_config(torch.device("cpu")).device == torch.device("cpu")
    with pytest.raises(parity.ConfigError, match=r"'cpu\+nonsense': unknown token 'nonsense'"):
        parity.parse_config("cpu+nonsense")
    with pytest.raises(parity.ConfigError, match="'fp32\\+bf16': 'bf16' contradicts"):
        parity.parse_config("fp32+bf16")
    with pytest.raises(parity.ConfigError, match="compile option 'speed=9'"):
        parity.parse_config("compile:speed=9")
    with pytest.raises(parity.ConfigError, match="no xkernels backend 'warp'"):
        parity.parse_config("backend=warp")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_absent_device_fails_naming_config_and_device():
    model, x = _net()
    with pytest.raises(parity.ConfigError) as ei:
        parity.compare(model, x, ["cpu", "cuda+bf16-autocast"])
    msg = str(ei.value)
    assert "configuration 'cuda+bf16-autocast'" in msg and "device 'cuda'" in msg and "not available" in msg
    assert "torch.cuda.is_available() is False" in msg


def test_absent_device_index_and_device_type():
    model, x = _net()
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(parity.ConfigError, match=f"configuration 'cuda:{n + 3}' runs on device 'cuda:{n + 3}'"):
        parity.compare(model, x, ["cpu", f"cuda:{n + 3}"])
    if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        with pytest.raises(parity.ConfigError, match="configuration 'xpu' runs on device 'xpu'"):
            parity.compare(model, x, ["xpu"])


# ------------------------------------------------------------------------------ eager vs compile


def test_eager_vs_compile_agree_module_by_module():
    model, x = _net()
    rep = parity.compare(model, x, ["eager", COMPILE])
    assert rep.passed, rep.to_json()
    eager, comp = rep.sides
    outs = [e.module for e in eager.entries if e.kind == "output"]
    assert outs[:3] == ["embed", "block0.ln", "block0.fc1"] and outs[-1] == ""
    # Per-leaf compilation keeps every module visible, forward and backward.
    assert [e.module for e in comp.entries if e.kind == "output"] == outs
    assert {(e.module, e.tensor) for e in comp.entries if e.kind == "param_grad"} == {
        (e.module, e.tensor) for e in eager.entries if e.kind == "param_grad"
    }
    assert eager.deterministic and comp.deterministic
    assert "leaf module compiled" in comp.granularity


@pytest.mark.parametrize("scope", ["leaf", "model"])
def test_planted_forward_divergence_under_compile_only(scope):
    model, x = _net(Planted(torch.compiler.is_compiling, "forward"))
    rep = parity.compare(model, x, ["eager", f"{COMPILE}:scope={scope}"])
    eager, comp = rep.sides
    assert eager.passed, eager.as_dict()
    assert not comp.passed and not rep.passed
    first = comp.first_forward_divergence
    if scope == "leaf":
        assert (first.module, first.kind) == ("planted", "output")
        assert _entry(comp, "block0").error.passed  # everything before it is within the budget
    else:  # the whole model compiled: only its outputs are visible forward
        assert (first.module, first.kind) == ("", "output")
        assert {e.module for e in comp.entries if e.kind == "output"} == {""}
        assert "model's outputs only" in comp.granularity


@pytest.mark.parametrize("scope", ["leaf", "model"])
def test_planted_backward_divergence_under_compile_only(scope):
    model, x = _net(Planted(torch.compiler.is_compiling, "backward"))
    rep = parity.compare(model, x, ["eager", f"{COMPILE}:scope={scope}"])
    eager, comp = rep.sides
    assert eager.passed and not comp.passed
    assert comp.first_forward_divergence is None
    first = comp.first_backward_divergence
    if scope == "leaf":
        # The gradient passing back through `planted` is what block0's output receives.
        assert (first.module, first.kind) == ("block0", "grad_output")
        assert _entry(comp, "block1.fc1", "param_grad").error.passed  # after the planted module: fine
    else:  # parameter gradients only: the first one in backward order past the planted module
        assert first.kind == "param_grad" and first.module.startswith("block0.")
        assert all(e.error.passed for e in comp.entries if e.module.startswith(("block1.", "head")))


# ------------------------------------------------------------------------------ float32 vs bf16 autocast


_FLAG = {"on": False}


@contextlib.contextmanager
def _flag():
    _FLAG["on"] = True
    try:
        yield
    finally:
        _FLAG["on"] = False


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_planted_divergence_under_autocast_only(where):
    """A module that misbehaves in one configuration only (bf16 autocast plus a context the planted
    module reads). The context is the configuration's own: PyTorch's baseline in the same dtype
    setting runs without it, as a device or compiler fault would not be in PyTorch's CPU eager run."""
    model, x = _net(Planted(lambda: _FLAG["on"] and torch.is_autocast_enabled("cpu"), where))
    bad = parity.Config("bf16-autocast+fault", autocast=True, autocast_dtype=torch.bfloat16, context=_flag)
    rep = parity.compare(model, x, ["fp32", "bf16-autocast", bad])
    f32, b16, faulty = rep.sides
    assert f32.passed and b16.passed and not faulty.passed
    if where == "forward":
        assert faulty.first_forward_divergence.module == "planted"
    else:
        assert faulty.first_forward_divergence is None
        first = faulty.first_backward_divergence
        assert (first.module, first.kind) == ("block0", "grad_output")


# ------------------------------------------------------------------------------ xkernels on vs off


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.norm = nn.LayerNorm([4, 5, 5])
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(100, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        return self.head(self.norm(self.act(self.conv(x))))


class _OnCuda(nn.Module):
    """The identity, except on a CUDA tensor: then it adds 10% of max|x| (+0.1) to one element."""

    def forward(self, x):
        if not x.is_cuda:
            return x
        bump = torch.zeros_like(x).flatten()
        bump[x.numel() // 2] = 1.0
        return x + bump.view_as(x) * (0.1 * x.abs().amax() + 0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")
def test_cpu_and_cuda(tmp_path, capsys, monkeypatch):
    """The mission's question on a real second device: the same model on cpu and cuda, each against the float64
    CPU oracle (TF32 off, as torch's default for matmul). Plain modules stay within the budget on both sides; a
    module that misbehaves on CUDA only is found at the right place; the CLI compares the two as well."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    model, x = _net()
    rep = parity.compare(model, x, ["cpu", "cuda"])
    cpu, cuda = rep.sides
    assert cpu.passed and cuda.passed, (cpu.as_dict(), cuda.as_dict())
    model, x = _net(_OnCuda())
    rep = parity.compare(model, x, ["cpu", "cuda"])
    cpu, cuda = rep.sides
    assert cpu.passed and not cuda.passed
    assert cuda.first_forward_divergence.module == "planted"
    factory = tmp_path / "factory.py"
    factory.write_text(
        "import torch\nfrom torch import nn\n\n\ndef make():\n    torch.manual_seed(0)\n"
        "    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 4))\n"
        "    return m, torch.randn(6, 8)\n"
    )
    rc = main(["parity", f"{factory}:make", "--configs", "cpu,cuda"])
    out = capsys.readouterr().out
    assert rc == 0 and "compare:" in out, out


def _convnet():
    torch.manual_seed(0)
    return ConvNet(), torch.randn(3, 2, 5, 5, generator=torch.Generator().manual_seed(2))


class PerturbOp(TorchDispatchMode):
    """Adds 10% of max|result| (+0.1) to every element of result `index` of every call of xkernels op `op`."""

    def __init__(self, op: str, index: int = 0):
        super().__init__()
        self.op, self.index = op, index

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name != f"xkernels::{self.op}":
            return out
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        t = outs[self.index]
        outs[self.index] = t + (0.1 * float(t.abs().max()) + 0.1)
        return tuple(outs) if isinstance(out, (tuple, list)) else outs[0]


def test_xkernels_on_vs_off():
    model, x = _convnet()
    rep = parity.compare(model, x, ["eager", "optimize+backend=reference"])
    assert rep.passed, rep.to_json()
    off, on = rep.sides
    assert off.dispatch == []  # plain PyTorch: no xkernels op ran
    assert {e["backend"] for e in on.dispatch} == {"reference"}
    assert {e["op"] for e in on.dispatch} >= {"conv2d_relu", "layer_norm", "fused_linear_relu"}
    # optimize() fused conv+act and head.1+head.2: the fused modules' outputs are not the originals'.
    assert set(on.not_compared) == {"conv", "head.1"}
    assert {e.module for e in on.entries if e.kind == "output"} >= {"norm", "head.2", "head.3", ""}
    assert _entry(on, "norm").error.passed and _entry(on, "head.1", "param_grad").error.passed


@pytest.mark.parametrize(
    "op,index,kind,module",
    [("layer_norm_forward", 0, "output", "norm"), ("layer_norm_backward", 0, "param_grad", "conv")],
)
def test_planted_divergence_in_an_xkernels_op(op, index, kind, module):
    model, x = _convnet()
    bad = parity.Config("optimize+bad-" + op, optimize=True, backend="reference", context=lambda: PerturbOp(op, index))
    rep = parity.compare(model, x, ["eager", bad], repeat=False)
    off, on = rep.sides
    assert off.passed and not on.passed
    first = on.first_forward_divergence if kind == "output" else on.first_backward_divergence
    # Backward: the gradient reaching `conv` is not comparable (optimize() fused conv and act), so the
    # first divergence is conv's parameter gradient.
    assert (first.module, first.kind) == (module, kind)
    if kind != "output":
        assert on.first_forward_divergence is None


# ------------------------------------------------------------------------------ non-determinism, output


class Flaky(nn.Module):
    """Adds a different tiny amount on every call: a configuration that differs from itself."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x + 1e-6 * self.calls


def test_a_side_that_differs_from_itself_is_reported():
    model, x = _net(Flaky())
    rep = parity.compare(model, x, ["eager", COMPILE])
    for side in rep.sides:
        assert side.deterministic is False
        assert side.repeat_diffs[0]["module"] == "planted" and side.repeat_diffs[0]["kind"] == "output"
    model, x = _net()
    rep = parity.compare(model, x, ["eager"], repeat=False)
    assert rep.sides[0].deterministic is None


def test_dropout_runs_in_eval_mode_and_the_model_is_untouched():
    model, x = _net(nn.Dropout(0.5))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    rep = parity.compare(model, x, ["eager", "fp32"])
    assert rep.passed and rep.mode == "eval" and all(s.deterministic for s in rep.sides)
    assert torch.equal(torch.get_rng_state(), rng)
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks for m in model.modules())
    # Train mode: the same seed on both sides (same device type), so dropout masks agree.
    rep = parity.compare(model, x, ["eager", "fp32"], train=True)
    assert rep.mode == "train" and rep.passed, rep.to_json()


def test_report_json_table_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    model, x = _net(Planted(torch.compiler.is_compiling, "forward"))
    rep = parity.compare(model, x, ["eager", COMPILE])
    d = json.loads(rep.to_json())
    assert d["passed"] is False and [s["config"] for s in d["sides"]] == ["eager", COMPILE]
    assert d["sides"][1]["first_forward_divergence"]["module"] == "planted"
    from rich.console import Console

    c = Console(width=240, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    rep.print(c, details="all")
    text = c.export_text()
    assert "first forward divergence" in text and "planted (Planted)" in text and "<- first" in text
    rep.plot(tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------------------ command line


@pytest.fixture
def factory_file(tmp_path):
    f = tmp_path / "compare_factories.py"
    f.write_text(
        "import torch\nfrom torch import nn\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))\n"
        "    return m, torch.randn(5, 8)\n"
    )
    return f


def test_cli_configs(factory_file, tmp_path, capsys):
    j, p = tmp_path / "c.json", tmp_path / "c.png"
    rc = main(["parity", f"{factory_file}:make", "--configs", f"eager,{COMPILE}", "--json", str(j), "--plot", str(p)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "compare:" in out and "OK:" in out and COMPILE in out
    assert [s["config"] for s in json.loads(j.read_text())["sides"]] == ["eager", COMPILE]
    if p.exists() or pytest.importorskip("matplotlib"):
        assert p.exists()
    rc = main(["parity", f"{factory_file}:make", "--configs", "fp32,bf16-autocast", "--no-repeat"])
    assert rc == 0, capsys.readouterr().out


def test_cli_configs_errors(factory_file, capsys):
    if not torch.cuda.is_available():
        rc = main(["parity", f"{factory_file}:make", "--configs", "cpu,cuda"])
        out = capsys.readouterr().out
        assert rc == 3 and "configuration 'cuda'" in out and "device 'cuda'" in out, out
    rc = main(["parity", f"{factory_file}:make", "--configs", "cpu,gpu9"])
    assert rc == 2 and "unknown token 'gpu9'" in capsys.readouterr().out
    rc = main(["parity", f"{factory_file}:make", "--configs", "cpu", "--backends", "reference"])
    assert rc == 2 and "either --backends or --configs" in capsys.readouterr().out
    rc = main(["parity", f"{factory_file}:make", "--train"])
    assert rc == 2 and "go with --configs" in capsys.readouterr().out


def test_configs_accept_a_custom_context():
    """A Config's context wraps the run (here: counting xkernels op calls of an optimized model)."""
    model, x = _convnet()
    seen = []

    @contextlib.contextmanager
    def spy():
        with xkernels.dispatch_record() as rec:
            yield
        seen.append(len(rec.events))

    rep = parity.compare(model, x, [parity.Config("spied", optimize=True, context=spy)], repeat=False)
    assert rep.passed and seen and seen[0] > 0
