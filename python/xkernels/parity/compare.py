"""Where does my model diverge? Any model run under two (or more) configurations, each measured
module by module against the same float64 CPU oracle with the same budgets.

A configuration is a '+'-joined list of tokens (or a ``Config``):

    device       cpu, cuda, cuda:1, xpu, mps, ... (anything torch.device accepts; default: the
                 model's own device)
    dtype        fp32 / float32, fp64 / float64, fp16 / float16 / half, bf16 / bfloat16: the model's
                 floating parameters, buffers and inputs are cast to it
    autocast     bf16-autocast, fp16-autocast, autocast (the device type's default dtype)
    compile      eager (default), compile, compile:OPT=VAL:... where OPT is a torch.compile argument
                 (backend, mode, dynamic, fullgraph) or scope=leaf|model (below)
    xkernels     backend=NAME (an xkernels backend: reference, sycl, acpp, cuda), torch-ops (every
                 xkernels op replaced by PyTorch's own), optimize (xkernels.optimize() applied)

e.g. ``cuda+bf16-autocast+compile``, ``cpu+fp32``, ``compile:backend=aot_eager``, ``optimize+backend=sycl``.

How each side is measured. Every side runs forward (and backward from the same seeded gradient)
with hooks on every submodule and keeps one set of activations: each module output, each gradient
reaching a module output and each parameter gradient, copied to the CPU in its own dtype. Then a
float64 copy of the model runs once on the CPU (xkernels ops on the reference backend); its hooks
compare each tensor with every side's as it is produced and drop it, so the oracle's activations
are streamed, never all kept (autograd still saves what its backward needs). The budget of a tensor
is ``xkernels.tolerances``' policy 2, relative to PyTorch's own error in the same dtype setting:
the model run eagerly on the CPU in that dtype / autocast setting with every xkernels op replaced
by PyTorch's (one baseline per dtype setting, shared by every side that has it), so two sides in
the same dtype get the same budget for each module and the report says which side leaves it.

torch.compile. Module hooks do not see inside a compiled graph, so ``compile`` (scope=leaf, the
default) compiles every leaf module's forward on its own: containers run eagerly around compiled
leaves, hooks see every module output and gradient, and a divergence is located at a leaf module.
What this does not reproduce is fusion across modules (e.g. a Linear's bias-add fused with the
following activation). ``compile:scope=model`` compiles the whole model as a user would; hooks
then see the model's outputs only, plus every parameter gradient (so backward keeps per-parameter
granularity); a divergence there and not under scope=leaf points at cross-module fusion.

Random numbers. Models run in eval() mode by default (dropout off, batch norm on running
statistics); with ``train=True`` every run starts from the same seed, which only gives the same
dropout masks where the random streams agree (same device type). Every side runs twice
(``repeat=True``) and reports whether its second run reproduced the first bit for bit, and where
not, the first tensor that differed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .. import reference
from ..backends import backends as backend_status
from ..backends import dispatch_record, use_backend
from .dispatch import _dispatch_note, _events, ran_elsewhere
from .metrics import BUDGETS, _abs_err, tensor_error
from .model import ModelBackendResult, ModuleEntry, _flat_tensors, _map_tensors, _model_dtype_device
from .report import _console, _fmt, _verdict

__all__ = ["Config", "ConfigError", "parse_config", "SideResult", "CompareReport", "compare", "plot"]

_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp64": torch.float64,
    "float64": torch.float64,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}
_AUTOCAST = {"bf16-autocast": torch.bfloat16, "fp16-autocast": torch.float16, "autocast": None}
_COMPILE_OPTIONS = ("backend", "mode", "dynamic", "fullgraph", "scope")
_TOKENS_HELP = (
    "a device (cpu, cuda, cuda:1, xpu, mps, ...), fp32/fp64/fp16/bf16, bf16-autocast/fp16-autocast/autocast, "
    "eager, compile[:OPT=VAL...], backend=NAME, torch-ops, optimize"
)


class ConfigError(ValueError):
    """A configuration that cannot be parsed, or that names a device this machine does not have."""


@dataclass(frozen=True)
class Config:
    """One way of running a model. `name` labels it in reports; every other field None / False
    means "as the model is" (its device and dtype, eager, the default xkernels backend)."""

    name: str
    device: torch.device | None = None
    dtype: torch.dtype | None = None
    autocast: bool = False
    autocast_dtype: torch.dtype | None = None  # None with autocast: the device type's default
    compile: dict | None = None  # torch.compile keyword arguments; None = eager
    compile_scope: str = "leaf"  # "leaf": every leaf module compiled on its own; "model": the whole model
    backend: str | None = None  # an xkernels backend, or "torch" (xkernels ops replaced by PyTorch's)
    optimize: bool = False
    context: Callable[[], contextlib.AbstractContextManager] | None = None  # any extra context (instrumented runs)

    def dtype_setting(self) -> tuple:
        """What PyTorch's same-dtype baseline depends on."""
        return (self.dtype, self.autocast, self.autocast_dtype)

    def describe(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> str:
        """In words; `device`, `dtype`: the model's own, for what this configuration leaves as it is."""
        dev, dt = self.device or device, self.dtype or dtype
        parts = [str(dev) if dev else "model's device"]
        parts.append(str(dt).replace("torch.", "") if dt else "model's dtype")
        if self.autocast:
            parts.append(
                f"autocast({str(self.autocast_dtype).replace('torch.', '') if self.autocast_dtype else 'default'})"
            )
        if self.compile is not None:
            opts = [f"{k}={v}" for k, v in self.compile.items()]
            scope = "each leaf module" if self.compile_scope == "leaf" else "whole model"
            parts.append(f"torch.compile({', '.join([scope, *opts])})")
        else:
            parts.append("eager")
        if self.optimize:
            parts.append("xkernels.optimize()")
        if self.backend:
            parts.append("xkernels ops -> PyTorch" if self.backend == "torch" else f"xkernels backend {self.backend}")
        return ", ".join(parts)


def _parse_value(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    try:
        return int(v)
    except ValueError:
        return v


def parse_config(spec) -> Config:
    """A Config from a string like 'cuda+bf16-autocast+compile', a torch.device, a torch.dtype or a
    Config (returned as is)."""
    if isinstance(spec, Config):
        return spec
    if isinstance(spec, torch.device):
        return Config(str(spec), device=spec)
    if isinstance(spec, torch.dtype):
        if spec not in BUDGETS:
            raise ConfigError(f"xkernels.parity.compare: dtype {spec} has no error budget")
        return Config(str(spec).replace("torch.", ""), dtype=spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"xkernels.parity.compare: a configuration is a string, torch.device, dtype or Config, got {spec!r}"
        )
    kw: dict[str, Any] = {}

    def put(key, value, token):
        if key in kw and kw[key] != value:
            raise ConfigError(
                f"xkernels.parity.compare: configuration '{spec}': '{token}' contradicts an earlier token"
            )
        kw[key] = value

    for token in spec.strip().split("+"):
        tok = token.strip()
        low = tok.lower()
        if low in _DTYPES:
            put("dtype", _DTYPES[low], tok)
        elif low in _AUTOCAST:
            put("autocast", True, tok)
            put("autocast_dtype", _AUTOCAST[low], tok)
        elif low == "eager":
            put("compile", None, tok)
        elif low == "compile" or low.startswith("compile:"):
            opts: dict[str, Any] = {}
            for item in tok.split(":")[1:]:
                k, sep, v = item.partition("=")
                if not sep or k not in _COMPILE_OPTIONS:
                    raise ConfigError(
                        f"xkernels.parity.compare: configuration '{spec}': compile option '{item}' is not "
                        f"OPT=VALUE with OPT one of {', '.join(_COMPILE_OPTIONS)}"
                    )
                opts[k] = _parse_value(v)
            scope = opts.pop("scope", "leaf")
            if scope not in ("leaf", "model"):
                raise ConfigError(
                    f"xkernels.parity.compare: configuration '{spec}': scope={scope}, expected leaf or model"
                )
            put("compile", opts, tok)
            put("compile_scope", scope, tok)
        elif low == "optimize":
            put("optimize", True, tok)
        elif low == "torch-ops":
            put("backend", "torch", tok)
        elif low.startswith("backend="):
            name = tok.partition("=")[2]
            if name not in backend_status() and name != "torch":
                raise ConfigError(
                    f"xkernels.parity.compare: configuration '{spec}': no xkernels backend '{name}'; "
                    f"known: {', '.join(backend_status())}, torch"
                )
            put("backend", name, tok)
        else:
            try:
                dev = torch.device(tok)
            except RuntimeError:
                raise ConfigError(
                    f"xkernels.parity.compare: configuration '{spec}': unknown token '{tok}'; a token is {_TOKENS_HELP}"
                ) from None
            put("device", dev, tok)
    return Config(spec.strip(), **kw)


def _device_problem(dev: torch.device) -> str | None:
    """Why tensors cannot be run on `dev` here (None when they can)."""
    if dev.type == "cpu":
        return None
    if dev.type == "meta":
        return "meta tensors hold no values to compare"
    if dev.type == "mps":
        ok = torch.backends.mps.is_available()
        return None if ok else "torch.backends.mps.is_available() is False"
    mod = getattr(torch, dev.type, None)
    if mod is None or not callable(getattr(mod, "is_available", None)):
        return f"this torch ({torch.__version__}) has no '{dev.type}' device module"
    if not mod.is_available():
        return f"torch.{dev.type}.is_available() is False (torch {torch.__version__})"
    count = mod.device_count() if callable(getattr(mod, "device_count", None)) else 1
    if dev.index is not None and dev.index >= count:
        return f"there are {count} {dev.type} device(s), numbered from 0"
    return None


def _check_available(cfg: Config, device: torch.device) -> None:
    why = _device_problem(device)
    if why:
        raise ConfigError(
            f"xkernels.parity.compare: configuration '{cfg.name}' runs on device '{device}', "
            f"which is not available here: {why}"
        )
    if cfg.backend and cfg.backend != "torch":
        st = backend_status()[cfg.backend]
        if not st.available:
            raise ConfigError(
                f"xkernels.parity.compare: configuration '{cfg.name}' asks for xkernels backend '{cfg.backend}', "
                f"which is not available here: {st.reason or 'unavailable'}"
            )


# ----------------------------------------------------------------------------------- runs


@dataclass
class _Trace:
    """One run's tensors (CPU copies in their own dtype), in the order the run produced them."""

    outputs: dict = field(default_factory=dict)  # (module, call, tensor) -> Tensor
    out_order: list = field(default_factory=list)  # [(key, module type)]
    grads: dict = field(default_factory=dict)
    grad_order: list = field(default_factory=list)
    params: dict = field(default_factory=dict)  # (module, param) -> Tensor
    dispatch: list = field(default_factory=list)
    types: dict = field(default_factory=dict)  # module -> type name


def _cpu_copy(t: Tensor) -> Tensor:
    return t.detach().to("cpu", copy=True)


def _run(
    model: nn.Module,
    inputs,
    ctx: Callable[[], contextlib.AbstractContextManager],
    device: torch.device,
    *,
    backward: bool,
    seed: int,
    root_only: bool,
    on_out: Callable,
    on_grad: Callable,
    on_param: Callable,
) -> list[dict]:
    """Runs `model` once under `ctx` with hooks (every submodule, or the model alone with
    `root_only`); each floating output, gradient reaching an output and parameter gradient goes to
    the callbacks as it is produced (on_out(key, type, t), on_grad(key, type, g), on_param(key, g)).
    Returns the dispatch record's events."""
    names = {id(m): n for n, m in model.named_modules()}
    calls: dict[str, int] = {}

    def hook(mod, _inp, out):
        name = names[id(mod)]
        call = calls.get(name, 0)
        calls[name] = call + 1
        typ = type(mod).__name__
        for tname, t in _flat_tensors(out):
            key = (name, call, tname)
            on_out(key, typ, t)
            if backward and t.requires_grad:
                t.register_hook(lambda g, key=key, typ=typ: on_grad(key, typ, g))

    mods = [model] if root_only else [m for _n, m in model.named_modules()]
    handles = [m.register_forward_hook(hook) for m in mods]
    fork = [] if device.type == "cpu" else [device.index if device.index is not None else 0]
    try:
        with (
            dispatch_record() as rec,
            ctx(),
            torch.random.fork_rng(devices=fork, device_type=device.type if fork else "cuda"),
        ):
            torch.manual_seed(seed)
            out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
            if backward:
                params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
                diff = [t for _n, t in _flat_tensors(out) if t.requires_grad]
                if diff and params:
                    gs = []
                    for i, t in enumerate(diff):
                        g = torch.Generator().manual_seed(seed + 1000 + i)
                        gs.append(torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype).to(t.device))
                    pgs = torch.autograd.grad(diff, [p for _n, p in params], gs, allow_unused=True)
                    for (pn, p), g in zip(params, pgs):
                        mod, _, leaf = pn.rpartition(".")
                        on_param((mod, leaf), g if g is not None else torch.zeros_like(p))
            del out
        return _events(rec)
    finally:
        for h in handles:
            h.remove()


def _store(model, inputs, ctx, device, backward, seed, root_only) -> _Trace:
    tr = _Trace()

    def on_out(key, typ, t):
        tr.outputs[key] = _cpu_copy(t)
        tr.out_order.append((key, typ))
        tr.types[key[0]] = typ

    def on_grad(key, typ, g):
        tr.grads[key] = _cpu_copy(g)
        tr.grad_order.append((key, typ))

    def on_param(key, g):
        tr.params[key] = _cpu_copy(g)

    tr.dispatch = _run(
        model,
        inputs,
        ctx,
        device,
        backward=backward,
        seed=seed,
        root_only=root_only,
        on_out=on_out,
        on_grad=on_grad,
        on_param=on_param,
    )
    return tr


def _repeat_diffs(model, inputs, ctx, device, backward, seed, root_only, first: _Trace) -> list[dict]:
    """Runs again and returns every tensor that differs from the first run, in order, without
    keeping the second run's tensors."""
    diffs: list[dict] = []

    def check(kind, key, t, ref):
        def differs(max_diff, note):
            call = key[1] if kind != "param_grad" else 0
            diffs.append(
                {"kind": kind, "module": key[0], "call": call, "tensor": key[-1], "max_diff": max_diff, "note": note}
            )

        if ref is None:
            differs(None, "absent from the first run")
            return
        if tuple(t.shape) != tuple(ref.shape):
            d = math.inf
        else:
            d = float(_abs_err(t, ref.to(torch.float64)).max()) if t.numel() else 0.0
        if d != 0.0:
            differs(d, "")

    _run(
        model,
        inputs,
        ctx,
        device,
        backward=backward,
        seed=seed,
        root_only=root_only,
        on_out=lambda key, typ, t: check("output", key, t, first.outputs.get(key)),
        on_grad=lambda key, typ, g: check("grad_output", key, g, first.grads.get(key)),
        on_param=lambda key, g: check("param_grad", key, g, first.params.get(key)),
    )
    return diffs


def _dynamo_limits():
    """No silent fallback to eager: per-leaf compilation compiles one code object (e.g. Linear.forward)
    for many modules, past dynamo's default recompile limit of 8."""
    from torch import _dynamo

    cfg = _dynamo.config
    patch = {"fail_on_recompile_limit_hit": True}
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            patch[name] = 1 << 20
    return cfg.patch(**patch)


def _side_context(cfg: Config, device: torch.device, baseline: bool = False):
    """The context a side runs under (autocast, xkernels backend, dynamo limits, the config's own)."""

    @contextlib.contextmanager
    def ctx():
        with contextlib.ExitStack() as st:
            if baseline:
                st.enter_context(reference.torch_ops())
            elif cfg.backend == "torch":
                st.enter_context(reference.torch_ops())
            elif cfg.backend:
                st.enter_context(use_backend(cfg.backend))
            if cfg.autocast:
                kw = {"dtype": cfg.autocast_dtype} if cfg.autocast_dtype is not None else {}
                st.enter_context(torch.autocast(device.type, **kw))
            if cfg.compile is not None and not baseline:
                st.enter_context(_dynamo_limits())
            if cfg.context is not None and not baseline:
                st.enter_context(cfg.context())
            yield

    return ctx


def _to(obj, device, dtype):
    return _map_tensors(
        obj,
        lambda t: t.detach().to(device=device, dtype=dtype if dtype and t.is_floating_point() else None),
    )


def _prepare(model, inputs, cfg: Config, device: torch.device, train: bool, baseline: bool = False):
    """A copy of the model and inputs for `cfg`: device, dtype, optimize(), compile. Returns
    (model, inputs, not-comparable module names with reasons)."""
    m = copy.deepcopy(model).to(device=device)
    if cfg.dtype is not None:
        m = m.to(dtype=cfg.dtype)
    m.train(train)
    skip: dict[str, str] = {}
    if baseline:
        return m, _to(inputs, device, cfg.dtype), skip
    if cfg.optimize:
        import xkernels

        leaves = {n: type(x).__name__ for n, x in m.named_modules() if not any(True for _ in x.children())}
        replaced: list = []
        m = xkernels.optimize(m, report=replaced)
        for name, old, new in replaced:
            new_short = new.rsplit(".", 1)[-1]
            # A leaf replaced by a fused module (Linear -> FusedLinearReLU, Conv2d + BatchNorm2d ->
            # FoldedConv2d, ...) computes more than the original module: its output is not comparable.
            # Identity slots pass the fused result through, which is what the original module gave.
            if name in leaves and new_short not in (old, "Identity"):
                skip[name] = f"{old} -> {new_short}"
    if cfg.compile is not None:
        opts = dict(cfg.compile)
        if cfg.compile_scope == "model":
            m.forward = torch.compile(m.forward, **opts)
        else:
            for _n, x in m.named_modules():
                if not any(True for _ in x.children()) and type(x).forward is not nn.Module.forward:
                    x.forward = torch.compile(x.forward, **opts)
    return m, _to(inputs, device, cfg.dtype), skip


# ----------------------------------------------------------------------------------- report


@dataclass
class SideResult(ModelBackendResult):
    """One configuration's result; `backend` holds the configuration's name."""

    config: Config | None = None
    device: str = ""
    model_dtype: torch.dtype | None = None
    granularity: str = ""
    repeat_diffs: list | None = None  # None: not repeated; []: the second run reproduced the first
    not_compared: dict = field(default_factory=dict)  # module -> why

    @property
    def dispatch_ok(self) -> bool:
        b = self.config.backend if self.config else None
        return not b or b == "torch" or not ran_elsewhere(b, self.dispatch)

    @property
    def deterministic(self) -> bool | None:
        return None if self.repeat_diffs is None else not self.repeat_diffs

    def as_dict(self) -> dict:
        d = super().as_dict()
        d["config"] = self.backend
        d["description"] = self.config.describe(self.device, self.model_dtype) if self.config else ""
        d["device"] = self.device
        d["granularity"] = self.granularity
        d["deterministic"] = self.deterministic
        d["repeat_diffs"] = [
            {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in x.items()}
            for x in (self.repeat_diffs or [])
        ]
        d["not_compared"] = self.not_compared
        return d


@dataclass
class CompareReport:
    model: str
    mode: str  # "eval" or "train"
    sides: list[SideResult] = field(default_factory=list)
    forward_rows: list = field(default_factory=list)  # (module, call, tensor, type) in the oracle's order
    backward_rows: list = field(default_factory=list)  # (kind, module, call, tensor, type) in the oracle's order
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)  # seconds per phase: baselines, sides, oracle

    @property
    def results(self) -> list[SideResult]:
        return self.sides

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.sides)

    def side(self, name: str) -> SideResult:
        return next(s for s in self.sides if s.backend == name)

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "mode": self.mode,
            "oracle": "float64 copy of the model on the CPU (xkernels ops: reference backend)",
            "baseline": "PyTorch eager on the CPU in each side's dtype setting (xkernels ops: PyTorch's)",
            "passed": self.passed,
            "seconds": self.seconds,
            "timings": self.timings,
            "sides": [s.as_dict() for s in self.sides],
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.as_dict(), **kw)

    def summary_table(self):
        from rich.table import Table

        t = Table(
            title=f"compare: {self.model} ({self.mode} mode), each side vs the float64 CPU oracle", title_justify="left"
        )
        for col in (
            "config",
            "runs as",
            "result",
            "first forward divergence",
            "first backward divergence",
            "run to run",
            "first run",
        ):
            t.add_column(col, justify="right" if col == "first run" else "left")
        for s in self.sides:
            desc = s.config.describe(s.device, s.model_dtype) if s.config else ""
            if s.error:
                t.add_row(s.backend, desc, "[red]ERROR[/]", s.error, "", "", f"{s.seconds:.2f}s")
                continue
            f, b = s.first_forward_divergence, s.first_backward_divergence
            if s.repeat_diffs is None:
                rr = "not repeated"
            elif not s.repeat_diffs:
                rr = "identical"
            else:
                d0 = s.repeat_diffs[0]
                rr = (
                    f"[yellow]differs[/] at {len(s.repeat_diffs)} tensor(s), first {d0['module'] or '<model>'} "
                    f"{d0['kind']} {d0['tensor']} ({_fmt(d0['max_diff'])})"
                )
            t.add_row(
                s.backend,
                desc,
                _verdict(s.passed, "" if s.dispatch_ok else _dispatch_note(s.config.backend, s.dispatch)),
                f"{f.label} {f.tensor}: {_fmt(f.error.max_abs)} > {_fmt(f.error.budget)}" if f else "none",
                (f"{b.label} {b.kind} {b.tensor}: {_fmt(b.error.max_abs)} > {_fmt(b.error.budget)}" if b else "none")
                + (" [dim](after a forward divergence)[/]" if b and f else ""),
                rr,
                f"{s.seconds:.2f}s",
            )
        return t

    def detail_table(self, kinds=("output", "grad_output", "param_grad")):
        """Every compared tensor, in the oracle's order (forward, then backward), one column group per side."""
        from rich.table import Table

        sides = [s for s in self.sides if not s.error]
        t = Table(
            title="module by module (error = max abs vs the float64 oracle; used = share of the budget)",
            title_justify="left",
        )
        for col in ("#", "module", "kind", "tensor"):
            t.add_column(col, justify="right" if col == "#" else "left")
        for s in sides:
            t.add_column(f"{s.backend}\nerror", justify="right")
            t.add_column(f"{s.backend}\nused", justify="right")
        index = [{(e.kind, e.module, e.call, e.tensor): e for e in s.entries} for s in sides]
        first = [{id(x) for x in (s.first_forward_divergence, s.first_backward_divergence) if x} for s in sides]
        rows = [("output", *r) for r in self.forward_rows] + list(self.backward_rows)
        for i, (kind, mod, call, tensor, typ) in enumerate(rows):
            if kind not in kinds:
                continue
            cells = []
            for s, idx, fst in zip(sides, index, first):
                e = idx.get((kind, mod, call, tensor))
                if e is None:
                    why = s.not_compared.get(mod)
                    cells += ["[dim]-[/]", f"[dim]{why}[/]" if why else "[dim]-[/]"]
                    continue
                used = e.error.budget_used
                u = f"{used:.0%}" if math.isfinite(used) and used < 100 else ">100x"
                if not e.error.passed:
                    u = f"[bold red]{u}[/]" + (" [bold red]<- first[/]" if id(e) in fst else "")
                cells += [_fmt(e.error.max_abs), u]
            label = (mod or "<model>") + (f"#{call}" if call else "") + f" ({typ})"
            t.add_row(str(i), label, kind, tensor, *cells)
        return t

    def print(self, console=None, details: str = "failing") -> None:
        """details: 'none', 'failing' (the module table when a side fails) or 'all'."""
        c = _console(console)
        c.print(self.summary_table())
        for s in self.sides:
            if s.granularity:
                c.print(f"[dim]{s.backend}: {s.granularity}[/]")
            if s.not_compared:
                c.print(
                    f"[dim]{s.backend}: not compared (replaced by optimize()): "
                    + ", ".join(f"{k} ({v})" for k, v in s.not_compared.items())
                    + "[/]"
                )
        if details == "all" or (details == "failing" and not self.passed):
            c.print(self.detail_table())
        if self.timings:
            tm = {k: f"{v:.1f}s" for k, v in self.timings.items()}
            runs = "twice" if any(s.repeat_diffs is not None for s in self.sides) else "once"
            c.print(
                f"[dim]{self.seconds:.1f}s: PyTorch baselines {tm.get('baselines')}, sides (each run {runs}) "
                f"{tm.get('sides')}, float64 oracle and comparison {tm.get('oracle')}[/]"
            )

    def plot(self, path) -> None:
        plot(self, path)


def plot(report, path) -> None:
    """Error against module index for every side (a CompareReport, or a ModelReport of check_model):
    relative error max|x - r| / max|r| (solid) and the budget (dashed), forward outputs and backward
    gradients in two panels, the first divergence of each side circled. Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError(
            f"xkernels.parity.plot: matplotlib is needed for plots ({e}); pip install matplotlib"
        ) from None
    sides = [s for s in report.results if not s.error]
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.5), constrained_layout=True)
    for ax, kinds, title in (
        (axes[0], ("output",), "forward: module outputs (execution order)"),
        (axes[1], ("grad_output", "param_grad"), "backward: gradients (backward order)"),
    ):
        # x: the module's position in the oracle's order (CompareReport), so every side lines up; a
        # ModelReport has no such order and uses each side's own.
        rows = getattr(report, "forward_rows", None) if kinds == ("output",) else getattr(report, "backward_rows", None)
        if rows:
            rows = [("output", *r) for r in rows] if kinds == ("output",) else rows
            where = {(k, m, c, t): i for i, (k, m, c, t, _typ) in enumerate(rows)}
        for i, s in enumerate(sides):
            es = [e for e in s.entries if e.kind in kinds]
            if not es:
                continue
            color = f"C{i}"
            xs = [where.get((e.kind, e.module, e.call, e.tensor), k) for k, e in enumerate(es)] if rows else None
            xs = xs or list(range(len(es)))
            floor = 1e-16  # exact results (error 0) are drawn at 1e-16
            rel = [max(e.error.max_abs / e.error.scale, floor) if e.error.scale else floor for e in es]
            bud = [max(e.error.budget / e.error.scale, floor) if e.error.scale else floor for e in es]
            order = sorted(range(len(xs)), key=lambda k: xs[k])
            sx, sr, sb = [xs[k] for k in order], [rel[k] for k in order], [bud[k] for k in order]
            ax.plot(sx, sr, "-" if len(xs) > 1 else "s", color=color, lw=1.2, label=f"{s.backend}: error")
            ax.plot(sx, sb, "--" if len(xs) > 1 else "_", color=color, lw=0.8, alpha=0.7, label=f"{s.backend}: budget")
            first = next((k for k, e in enumerate(es) if not e.error.passed), None)
            if first is not None:
                e = es[first]
                ax.plot([xs[first]], [rel[first]], "o", ms=10, mfc="none", mec="red", mew=1.5)
                ax.annotate(
                    f"{s.backend}: {e.label}",
                    (xs[first], rel[first]),
                    textcoords="offset points",
                    xytext=(6, 6 + 12 * i),
                    fontsize=8,
                    color=color,
                )
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("module index" + (" (oracle's order)" if rows else ""))
        ax.set_ylabel("max |x - oracle| / max |oracle|")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"{getattr(report, 'model', '')}: error against the float64 oracle", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------- compare


def _assemble(tr: _Trace, errs: dict, rank: dict, types: dict) -> list[ModuleEntry]:
    """The side's entries in its own order: outputs in forward order, then gradients in the order
    backward produced them, each module's parameter gradients after the gradient of its first call.
    Parameter gradients of modules the side did not see (a model compiled as a whole) follow in the
    oracle's backward order (`rank`: module -> position), with the oracle's module `types`."""
    entries = []
    for i, (key, typ) in enumerate(tr.out_order):
        e = errs.get(("output", key))
        if e is not None:
            entries.append(ModuleEntry(i, key[0], typ, key[1], "output", key[2], e))
    pending: dict[str, list] = {}
    for mod, p in tr.params:
        pending.setdefault(mod, []).append(p)
    done = set()

    def add_params(mod):
        for p in pending.get(mod, []):
            if (mod, p) in done:
                continue
            done.add((mod, p))
            e = errs.get(("param_grad", (mod, p)))
            if e is not None:
                typ = tr.types.get(mod) or types.get(mod, "?")
                entries.append(ModuleEntry(len(entries), mod, typ, 0, "param_grad", p, e))

    for key, typ in tr.grad_order:
        e = errs.get(("grad_output", key))
        if e is not None:
            entries.append(ModuleEntry(len(entries), key[0], typ, key[1], "grad_output", key[2], e))
        if key[1] == 0:
            add_params(key[0])
    for mod in sorted(pending, key=lambda m: rank.get(m, len(rank))):
        add_params(mod)
    return entries


def _first_line(e: Exception) -> str:
    s = str(e).strip()
    return f"{type(e).__name__}: {s.splitlines()[0] if s else ''}"


def compare(
    model: nn.Module,
    inputs,
    configs: Sequence = ("eager", "compile"),
    *,
    backward: bool = True,
    seed: int = 0,
    budget_factor: float = 1.0,
    repeat: bool = True,
    train: bool = False,
    name: str | None = None,
) -> CompareReport:
    """Runs `model` (never modified: each run gets a deep copy) on `inputs` (a tensor, a tuple/list
    of positional arguments or a dict of keyword arguments) under each configuration of `configs`
    (strings such as 'cuda+bf16-autocast+compile', torch.devices, dtypes or Configs; see the module
    docstring), forward and, with `backward`, backward from a seeded random gradient, and measures
    every module output, gradient reaching a module output and parameter gradient of each side
    against one float64 CPU oracle, with budgets relative to PyTorch's own error in the side's dtype
    setting (scaled by `budget_factor`). With `repeat`, every side runs twice and reports whether it
    reproduced itself. `train`: compare in train mode (same seed everywhere) instead of eval().
    A configuration naming a device or backend that is not available raises ConfigError before
    anything runs."""
    t_start = time.perf_counter()
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    cfgs = [parse_config(c) for c in configs]
    if len({c.name for c in cfgs}) != len(cfgs):
        raise ConfigError(f"xkernels.parity.compare: configuration names repeat: {[c.name for c in cfgs]}")
    model_dtype, model_device = _model_dtype_device(model, inputs)
    devices = [c.device or model_device for c in cfgs]
    for c, d in zip(cfgs, devices):
        _check_available(c, d)
    report = CompareReport(name or type(model).__name__, "train" if train else "eval")

    # PyTorch's own error, one baseline per dtype setting: eager on the CPU, xkernels ops -> PyTorch.
    baselines: dict[tuple, _Trace | None] = {}
    baseline_errors: dict[tuple, str] = {}
    cpu = torch.device("cpu")
    for c in cfgs:
        key = c.dtype_setting()
        if key in baselines:
            continue
        bcfg = Config("baseline", dtype=c.dtype, autocast=c.autocast, autocast_dtype=c.autocast_dtype)
        try:
            m, x, _ = _prepare(model, inputs, bcfg, cpu, train, baseline=True)
            baselines[key] = _store(m, x, _side_context(bcfg, cpu, baseline=True), cpu, backward, seed, False)
            del m, x
        except Exception as e:  # noqa: BLE001 - a dtype PyTorch lacks on the CPU: budgets fall back to the floor
            baselines[key] = None
            baseline_errors[key] = _first_line(e)

    report.timings["baselines"] = time.perf_counter() - t_start
    traces: list[_Trace | None] = []
    t_sides = time.perf_counter()
    for c, dev in zip(cfgs, devices):
        side = SideResult(c.name, config=c, device=str(dev), model_dtype=model_dtype)
        if c.compile is not None and c.compile_scope == "model":
            side.granularity = (
                "compiled as a whole: forward compared at the model's outputs only; backward at "
                "every parameter gradient"
            )
        elif c.compile is not None:
            side.granularity = "every leaf module compiled on its own: no fusion across modules"
        if c.dtype_setting() in baseline_errors:
            side.note = f"no PyTorch baseline ({baseline_errors[c.dtype_setting()]}): budgets are the floor only"
        report.sides.append(side)
        t0 = time.perf_counter()
        tr = None
        try:
            if c.compile is not None:
                from torch import _dynamo

                _dynamo.reset()
            m, x, side.not_compared = _prepare(model, inputs, c, dev, train)
            ctx = _side_context(c, dev)
            root_only = c.compile is not None and c.compile_scope == "model"
            tr = _store(m, x, ctx, dev, backward, seed, root_only)
            side.seconds = time.perf_counter() - t0
            if repeat:
                side.repeat_diffs = _repeat_diffs(m, x, ctx, dev, backward, seed, root_only, tr)
            del m, x
        except Exception as e:  # noqa: BLE001 - reported per side
            side.error = _first_line(e)
            side.seconds = time.perf_counter() - t0
            tr = None
        if tr is not None:
            side.dispatch = tr.dispatch
            note = _dispatch_note(c.backend, tr.dispatch) if c.backend and c.backend != "torch" else ""
            side.note = " | ".join(x for x in (side.note, note) if x)
        traces.append(tr)

    report.timings["sides"] = time.perf_counter() - t_sides
    t_oracle = time.perf_counter()
    # The oracle, streamed: each tensor is compared with every side's as it is produced, then dropped.
    errs: list[dict] = [{} for _ in cfgs]
    base_of = [baselines.get(c.dtype_setting()) for c in cfgs]
    live = [(i, tr) for i, tr in enumerate(traces) if tr is not None]

    def measure(kind, key, r, pick):
        tname = key[-1]
        r = r.detach().to(device="cpu", dtype=torch.float64)
        t_errs: dict[int, float] = {}  # PyTorch's error, once per baseline
        for i, tr in live:
            x = pick(tr).get(key)
            if x is None or x.dtype not in BUDGETS:
                continue
            if kind != "param_grad" and key[0] in report.sides[i].not_compared:  # the same parameters, though
                continue
            b = base_of[i]
            t = pick(b).get(key) if b is not None else None
            if t is not None and tuple(t.shape) == tuple(r.shape) and id(b) not in t_errs:
                t_errs[id(b)] = float(_abs_err(t, r).max()) if t.numel() else 0.0
            t_err = t_errs.get(id(b)) if t is not None else None
            errs[i][(kind, key)] = tensor_error(
                tname, x, r, x.dtype, None, budget_factor, check_dtype=False, torch_max_abs=t_err
            )

    def on_out(key, typ, r):
        report.forward_rows.append((*key, typ))
        measure("output", key, r, lambda tr: tr.outputs)

    def on_grad(key, typ, g):
        report.backward_rows.append(("grad_output", *key, typ))
        measure("grad_output", key, g, lambda tr: tr.grads)

    param_rows = []

    def on_param(key, g):
        param_rows.append(("param_grad", key[0], 0, key[1], "?"))
        measure("param_grad", key, g, lambda tr: tr.params)

    if live:
        m64 = copy.deepcopy(model).to(device="cpu", dtype=torch.float64).train(train)
        x64 = _map_tensors(
            inputs, lambda t: t.detach().to(device="cpu", dtype=torch.float64 if t.is_floating_point() else None)
        )
        _run(
            m64,
            x64,
            lambda: use_backend("reference"),
            cpu,
            backward=backward,
            seed=seed,
            root_only=False,
            on_out=on_out,
            on_grad=on_grad,
            on_param=on_param,
        )
        del m64, x64
    types = {r[0]: r[3] for r in report.forward_rows}
    # Parameter gradients after their module's first-call gradient, as in each side's entries.
    rows = []
    params_by_mod: dict[str, list] = {}
    for p in param_rows:
        params_by_mod.setdefault(p[1], []).append((p[0], p[1], p[2], p[3], types.get(p[1], "?")))
    for r in report.backward_rows:
        rows.append(r)
        if r[2] == 0:
            rows += params_by_mod.pop(r[1], [])
    for rest in params_by_mod.values():
        rows += rest
    report.backward_rows = rows

    rank: dict[str, int] = {}
    for i, r in enumerate(rows):
        rank.setdefault(r[1], i)
    for i, tr in live:
        report.sides[i].entries = _assemble(tr, errs[i], rank, types)
    traces.clear()
    baselines.clear()
    report.timings["oracle"] = time.perf_counter() - t_oracle
    report.seconds = time.perf_counter() - t_start
    return report
