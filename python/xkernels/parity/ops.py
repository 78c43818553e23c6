"""Op-level parity: one op (an xkernels op or any callable with a PyTorch reference function),
forward and backward, on every backend, against the float64 oracle."""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import ops as _ops
from .. import reference
from ..backends import dispatch_record
from .dispatch import BackendSpec, _backend_context, _dispatch_note, _events, _resolve, ran_elsewhere
from .metrics import TensorError, tensor_error
from .report import _console, _fmt, _fmt_ratio, _verdict

__all__ = ["BackendResult", "OpReport", "check_op"]


@dataclass
class BackendResult:
    backend: str
    device: str
    tensors: list[TensorError] = field(default_factory=list)
    error: str | None = None
    dispatch: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    @property
    def dispatch_ok(self) -> bool:
        return not ran_elsewhere(self.backend, self.dispatch)

    @property
    def passed(self) -> bool:
        return self.error is None and self.dispatch_ok and all(t.passed for t in self.tensors)

    def worst(self) -> TensorError | None:
        return max(self.tensors, key=lambda t: t.budget_used, default=None)

    def as_dict(self) -> dict:
        return {
            "backend": self.backend,
            "device": self.device,
            "passed": self.passed,
            "error": self.error,
            "note": self.note,
            "seconds": self.seconds,
            "tensors": [t.as_dict() for t in self.tensors],
            "dispatch": self.dispatch,
        }


@dataclass
class OpReport:
    op: str
    case: str
    dtype: str
    device: str
    results: list[BackendResult] = field(default_factory=list)
    torch_error: str | None = None  # PyTorch itself failed in this dtype (no baseline)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def as_dict(self) -> dict:
        return {
            "op": self.op,
            "case": self.case,
            "dtype": self.dtype,
            "device": self.device,
            "passed": self.passed,
            "torch_error": self.torch_error,
            "results": [r.as_dict() for r in self.results],
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.as_dict(), **kw)

    def table(self):
        from rich.table import Table

        t = Table(title=f"{self.op} {self.case} {self.dtype} on {self.device}", title_justify="left")
        for col in ("backend", "tensor", "max abs", "max rel", "ULPs", "x torch", "budget", "result"):
            t.add_column(col, justify="left" if col in ("backend", "tensor", "result") else "right")
        for r in self.results:
            if r.error:
                t.add_row(r.backend, "-", "", "", "", "", "", f"[red]ERROR[/] {r.error}")
                continue
            for i, e in enumerate(r.tensors):
                t.add_row(
                    r.backend if i == 0 else "",
                    e.name,
                    _fmt(e.max_abs),
                    _fmt(e.max_rel),
                    _fmt(e.max_ulp, 1),
                    _fmt_ratio(e.ratio_to_torch),
                    _fmt(e.budget),
                    _verdict(e.passed, e.note),
                )
            if r.note:
                t.add_row("", "[dim]dispatch[/]", "", "", "", "", "", f"[dim]{r.note}[/]")
        return t

    def print(self, console=None) -> None:
        _console(console).print(self.table())


def _grad_output_for(out: Tensor, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(out.shape, generator=g, dtype=torch.float64).to(dtype=out.dtype, device=out.device)


def _run_op(
    op: str,
    call_args: dict,
    diff_names: list[str],
    grads: bool,
    gout: Tensor | None,
    fn: Callable | None = None,
    positional: bool = False,
):
    """Runs the op (xkernels by default) on fresh leaves; returns (output, {name: grad}).
    With `positional`, the arguments are passed in order (a custom op and its reference function
    need not name them alike)."""
    fn = fn or getattr(_ops, op)
    args = dict(call_args)
    leaves = []
    for n in diff_names:
        leaf = args[n].detach().clone(memory_format=torch.preserve_format).requires_grad_(grads)
        args[n] = leaf
        leaves.append(leaf)
    out = fn(*args.values()) if positional else fn(**args)
    if not grads:
        return out.detach(), {}
    g = gout if gout is not None else _grad_output_for(out, 0)
    gs = torch.autograd.grad(out, leaves, g, allow_unused=True)
    return out.detach(), {
        f"grad_{n}": (gr if gr is not None else torch.zeros_like(args[n])) for n, gr in zip(diff_names, gs)
    }


def check_op(
    op: str | Callable,
    *args,
    backends: Iterable[BackendSpec] | None = None,
    grads: bool = True,
    grad_output: Tensor | None = None,
    seed: int = 0,
    budget_factor: float = 1.0,
    case: str | None = None,
    reference_fn: Callable | None = None,
    **kwargs,
) -> OpReport:
    """Runs xkernels op `op` ('fused_linear_relu', 'conv2d' or 'layer_norm') with the given
    arguments (as for ``xkernels.<op>``) on every available backend for the inputs' device (or
    `backends`: names, 'torch', or (name, context-factory) pairs), forward and — with `grads`
    — backward with respect to every floating-point tensor argument, and measures every result
    against the float64 oracle. `grad_output` defaults to a seeded standard normal tensor.
    `budget_factor` scales every budget (0 demands exact agreement).

    Any other op: pass the callable (e.g. ``torch.ops.mylib.rms_norm`` or a custom op made with
    ``xkernels.sycl.custom_op``) and `reference_fn`, a function of the same arguments in the same
    order made of PyTorch ops: it gives the float64 oracle (run on float64 CPU copies) and PyTorch's
    same-dtype baseline, and its signature names the arguments. The op runs once, as it dispatches
    (one row, named after the op; `backends` may give (name, context-factory) pairs instead)."""
    if not isinstance(op, str):
        return _check_callable_op(
            op, args, kwargs, reference_fn, backends, grads, grad_output, seed, budget_factor, case
        )
    if reference_fn is not None:
        raise ValueError(
            "xkernels.parity.check_op: 'reference_fn' is for ops given as callables; xkernels ops have their own oracle"
        )
    if op not in reference.FUNCTIONS:
        raise ValueError(f"xkernels.parity.check_op: unknown op '{op}'; known: {', '.join(reference.FUNCTIONS)}")
    sig = inspect.signature(reference.FUNCTIONS[op])
    bound = sig.bind(*args, **kwargs)
    if "relu_mask" in bound.arguments:
        raise ValueError("xkernels.parity.check_op: 'relu_mask' is not an argument of the xkernels op")
    bound.apply_defaults()
    bound.arguments.pop("relu_mask", None)
    call_args = dict(bound.arguments)
    x = call_args["input"]
    dtype, device = x.dtype, x.device
    diff_names = [n for n, v in call_args.items() if isinstance(v, Tensor) and v.is_floating_point()]
    report = _new_report(op, case, call_args, sig, dtype, device)

    # The oracle: float64 on the CPU, from the very same (dtype-rounded) values.
    oracle_args = {k: reference.to_oracle(v) for k, v in call_args.items()}
    fn = reference.FUNCTIONS[op]
    ref_out, _ = _run_op(op, oracle_args, diff_names, False, None, fn=fn)
    g64 = grad_output.detach().to("cpu", torch.float64) if grad_output is not None else _grad_output_for(ref_out, seed)
    gout = g64.to(dtype=dtype, device=device)
    ref_grads = None
    if grads and op != "fused_linear_relu":
        _, ref_grads = _run_op(op, oracle_args, diff_names, True, g64, fn=fn)

    # PyTorch's own result in this dtype and device: the baseline of the budget.
    try:
        torch_out, _ = _run_op(op, call_args, diff_names, False, None, fn=fn)
        torch_grads = None
        if grads and op != "fused_linear_relu":
            _, torch_grads = _run_op(op, call_args, diff_names, True, gout, fn=fn)
    except (RuntimeError, NotImplementedError) as e:  # e.g. a dtype PyTorch lacks on this device
        report.torch_error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        torch_out, torch_grads = None, None

    for name, ctx in _resolve(backends, device):
        res = BackendResult(name, str(device))
        t0 = time.perf_counter()
        try:
            with dispatch_record() as rec, ctx():
                out, got_grads = _run_op(op, call_args, diff_names, grads, gout)
        except Exception as e:  # noqa: BLE001 - reported, never swallowed silently
            res.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            res.seconds = time.perf_counter() - t0
            report.results.append(res)
            continue
        res.seconds = time.perf_counter() - t0
        res.dispatch = _events(rec)
        res.note = _dispatch_note(name, res.dispatch)
        res.tensors.append(tensor_error("output", out, ref_out, dtype, torch_out, budget_factor))
        if grads:
            r_grads, t_grads, note = ref_grads, torch_grads, ""
            if op == "fused_linear_relu":
                # The backward is defined by the op's own output (grad flows where output > 0).
                mask = out > 0
                flips = int((mask.cpu() != (ref_out > 0)).sum())
                note = f"relu mask differs from float64 at {flips} element(s)" if flips else ""
                m_args = dict(oracle_args, relu_mask=mask.cpu())
                _, r_grads = _run_op(op, m_args, diff_names, True, g64, fn=fn)
                if torch_out is not None:
                    _, t_grads = _run_op(op, dict(call_args, relu_mask=mask), diff_names, True, gout, fn=fn)
            for gname, gval in got_grads.items():
                res.tensors.append(
                    tensor_error(
                        gname, gval, r_grads[gname], dtype, t_grads[gname] if t_grads else None, budget_factor, note
                    )
                )
        report.results.append(res)
    return report


def _op_name(op: Callable) -> str:
    for attr in ("_qualified_op_name", "_name"):
        v = getattr(op, attr, None)
        if isinstance(v, str):
            if attr == "_name" and isinstance(getattr(op, "_namespace", None), str):
                return f"{op._namespace}::{v}"
            return v
    return getattr(op, "__qualname__", None) or getattr(op, "__name__", None) or type(op).__name__


def _check_callable_op(
    op: Callable, args, kwargs, reference_fn, backends, grads, grad_output, seed, budget_factor, case
) -> OpReport:
    """check_op for an op given as a callable, against `reference_fn` (see check_op)."""
    name = _op_name(op)
    if not callable(op):
        raise TypeError(f"xkernels.parity.check_op: 'op' must be an xkernels op name or a callable, got {op!r}")
    if reference_fn is None or not callable(reference_fn):
        raise ValueError(
            f"xkernels.parity.check_op: op '{name}' is not an xkernels op: pass reference_fn=, a "
            "function of the same arguments made of PyTorch ops (the float64 oracle and the baseline)"
        )
    sig = inspect.signature(reference_fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"xkernels.parity.check_op: the arguments do not fit reference_fn{sig}: {e}") from None
    bound.apply_defaults()
    call_args = dict(bound.arguments)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        raise TypeError("xkernels.parity.check_op: reference_fn must name its arguments (no *args / **kwargs)")
    first = next((v for v in call_args.values() if isinstance(v, Tensor) and v.is_floating_point()), None)
    if first is None:
        raise ValueError(f"xkernels.parity.check_op: op '{name}' got no floating-point tensor argument")
    dtype, device = first.dtype, first.device
    diff_names = [n for n, v in call_args.items() if isinstance(v, Tensor) and v.is_floating_point()]
    report = _new_report(name, case, call_args, sig, dtype, device)
    oracle_args = {k: reference.to_oracle(v) for k, v in call_args.items()}
    ref_out, _ = _run_op(name, oracle_args, diff_names, False, None, fn=reference_fn, positional=True)
    g64 = grad_output.detach().to("cpu", torch.float64) if grad_output is not None else _grad_output_for(ref_out, seed)
    gout = g64.to(dtype=dtype, device=device)
    ref_grads = (
        _run_op(name, oracle_args, diff_names, True, g64, fn=reference_fn, positional=True)[1] if grads else None
    )
    try:
        torch_out, torch_grads = _run_op(name, call_args, diff_names, grads, gout, fn=reference_fn, positional=True)
    except (RuntimeError, NotImplementedError) as e:
        report.torch_error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        torch_out, torch_grads = None, None
    specs = [_backend_context(b) for b in backends] if backends is not None else [(name, contextlib.nullcontext)]
    for bname, ctx in specs:
        res = BackendResult(bname, str(device))
        t0 = time.perf_counter()
        try:
            with dispatch_record() as rec, ctx():
                out, got_grads = _run_op(name, call_args, diff_names, grads, gout, fn=op, positional=True)
        except Exception as e:  # noqa: BLE001 - reported, never swallowed silently
            res.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            res.seconds = time.perf_counter() - t0
            report.results.append(res)
            continue
        res.seconds = time.perf_counter() - t0
        res.dispatch = _events(rec)
        res.note = _dispatch_note(bname, res.dispatch)
        res.tensors.append(tensor_error("output", out, ref_out, dtype, torch_out, budget_factor))
        for gname, gval in got_grads.items():
            res.tensors.append(
                tensor_error(
                    gname, gval, ref_grads[gname], dtype, torch_grads[gname] if torch_grads else None, budget_factor
                )
            )
        report.results.append(res)
    return report


def _new_report(name, case, call_args, sig, dtype, device) -> OpReport:
    """The empty report of one op check: `case` or the case string built from the arguments."""
    case = case if case is not None else _case_string(name, call_args, sig)
    return OpReport(name, case, str(dtype).replace("torch.", ""), str(device))


def _case_string(op: str, call_args: dict, sig: inspect.Signature) -> str:
    parts = []
    for k, v in call_args.items():
        if isinstance(v, Tensor):
            s = "x".join(map(str, v.shape)) if v.dim() else "scalar"
            if v.dim() == 4 and not v.is_contiguous() and v.is_contiguous(memory_format=torch.channels_last):
                s += ",cl"
            elif not v.is_contiguous():
                s += ",strided"
            parts.append(f"{k}={s}" if k != "input" else s)
        elif v is None or k == "normalized_shape":
            continue
        elif v != sig.parameters[k].default:
            parts.append(f"{k}={v}")
    return " ".join(parts)
