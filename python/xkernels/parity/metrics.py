"""Error measures of one tensor against the float64 oracle: max abs / rel error, ULPs of the
dtype, and the relative-to-torch budget (``xkernels.tolerances``, policy 2)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from ..tolerances import BUDGETS, UNIT_ROUNDOFF, Budget, budget_for

__all__ = ["BUDGETS", "Budget", "budget_for", "TensorError", "tensor_error", "mantissa_bits", "min_exponent"]


def mantissa_bits(dtype: torch.dtype) -> int:
    """Explicit mantissa bits of `dtype`, from its unit roundoff 2^-(bits+1) in xkernels.tolerances."""
    return -round(math.log2(UNIT_ROUNDOFF[dtype])) - 1


def min_exponent(dtype: torch.dtype) -> int:
    """The exponent of the smallest normal number of `dtype` (torch.finfo's tiny = 2^emin)."""
    return round(math.log2(torch.finfo(dtype).tiny))


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
    if d.numel() == 0 or bool(d.isfinite().all()):  # the usual case: no NaN/Inf in x or r
        return d
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
    torch_max_abs: float | None = None,
) -> TensorError:
    """Measures `x` (a backend's result) against the float64 oracle `r`, with the budget of
    `dtype` relative to `torch_result` (PyTorch's same-dtype result), if given. With
    `check_dtype`, `x` must have dtype `dtype` (results traced as float64 copies pass False).
    `torch_max_abs`: PyTorch's error max|t - r| where it is known already (instead of `torch_result`)."""
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
    absr = r.abs()
    scale = float(absr.max()) if r.numel() else 0.0
    if not math.isfinite(scale):  # NaN/Inf in the oracle: the magnitude of its finite part
        finite_r = absr[absr.isfinite()]
        scale = float(finite_r.max()) if finite_r.numel() else 0.0
    if x.numel() == 0:
        err = torch.zeros(0, dtype=torch.float64)
    else:
        err = _abs_err(x, r)
    max_abs = float(err.max()) if err.numel() else 0.0
    mant, emin = mantissa_bits(dtype), min_exponent(dtype)
    if err.numel():
        floor = max(scale * 2.0**-mant, 2.0 ** (emin - mant))
        mag = absr.nan_to_num(nan=0.0, posinf=0.0).clamp_min(floor)
        ulp = torch.exp2(torch.floor(torch.log2(mag)).clamp_min(emin) - mant)
        max_ulp = float((err / ulp).max())
        max_rel = float((err / mag).max())
    else:
        max_ulp = max_rel = 0.0
    t_err = torch_max_abs  # PyTorch's error measured already (several results share one baseline)
    if torch_result is not None and torch_result.numel():
        t_err = float(_abs_err(torch_result, r).max())
    elif torch_result is not None:
        t_err = 0.0
    allowed = budget.allowed(t_err if t_err is not None and math.isfinite(t_err) else 0.0, scale, budget_factor)
    wrong_dtype = check_dtype and x.dtype != dtype
    return TensorError(
        name,
        list(x.shape),
        str(x.dtype if wrong_dtype else dtype).replace("torch.", ""),
        max_abs,
        max_rel,
        max_ulp,
        scale,
        t_err,
        allowed,
        not wrong_dtype and max_abs <= allowed,
        f"dtype {x.dtype} != expected {dtype}" if wrong_dtype else note,
    )
