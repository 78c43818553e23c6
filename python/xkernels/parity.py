"""Numerical parity harness: every backend against a float64 oracle, with an error budget
relative to PyTorch's own error in the same dtype.

Op level::

    rep = xkernels.parity.check_op("conv2d", x, w, b, padding=1)
    rep.print(); rep.passed; rep.to_json()

runs the op forward and backward on every available backend for the inputs' device (or the
given list), and measures each output and gradient against the float64 oracle
(``xkernels.reference``, i.e. F.linear+relu / F.conv2d / F.layer_norm on float64 CPU copies
of the same inputs): max abs error, max rel error, error in ULPs of the dtype, and the ratio to
PyTorch's own error (the same op run by PyTorch in the inputs' dtype and device, measured
against the same oracle).

Model level::

    rep = xkernels.parity.check_model(model, inputs)

runs the model forward and backward under each backend with hooks on every submodule and
reports, module by module in execution order, where the outputs, the gradients reaching the
module outputs, and the parameter gradients first leave the budget, against a float64 copy of
the model run with the reference backend. A "torch" row (every xkernels op replaced by
PyTorch's own, see ``reference.torch_ops``) gives the same-dtype baseline.

The error budget (``BUDGETS``, one entry per dtype: the relative-to-torch policy of
``xkernels.tolerances``, re-exported here) for a tensor with oracle ``r`` is::

    max|x - r| <= rtol_torch * max|t - r| + atol_rel * max|r|

where ``t`` is PyTorch's same-dtype result: a backend may be a small multiple of PyTorch's
own error, plus a floor of a few ULPs of the tensor's magnitude (PyTorch's error can be
accidentally tiny, and float64's is zero by construction, since the oracle is PyTorch).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from . import ops as _ops
from . import reference
from .backends import DispatchRecord, dispatch_record, use_backend
from .backends import backends as backend_status
from .tolerances import BUDGETS, Budget, budget_for

__all__ = [
    "Budget",
    "BUDGETS",
    "budget_for",
    "tensor_error",
    "TensorError",
    "BackendResult",
    "OpReport",
    "check_op",
    "ModuleEntry",
    "ModelBackendResult",
    "ModelReport",
    "check_model",
    "backends_for_device",
    "ran_elsewhere",
    "summary_table",
    "dispatch_table",
    "print_reports",
    "make_console",
]

# --------------------------------------------------------------------------- float formats

_MANTISSA_BITS = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
_MIN_EXPONENT = {torch.float64: -1022, torch.float32: -126, torch.float16: -14, torch.bfloat16: -126}


def _finite(x: float) -> Any:
    """JSON-safe float (non-finite values as strings)."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


# ----------------------------------------------------------------------------- tensor error


@dataclass
class TensorError:
    """One output or gradient of one backend, against the float64 oracle.

    max_rel and max_ulp are elementwise maxima; elements much smaller than the tensor's
    magnitude are measured at the level of its rounding noise (|r| floored at eps*max|r|),
    so that results that are ~0 by cancellation do not dominate them."""

    name: str
    shape: list
    dtype: str
    max_abs: float
    max_rel: float
    max_ulp: float
    scale: float  # max |oracle|
    torch_max_abs: float | None  # PyTorch's same-dtype error (None when not measured)
    budget: float
    passed: bool
    note: str = ""

    @property
    def ratio_to_torch(self) -> float | None:
        if self.torch_max_abs is None:
            return None
        if self.torch_max_abs == 0:  # float64 (PyTorch is the oracle) or an exact case: undefined
            return None
        return self.max_abs / self.torch_max_abs

    @property
    def budget_used(self) -> float:
        if self.budget == 0:
            return 0.0 if self.max_abs == 0 else math.inf
        return self.max_abs / self.budget

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ratio_to_torch"] = self.ratio_to_torch
        d["budget_used"] = self.budget_used
        return {k: (_finite(v) if isinstance(v, float) else v) for k, v in d.items()}


def _abs_err(x: Tensor, r: Tensor) -> Tensor:
    """|x - r| elementwise in float64; NaN/Inf at the same places in both count as equal,
    anywhere else as an infinite error."""
    x = x.detach().to(device="cpu", dtype=torch.float64)
    d = (x - r).abs()
    same_nonfinite = (x.isnan() & r.isnan()) | (x.isinf() & r.isinf() & (x.sign() == r.sign()))
    d = torch.where(same_nonfinite, torch.zeros_like(d), d)
    return torch.where(d.isnan(), torch.full_like(d, math.inf), d)


def tensor_error(
    name: str,
    x: Tensor,
    r: Tensor,
    dtype: torch.dtype,
    torch_result: Tensor | None = None,
    budget_factor: float = 1.0,
    note: str = "",
    check_dtype: bool = True,
) -> TensorError:
    """Measures `x` (a backend's result) against the float64 oracle `r`, with the budget of
    `dtype` relative to `torch_result` (PyTorch's same-dtype result), if given. With
    `check_dtype`, `x` must have dtype `dtype` (results traced as float64 copies pass False)."""
    r = r.detach().to(device="cpu", dtype=torch.float64)
    if tuple(x.shape) != tuple(r.shape):
        return TensorError(
            name,
            list(x.shape),
            str(dtype).replace("torch.", ""),
            math.inf,
            math.inf,
            math.inf,
            0.0,
            None,
            0.0,
            False,
            f"shape {tuple(x.shape)} != expected {tuple(r.shape)}",
        )
    budget = budget_for(dtype)
    finite_r = r[r.isfinite()]
    scale = float(finite_r.abs().max()) if finite_r.numel() else 0.0
    if x.numel() == 0:
        err = torch.zeros(0, dtype=torch.float64)
    else:
        err = _abs_err(x, r)
    max_abs = float(err.max()) if err.numel() else 0.0
    mant, emin = _MANTISSA_BITS[dtype], _MIN_EXPONENT[dtype]
    if err.numel():
        floor = max(scale * 2.0**-mant, 2.0 ** (emin - mant))
        mag = r.abs().nan_to_num(nan=0.0, posinf=0.0).clamp_min(floor)
        ulp = torch.exp2(torch.floor(torch.log2(mag)).clamp_min(emin) - mant)
        max_ulp = float((err / ulp).max())
        max_rel = float((err / mag).max())
    else:
        max_ulp = max_rel = 0.0
    t_err = None
    if torch_result is not None and torch_result.numel():
        t_err = float(_abs_err(torch_result, r).max())
    elif torch_result is not None:
        t_err = 0.0
    allowed = budget.allowed(t_err if t_err is not None and math.isfinite(t_err) else 0.0, scale, budget_factor)
    if check_dtype and x.dtype != dtype:
        return TensorError(
            name,
            list(x.shape),
            str(x.dtype).replace("torch.", ""),
            max_abs,
            max_rel,
            max_ulp,
            scale,
            t_err,
            allowed,
            False,
            f"dtype {x.dtype} != expected {dtype}",
        )
    return TensorError(
        name,
        list(x.shape),
        str(dtype).replace("torch.", ""),
        max_abs,
        max_rel,
        max_ulp,
        scale,
        t_err,
        allowed,
        max_abs <= allowed,
        note,
    )


# ----------------------------------------------------------------------------- backends

# Which xkernels backends can run tensors of a torch device type.
_BACKENDS_FOR_DEVICE = {"cpu": ("reference", "sycl", "acpp"), "cuda": ("cuda", "sycl"), "xpu": ("sycl",)}

BackendSpec = str | tuple[str, Callable[[], contextlib.AbstractContextManager]]


def backends_for_device(device: torch.device | str) -> list[str]:
    """The available xkernels backends that run tensors on `device`."""
    dev_type = torch.device(device).type
    status = backend_status()
    out = []
    for name in _BACKENDS_FOR_DEVICE.get(dev_type, ()):
        st = status[name]
        if not st.available:
            continue
        if (
            name == "sycl"
            and dev_type == "cuda"
            and not any("cuda" in str(d).lower() or "nvidia" in str(d).lower() for d in st.devices)
        ):
            continue  # SYCL has no CUDA device here
        out.append(name)
    return out


def _backend_context(spec: BackendSpec) -> tuple[str, Callable[[], contextlib.AbstractContextManager]]:
    """(name, context factory) for a backend name, 'torch', or a custom (name, factory) pair
    (a custom pair lets a test or a user plug in an instrumented backend)."""
    if isinstance(spec, tuple):
        return spec
    if spec == "torch":
        return "torch", reference.torch_ops
    return spec, (lambda: use_backend(spec))


def _resolve(backends: Iterable[BackendSpec] | None, device) -> list[tuple[str, Callable]]:
    if backends is None:
        backends = backends_for_device(device)
    return [_backend_context(b) for b in backends]


def _events(rec: DispatchRecord) -> list[dict]:
    return [
        {"op": op, "backend": b, "device": dev, "fallback_reason": why, "calls": n} for op, b, dev, why, n in rec.events
    ]


def ran_elsewhere(requested: str, events: list[dict]) -> list[str]:
    """'op->backend' for every op that ran on another backend than the one requested (a real
    backend name; custom and 'torch' runs request none). A run that did not run where it was
    asked to cannot pass as that backend."""
    if requested not in backend_status():
        return []
    return sorted({f"{e['op']}->{e['backend']}" for e in events if e["backend"] != requested})


def _dispatch_note(requested: str, events: list[dict]) -> str:
    """Says when an op ran somewhere other than on the requested backend, and every fallback."""
    other = ran_elsewhere(requested, events)
    fb = sorted({f"{e['op']}: {e['fallback_reason']}" for e in events if e["fallback_reason"]})
    parts = []
    if other:
        parts.append("ran elsewhere: " + ", ".join(other))
    if fb:
        parts.append("fallbacks: " + "; ".join(fb))
    return " | ".join(parts)


# ----------------------------------------------------------------------------- op level


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


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if digits == 1:
        return f"{x:.2f}" if x < 1 else (f"{x:.1f}" if x < 1e5 else f"{x:.1e}")
    return f"{x:.{digits}e}"


def _fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.2f}" if x < 1000 else f"{x:.1e}"


def _verdict(ok: bool, note: str = "") -> str:
    s = "[green]ok[/]" if ok else "[bold red]FAIL[/]"
    return f"{s} [dim]{note}[/]" if note else s


def _console(console=None):
    if console is not None:
        return console
    return make_console()


def make_console(file=None):
    """A rich console that also reads well in CI logs: no highlighting, and when the output
    is not a terminal, no colour codes and a fixed width ($COLUMNS, default 160) instead of 80."""
    import os

    from rich.console import Console

    c = Console(highlight=False, file=file)
    if not c.is_terminal:
        width = int(os.environ.get("COLUMNS", "160") or 160)
        c = Console(highlight=False, file=file, width=width, no_color=True)
    return c


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
    report = OpReport(
        op,
        case if case is not None else _case_string(op, call_args, sig),
        str(dtype).replace("torch.", ""),
        str(device),
    )

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
    report = OpReport(
        name,
        case if case is not None else _case_string(name, call_args, sig),
        str(dtype).replace("torch.", ""),
        str(device),
    )
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


# ----------------------------------------------------------------------------- model level


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


def _dispatch_summary(events: list[dict]) -> str:
    """'reference: 6 calls (3 ops)' per backend that ran, plus the number of fallbacks."""
    if not events:
        return "no xkernels op ran"
    calls: dict[str, int] = {}
    ops_: dict[str, set] = {}
    fallbacks = 0
    for e in events:
        calls[e["backend"]] = calls.get(e["backend"], 0) + e["calls"]
        ops_.setdefault(e["backend"], set()).add(e["op"])
        fallbacks += e["calls"] if e["fallback_reason"] else 0
    s = ", ".join(f"{b}: {n} calls ({len(ops_[b])} ops)" for b, n in sorted(calls.items()))
    return s + (f", {fallbacks} fallbacks" if fallbacks else "")


def dispatch_table(events: list[dict], title: str = "dispatch record"):
    """Which backend ran each xkernels op (calls), with fallback reasons."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("op", "ran on", "device", "calls", "fallback reason"):
        t.add_column(col, justify="right" if col == "calls" else "left")
    for e in sorted(events, key=lambda e: (e["op"], e["backend"])):
        t.add_row(e["op"], e["backend"], e["device"], str(e["calls"]), e["fallback_reason"] or "-")
    return t


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


# ----------------------------------------------------------------------------- printing


def summary_table(reports: Sequence[OpReport], title: str = "op parity vs float64 oracle"):
    """One row per (case, dtype, backend): forward error and the worst gradient error (both
    with their ratio to PyTorch's), the share of the budget used by the worst tensor, and the
    verdict (naming the failing tensors). Rows are grouped by op (a section per op)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col, just in (
        ("op / case", "left"),
        ("dtype", "left"),
        ("backend", "left"),
        ("fwd err", "right"),
        ("x torch", "right"),
        ("bwd err", "right"),
        ("x torch", "right"),
        ("used", "right"),
        ("result", "left"),
    ):
        t.add_column(col, justify=just)
    current_op = None
    for rep in reports:
        if rep.op != current_op:
            if current_op is not None:
                t.add_section()
            t.add_row(f"[bold]{rep.op}[/]", "", "", "", "", "", "", "", "")
            current_op = rep.op
        case = f"  {rep.case}"
        if not rep.results:
            t.add_row(case, rep.dtype, "-", "", "", "", "", "", "[yellow]no backend[/]")
        for r in rep.results:
            if r.error:
                t.add_row(case, rep.dtype, r.backend, "", "", "", "", "", f"[red]ERROR[/] {r.error}")
                continue
            fwd = next((e for e in r.tensors if e.name == "output"), None)
            bwd = max((e for e in r.tensors if e.name != "output"), key=lambda e: e.budget_used, default=None)
            worst = r.worst()
            fails = [e.name for e in r.tensors if not e.passed] + ([] if r.dispatch_ok else ["ran elsewhere"])
            used = worst.budget_used if worst else 0.0
            t.add_row(
                case,
                rep.dtype,
                r.backend,
                _fmt(fwd.max_abs) if fwd else "",
                _fmt_ratio(fwd.ratio_to_torch) if fwd else "",
                _fmt(bwd.max_abs) if bwd else "-",
                _fmt_ratio(bwd.ratio_to_torch) if bwd else "",
                f"{used:.0%}" if math.isfinite(used) and used < 100 else ">100x",
                _verdict(r.passed, ",".join(fails)),
            )
    return t


def print_reports(reports: Sequence[OpReport], console=None) -> None:
    _console(console).print(summary_table(reports))
