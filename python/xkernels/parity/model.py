"""Model-level parity across xkernels backends: every submodule's output, the gradient reaching
it and every parameter gradient, under each backend, against a float64 copy of the model."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .. import reference
from ..backends import dispatch_record, use_backend
from .dispatch import BackendSpec, _dispatch_note, _dispatch_summary, _events, _resolve, ran_elsewhere
from .metrics import BUDGETS, TensorError, tensor_error
from .report import _console, _fmt, _fmt_ratio, _verdict

__all__ = ["ModuleEntry", "ModelBackendResult", "ModelReport", "check_model"]


@dataclass
class ModuleEntry:
    """One compared tensor of one module call."""

    order: int  # forward execution order of the module call (backward entries: order of arrival)
    module: str  # qualified name ("" = the model itself)
    type: str
    call: int  # n-th call of this module in the forward pass
    kind: str  # "output", "grad_output" (gradient reaching the module's output) or "param_grad"
    tensor: str  # "out", "out[1]", "weight", ...
    error: TensorError

    @property
    def label(self) -> str:
        name = self.module or "<model>"
        call = f"#{self.call}" if self.call else ""
        return f"{name}{call} ({self.type})"

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("order", "module", "type", "call", "kind", "tensor")}
        d["error"] = self.error.as_dict()
        return d


@dataclass
class ModelBackendResult:
    backend: str
    entries: list[ModuleEntry] = field(default_factory=list)
    error: str | None = None
    dispatch: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    def _first(self, kinds) -> ModuleEntry | None:
        return next((e for e in self.entries if e.kind in kinds and not e.error.passed), None)

    @property
    def first_forward_divergence(self) -> ModuleEntry | None:
        return self._first(("output",))

    @property
    def first_backward_divergence(self) -> ModuleEntry | None:
        """In backward execution order: the gradient reaching a module output or a module's
        parameter gradient that first leaves the budget."""
        return self._first(("grad_output", "param_grad"))

    @property
    def dispatch_ok(self) -> bool:
        return not ran_elsewhere(self.backend, self.dispatch)

    @property
    def passed(self) -> bool:
        return self.error is None and self.dispatch_ok and all(e.error.passed for e in self.entries)

    def as_dict(self) -> dict:
        f, b = self.first_forward_divergence, self.first_backward_divergence
        return {
            "backend": self.backend,
            "passed": self.passed,
            "error": self.error,
            "note": self.note,
            "seconds": self.seconds,
            "first_forward_divergence": f.as_dict() if f else None,
            "first_backward_divergence": b.as_dict() if b else None,
            "entries": [e.as_dict() for e in self.entries],
            "dispatch": self.dispatch,
        }


@dataclass
class ModelReport:
    model: str
    dtype: str
    device: str
    results: list[ModelBackendResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results if r.backend != "torch")

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "dtype": self.dtype,
            "device": self.device,
            "passed": self.passed,
            "results": [r.as_dict() for r in self.results],
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.as_dict(), **kw)

    def summary_table(self):
        from rich.table import Table

        t = Table(
            title=f"model parity: {self.model} ({self.dtype} on {self.device}) vs float64 reference",
            title_justify="left",
        )
        for col in ("backend", "result", "first forward divergence", "first backward divergence", "dispatch"):
            t.add_column(col)
        for r in self.results:
            if r.error:
                t.add_row(r.backend, "[red]ERROR[/]", r.error, "", "")
                continue
            f, b = r.first_forward_divergence, r.first_backward_divergence
            t.add_row(
                r.backend,
                _verdict(r.passed) if r.backend != "torch" else "[dim]baseline[/]",
                f"{f.label} {f.tensor}: {_fmt(f.error.max_abs)} > {_fmt(f.error.budget)}" if f else "none",
                f"{b.label} {b.kind} {b.tensor}: {_fmt(b.error.max_abs)} > {_fmt(b.error.budget)}" if b else "none",
                _dispatch_summary(r.dispatch)
                + ("" if r.dispatch_ok else f" [red]{_dispatch_note(r.backend, r.dispatch)}[/]"),
            )
        return t

    def detail_table(self, backend: str, kinds=("output", "grad_output", "param_grad")):
        from rich.table import Table

        r = next(x for x in self.results if x.backend == backend)
        t = Table(title=f"{backend}: module by module", title_justify="left")
        for col in ("#", "module", "kind", "tensor", "max abs", "ULPs", "x torch", "budget", "result"):
            t.add_column(col, justify="right" if col in ("#", "max abs", "ULPs", "x torch", "budget") else "left")
        first = {id(x) for x in (r.first_forward_divergence, r.first_backward_divergence) if x}
        for e in r.entries:
            if e.kind not in kinds:
                continue
            mark = " [bold red]<- first[/]" if id(e) in first else ""
            t.add_row(
                str(e.order),
                e.label,
                e.kind,
                e.tensor,
                _fmt(e.error.max_abs),
                _fmt(e.error.max_ulp, 1),
                _fmt_ratio(e.error.ratio_to_torch),
                _fmt(e.error.budget),
                _verdict(e.error.passed) + mark,
            )
        return t

    def print(self, console=None, details: str = "failing") -> None:
        """details: 'none', 'failing' (module tables of failing backends) or 'all'."""
        c = _console(console)
        c.print(self.summary_table())
        for r in self.results:
            if r.error or details == "none" or (details == "failing" and r.passed):
                continue
            c.print(self.detail_table(r.backend))


def _flat_tensors(obj, prefix: str = "out") -> list[tuple[str, Tensor]]:
    if isinstance(obj, Tensor):
        return [(prefix, obj)] if obj.is_floating_point() else []
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in _flat_tensors(v, f"{prefix}[{i}]")]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _flat_tensors(v, f"{prefix}[{k!r}]")]
    return []


def _map_tensors(obj, fn):
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


@dataclass
class _Trace:
    outputs: dict = field(default_factory=dict)  # (module, call, tensor) -> float64 cpu tensor
    order: list = field(default_factory=list)  # [(module, type, call, tensor)] in forward order
    grad_outputs: dict = field(default_factory=dict)
    grad_order: list = field(default_factory=list)
    param_grads: dict = field(default_factory=dict)  # (module, param) -> tensor
    dispatch: list = field(default_factory=list)
    dtypes: dict = field(default_factory=dict)  # any key above -> the traced tensor's own dtype


def _trace(model: nn.Module, inputs, backward: bool, seed: int, ctx) -> _Trace:
    """Runs the model under `ctx` with hooks on every submodule, keeping float64 CPU copies."""
    tr = _Trace()
    calls: dict[str, int] = {}
    handles = []
    names = {id(m): n for n, m in model.named_modules()}

    def hook(mod, _inp, out):
        name = names[id(mod)]
        call = calls.get(name, 0)
        calls[name] = call + 1
        for tname, t in _flat_tensors(out):
            key = (name, call, tname)
            tr.outputs[key] = t.detach().to("cpu", torch.float64, copy=True)
            tr.dtypes[("out",) + key] = t.dtype
            tr.order.append((name, type(mod).__name__, call, tname))
            if backward and t.requires_grad:

                def grad_hook(g, key=key, mod=mod):
                    tr.grad_outputs[key] = g.detach().to("cpu", torch.float64, copy=True)
                    tr.dtypes[("grad",) + key] = g.dtype
                    tr.grad_order.append((key[0], type(mod).__name__, key[1], key[2]))

                t.register_hook(grad_hook)

    for _n, m in model.named_modules():
        handles.append(m.register_forward_hook(hook))
    try:
        # The same random numbers for every run (e.g. for random ops inside forward), without
        # disturbing the caller's generator.
        with dispatch_record() as rec, ctx(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if isinstance(inputs, dict):
                out = model(**inputs)
            else:
                out = model(*inputs)
            if backward:
                outs = _flat_tensors(out)
                params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
                diff = [(n, t) for n, t in outs if t.requires_grad]
                if diff and params:
                    gs = []
                    for i, (_n, t) in enumerate(diff):
                        g = torch.Generator().manual_seed(seed + 1000 + i)
                        gs.append(torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype).to(t.device))
                    pg = torch.autograd.grad([t for _, t in diff], [p for _, p in params], gs, allow_unused=True)
                    for (pn, p), g in zip(params, pg):
                        mod, _, leaf = pn.rpartition(".")
                        tr.param_grads[(mod, leaf)] = (
                            (g if g is not None else torch.zeros_like(p)).detach().to("cpu", torch.float64, copy=True)
                        )
                        tr.dtypes[("param", mod, leaf)] = p.dtype
        tr.dispatch = _events(rec)
    finally:
        for h in handles:
            h.remove()
    return tr


def _model_dtype_device(model: nn.Module, inputs) -> tuple[torch.dtype, torch.device]:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype, p.device
    for _n, t in _flat_tensors(inputs if not isinstance(inputs, dict) else list(inputs.values())):
        return t.dtype, t.device
    return torch.get_default_dtype(), torch.device("cpu")


def check_model(
    model: nn.Module,
    inputs,
    backends: Iterable[BackendSpec] | None = None,
    backward: bool = True,
    seed: int = 0,
    budget_factor: float = 1.0,
    include_torch: bool = True,
    name: str | None = None,
) -> ModelReport:
    """Model-level parity: runs `model` (never modified: each backend gets a deep copy) on
    `inputs` (a tensor, a tuple/list of positional arguments, or a dict of keyword arguments)
    forward and, with `backward`, backward from a seeded random gradient, under each backend
    (default: the available backends for the model's device; names, 'torch' or (name,
    context-factory) pairs), and compares every submodule's outputs, the gradients reaching
    them, and every parameter gradient with a float64 copy run with the reference backend.
    With `include_torch`, a 'torch' row gives PyTorch's same-dtype errors (the budget baseline).
    Put models with dropout in eval() mode: random numbers differ between dtypes."""
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    dtype, device = _model_dtype_device(model, inputs)
    report = ModelReport(name or type(model).__name__, str(dtype).replace("torch.", ""), str(device))

    model64 = copy.deepcopy(model).to(device="cpu", dtype=torch.float64)
    inputs64 = _map_tensors(
        inputs, lambda t: t.detach().to("cpu", torch.float64) if t.is_floating_point() else t.to("cpu")
    )
    oracle = _trace(model64, inputs64, backward, seed, lambda: use_backend("reference"))
    del model64

    baseline = None
    if include_torch:
        baseline = _trace(copy.deepcopy(model), inputs, backward, seed, reference.torch_ops)
    specs = _resolve(backends, device)
    for bname, ctx in ([("torch", reference.torch_ops)] if include_torch else []) + specs:
        res = ModelBackendResult(bname)
        t0 = time.perf_counter()
        try:
            tr = (
                baseline
                if (bname == "torch" and baseline is not None)
                else _trace(copy.deepcopy(model), inputs, backward, seed, ctx)
            )
        except Exception as e:  # noqa: BLE001 - reported per backend
            res.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            res.seconds = time.perf_counter() - t0
            report.results.append(res)
            continue
        res.seconds = time.perf_counter() - t0
        res.dispatch = tr.dispatch
        res.note = _dispatch_note(bname, tr.dispatch)
        res.entries = _compare_traces(tr, oracle, baseline, budget_factor)
        report.results.append(res)
    return report


def _compare_traces(tr: _Trace, oracle: _Trace, base: _Trace | None, factor) -> list[ModuleEntry]:
    entries = []
    types = {}
    for i, (mod, typ, call, tname) in enumerate(tr.order):
        key = (mod, call, tname)
        types[mod] = typ
        if key not in oracle.outputs:
            continue
        dt = tr.dtypes[("out",) + key]
        if dt not in BUDGETS:
            continue
        err = tensor_error(
            tname,
            tr.outputs[key],
            oracle.outputs[key],
            dt,
            base.outputs.get(key) if base else None,
            factor,
            check_dtype=False,
        )
        entries.append(ModuleEntry(i, mod, typ, call, "output", tname, err))
    # Backward: gradients reaching module outputs, in the order backward produced them;
    # each module's parameter gradients right after the gradient of its (last) output call.
    pending = {}
    for mod, _p in tr.param_grads:
        pending.setdefault(mod, []).append(_p)
    last_call = {}
    for mod, _typ, call, _t in tr.order:
        last_call[mod] = max(call, last_call.get(mod, 0))
    done_params = set()

    def add_params(mod):
        for p in pending.get(mod, []):
            key = (mod, p)
            if key in done_params or key not in oracle.param_grads:
                continue
            done_params.add(key)
            dt = tr.dtypes[("param",) + key]
            if dt not in BUDGETS:
                continue
            err = tensor_error(
                p,
                tr.param_grads[key],
                oracle.param_grads[key],
                dt,
                base.param_grads.get(key) if base else None,
                factor,
                check_dtype=False,
            )
            entries.append(ModuleEntry(len(entries), mod, types.get(mod, "?"), 0, "param_grad", p, err))

    for mod, typ, call, tname in tr.grad_order:
        key = (mod, call, tname)
        if key in oracle.grad_outputs and tr.dtypes[("grad",) + key] in BUDGETS:
            err = tensor_error(
                tname,
                tr.grad_outputs[key],
                oracle.grad_outputs[key],
                tr.dtypes[("grad",) + key],
                base.grad_outputs.get(key) if base else None,
                factor,
                check_dtype=False,
            )
            entries.append(ModuleEntry(len(entries), mod, typ, call, "grad_output", tname, err))
        if call == 0:  # backward reaches the first call last: all of this module's uses are summed
            add_params(mod)
    for mod in pending:  # parameters used outside hooked calls, or modules without grad_output
        add_params(mod)
    return entries
