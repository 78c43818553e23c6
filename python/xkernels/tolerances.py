"""Error tolerances: the one place every error budget of xkernels lives.

The tests, the parity harness (``xkernels.parity``) and the benchmarks all take their tolerances
from here. There are two named policies, plus the floating-point facts the rigorous error bounds
of the property-based and hostile-input tests are built from.

Policy 1 -- ELEMENTWISE (``elementwise(dtype)``): per-dtype (rtol, atol)
-------------------------------------------------------------------------
Every numerical test computes the op in `dtype` and compares with a float64 oracle
(torch.nn.functional in float64 on the *same* inputs, i.e. the low-precision inputs cast
up), so the only error measured is the op's own: its accumulation error plus the final
rounding of each result to `dtype`. All xkernels backends accumulate float16/bfloat16/float32
in float32 and float64 in float64, and round once when storing an element.

The check is elementwise |actual - expected| <= atol + rtol * |expected|.

rtol covers the final rounding to `dtype` (round-to-nearest: at most half an ulp, i.e.
2^-p relative for a p-bit significand), with a factor of 2 to spare:
  float16  (p = 11): 2^-11 = 4.9e-4  -> rtol 1e-3
  bfloat16 (p =  8): 2^-8  = 3.9e-3  -> rtol 8e-3
  float32  (p = 24): 2^-24 = 6.0e-8  -> negligible next to the accumulation error below
  float64  (p = 53): 2^-53 = 1.1e-16 -> likewise

atol covers the accumulation error, which matters where a sum cancels to a small result
(relative error is unbounded there). For reductions of at most ELEMENTWISE_TERMS (200)
terms of O(1) magnitude (randn inputs) the float32 accumulation error is a few 1e-6 (about
n * 2^-24 * |partial sums|), so atol = rtol = 1e-5 for float32 keeps a margin of several times
while still catching any indexing bug (those give O(1) errors). float16 and bfloat16 use their
rtol also as atol: their accumulation is float32 as well, and an element that rounds to a tiny
value is off by at most its own (even tinier) ulp. float64 uses 1e-10: the same reasoning with
2^-53 gives ~1e-13, and torch's float64 oracle has its own rounding.

Longer reductions (``elementwise(dtype, terms=n)``): the worst-case accumulation error grows
linearly with the number of terms, so the float32 accumulation atol is scaled by
n / ELEMENTWISE_TERMS; a float16/bfloat16 result keeps the larger of that and its own atol (its
final rounding). float64's atol is ~1000x its estimate above and is not scaled.

Two backends compared with each other (``between_backends(dtype)``): each result is within the
elementwise tolerance of the float64 truth, so by the triangle inequality they agree within twice it.

Integer-valued inputs small enough that every product and partial sum is an exactly
representable integer (tests that say "exact") are compared with equality instead.

Policy 2 -- RELATIVE TO TORCH (``budget_for(dtype)``): the parity budget
--------------------------------------------------------------------------
For a tensor with float64 oracle ``r`` and PyTorch's own same-dtype result ``t``::

    max|x - r| <= rtol_torch * max|t - r| + atol_rel * max|r|

a backend may be a small multiple of PyTorch's own error, plus a floor of a few ULPs of the
tensor's magnitude (PyTorch's error can be accidentally tiny, and float64's is zero by
construction, since the oracle is PyTorch). Why these numbers (eps = the dtype's machine epsilon):
  float16/bfloat16: kernels accumulate in float32 and round once, so the error is dominated by
    that final rounding, as PyTorch's is: 2x PyTorch's error plus ~1 ULP of the largest value
    (float16 eps 9.8e-4, bfloat16 eps 7.8e-3).
  float32: the reference kernels sum sequentially in float32 while PyTorch uses blocked/FMA
    BLAS, so a correct kernel can be several times PyTorch's error: 4x plus ~84 eps of the
    magnitude (1e-5) -- an indexing or precision bug (e.g. a half-precision intermediate) is
    orders of magnitude above.
  float64: PyTorch *is* the oracle (its error is 0): only the floor counts, 1e-10
    relative to the magnitude, generous for any summation order.
The floors are the elementwise rtol of policy 1 (one number per dtype for both).

Rigorous bounds (property-based and hostile-input tests)
--------------------------------------------------------
Each result must lie within a floating-point error bound around the float64 result:
  output rounding  2 u_out |y|   +   accumulation  BOUND_SAFETY * n * u_acc * (the same computation on |x|)
where n is the reduction length and u the unit roundoff (UNIT_ROUNDOFF) of the output /
accumulation dtype (ACC_DTYPE). BOUND_SAFETY covers the blocked / sub-group summation orders that
differ per backend. EXACT_INT_LIMIT says up to which integer every integer is representable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# ------------------------------------------------------------------------------- policy 1: elementwise

# The dtypes xkernels computes in (every op, every backend), each with its tolerances below.
DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

# dtype -> (rtol, atol); see the module docstring for why.
ELEMENTWISE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (8e-3, 8e-3),
}

# The reduction length the elementwise atol is sized for.
ELEMENTWISE_TERMS = 200


def elementwise(dtype: torch.dtype, terms: int | None = None) -> tuple[float, float]:
    """(rtol, atol) for results computed in `dtype`; `terms`: the reduction length where it exceeds
    ELEMENTWISE_TERMS (see the module docstring)."""
    rtol, atol = ELEMENTWISE[dtype]
    if terms is not None and terms > ELEMENTWISE_TERMS and dtype != torch.float64:
        acc_atol = ELEMENTWISE[torch.float32][1] * terms / ELEMENTWISE_TERMS
        atol = max(atol, acc_atol)
    return rtol, atol


def between_backends(dtype: torch.dtype, terms: int | None = None) -> tuple[float, float]:
    """(rtol, atol) for two backends' results in `dtype` compared with each other: twice elementwise()."""
    rtol, atol = elementwise(dtype, terms)
    return 2 * rtol, 2 * atol


def assert_close(
    actual: torch.Tensor, expected_f64: torch.Tensor, dtype: torch.dtype, what: str, *, terms: int | None = None
) -> None:
    """Asserts `actual` (computed in `dtype`) matches the float64 oracle `expected_f64` (policy 1).

    Checks dtype and shape exactly and values elementwise within elementwise(dtype, terms); NaN only
    where the oracle has NaN. `what` names the compared quantity in the failure message."""
    assert expected_f64.dtype == torch.float64, f"{what}: the oracle must be float64, got {expected_f64.dtype}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected_f64.shape, (
        f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected_f64.shape)}"
    )
    rtol, atol = elementwise(dtype, terms)
    torch.testing.assert_close(
        actual.detach().cpu().to(torch.float64),
        expected_f64.detach().cpu(),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        msg=lambda m: f"{what} ({dtype}, rtol={rtol}, atol={atol}):\n{m}",
    )


# ------------------------------------------------------------------------- policy 2: relative to torch


@dataclass(frozen=True)
class Budget:
    """Allowed error for one dtype: max|x - r| <= rtol_torch * torch_err + atol_rel * max|r|."""

    rtol_torch: float
    atol_rel: float

    def allowed(self, torch_err: float, scale: float, factor: float = 1.0) -> float:
        return factor * (self.rtol_torch * torch_err + self.atol_rel * scale)


_RTOL_TORCH = {torch.float64: 4.0, torch.float32: 4.0, torch.float16: 2.0, torch.bfloat16: 2.0}

BUDGETS: dict[torch.dtype, Budget] = {
    dt: Budget(rtol_torch=_RTOL_TORCH[dt], atol_rel=ELEMENTWISE[dt][0]) for dt in ELEMENTWISE
}


def budget_for(dtype: torch.dtype) -> Budget:
    """The relative-to-torch error budget (policy 2) for `dtype`."""
    try:
        return BUDGETS[dtype]
    except KeyError:
        raise ValueError(
            f"xkernels.parity: no error budget for dtype {dtype}; known: {', '.join(str(d) for d in BUDGETS)}"
        ) from None


def max_error(actual: torch.Tensor, expected_f64: torch.Tensor) -> float:
    """max|actual - expected| in float64 on the CPU (0 for empty tensors)."""
    if expected_f64.numel() == 0:
        return 0.0
    a = actual.detach().cpu().to(torch.float64)
    return float((a - expected_f64.detach().cpu().to(torch.float64)).abs().max())


def within_budget(
    actual: torch.Tensor, torch_same: torch.Tensor | None, expected_f64: torch.Tensor, dtype: torch.dtype
) -> tuple[bool, float, float]:
    """Policy 2 for one tensor: (passed, error, allowed). `torch_same` is PyTorch's own result in `dtype`
    (None: PyTorch's error counts as 0, only the floor applies); the magnitude floor uses max(1, max|r|)."""
    err = max_error(actual, expected_f64)
    torch_err = 0.0 if torch_same is None else max_error(torch_same, expected_f64)
    scale = max(1.0, float(expected_f64.detach().abs().max()) if expected_f64.numel() else 0.0)
    allowed = budget_for(dtype).allowed(torch_err, scale)
    return err <= allowed, err, allowed


# ------------------------------------------------------------------------------ rigorous bounds

# Unit roundoff of each dtype, and the dtype each accumulates in (README: half types in float32).
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
ACC_DTYPE = {
    torch.float64: torch.float64,
    torch.float32: torch.float32,
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
}
# Largest integer up to which every integer is exactly representable (2^digits).
EXACT_INT_LIMIT = {torch.float64: 2**53, torch.float32: 2**24, torch.float16: 2**11, torch.bfloat16: 2**8}
# Multiplies every accumulation bound: blocked/sub-group summation orders differ per backend.
BOUND_SAFETY = 4.0


def u_out(dtype: torch.dtype) -> float:
    """Unit roundoff of results stored in `dtype`."""
    return UNIT_ROUNDOFF[dtype]


def u_acc(dtype: torch.dtype) -> float:
    """Unit roundoff of the type `dtype` results are accumulated in."""
    return UNIT_ROUNDOFF[ACC_DTYPE[dtype]]


__all__ = [
    "ACC_DTYPE",
    "DTYPES",
    "BOUND_SAFETY",
    "BUDGETS",
    "Budget",
    "ELEMENTWISE",
    "ELEMENTWISE_TERMS",
    "EXACT_INT_LIMIT",
    "UNIT_ROUNDOFF",
    "assert_close",
    "between_backends",
    "budget_for",
    "elementwise",
    "max_error",
    "u_acc",
    "u_out",
    "within_budget",
]
