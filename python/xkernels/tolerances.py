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
float64 is the exception: two float64 computations of the same formula on the same values differ by
summation order only, about n * 2^-53 * (sum of |terms|) ~ 1e-13 for the reductions of the tests, so
they agree within FLOAT64_SAME_FORMULA = 1e-12 (scaled by terms / ELEMENTWISE_TERMS above that), two
orders tighter than the 1e-10 against torch's float64 oracle (which may use another formula). The
same number bounds layer_norm's saved float64 statistics against their float64 definition
(``statistics(dtype)``; float32 statistics: the float32 elementwise rtol).

xkernels against PyTorch's own result in the same dtype (``against_torch(dtype)``): drop-in module
checks and model rewrites compare with the torch module rather than a float64 oracle. For the short
reductions (at most ELEMENTWISE_TERMS terms) and normalizations (layer_norm: the output error does not
grow with the row length) of those tests both sides are a few ulps from the truth, well inside the
elementwise tolerance, so it is used as is (not doubled as between backends). Special cases, each
with its reason next to it below: MODEL_AGAINST_TORCH (whole models, batch statistics),
COMPILED_VS_EAGER, ``after_sgd_step(lr)``, LOSS_AFTER_TRAINING_REL.

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

``budget_for(dtype, scope)`` also holds the policy-2 budgets of single-op tests, tighter than the
whole-model default (scope "parity") where those tests always were: "cuda_op" (tests/test_cuda.py),
"cpu_layer_norm" (tests/test_sycl_runtime.py), "sycl_on_cuda" and "sycl_on_cuda_grad"
(tests/test_sycl_on_cuda.py); see OP_BUDGETS for each one's numbers and reasons.

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

from .dtypes import ACC_DTYPE, DTYPES, EXACT_INT_LIMIT, UNIT_ROUNDOFF

# ------------------------------------------------------------------------------- policy 1: elementwise

# The dtypes xkernels computes in (every op, every backend; xkernels.dtypes), each with its tolerances below.

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


# Two float64 computations of the same formula on the same values (two backends; saved statistics
# against their definition): summation order only, ~1e-13 for the tests' reductions (module docstring).
FLOAT64_SAME_FORMULA = 1e-12


def between_backends(dtype: torch.dtype, terms: int | None = None) -> tuple[float, float]:
    """(rtol, atol) for two backends' results in `dtype` compared with each other: twice elementwise(),
    and FLOAT64_SAME_FORMULA for float64 (scaled by terms / ELEMENTWISE_TERMS beyond that length)."""
    if dtype == torch.float64:
        tol = FLOAT64_SAME_FORMULA * max(1.0, (terms or 0) / ELEMENTWISE_TERMS)
        return tol, tol
    rtol, atol = elementwise(dtype, terms)
    return 2 * rtol, 2 * atol


def statistics(stat_dtype: torch.dtype) -> float:
    """Relative tolerance of layer_norm's saved mean / rstd (kept in the accumulation dtype `stat_dtype`)
    against the float64 mean / variance of the same dtype-rounded input: FLOAT64_SAME_FORMULA in
    float64 (the same formula, summation order only), the float32 elementwise rtol in float32."""
    return FLOAT64_SAME_FORMULA if stat_dtype == torch.float64 else ELEMENTWISE[torch.float32][0]


def against_torch(dtype: torch.dtype, terms: int | None = None) -> tuple[float, float]:
    """(rtol, atol) for an xkernels result against PyTorch's own result in `dtype` on the same inputs
    (short reductions and normalizations; see the module docstring): elementwise(dtype, terms)."""
    return elementwise(dtype, terms)


# A whole model (several layers: optimize() rewrites, BatchNorm folding followed by training) or batch
# statistics over N*H*W terms (BatchNorm running mean / var), float32, against the same computation by
# torch: summation-order differences compound over layers and long reductions to ~1e-4 relative (about
# 1700 float32 eps); values that cancel to ~0 keep the float32 elementwise atol.
MODEL_AGAINST_TORCH: tuple[float, float] = (1e-4, ELEMENTWISE[torch.float32][1])

# torch.compile(model) against the same model run eagerly, float32: both run the same xkernels kernels on
# the same values; only the ops the compiler generates around them (flatten, ReLU, the backward of sum)
# may round differently, by a few ulps with no long reduction redone: the float32 elementwise rtol and
# an atol 10x below its atol (8 ulps at 1).
COMPILED_VS_EAGER: tuple[float, float] = (ELEMENTWISE[torch.float32][0], ELEMENTWISE[torch.float32][1] / 10)

# The final loss of two float32 training runs (xkernels vs torch, 15 SGD steps) relative to each other:
# a pre-activation within rounding distance of 0 flips a ReLU in one run and not the other, after which
# two correct runs drift apart; 2% still tells a run that trains from one that does not.
LOSS_AFTER_TRAINING_REL = 0.02


def after_sgd_step(lr: float, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    """(rtol, atol) for parameters after one SGD step of learning rate `lr`, xkernels vs torch: p - lr * g
    where the gradients agree within elementwise(dtype), so the atol is lr times its atol."""
    rtol, atol = elementwise(dtype)
    return rtol, lr * atol


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


# Policy-2 budgets of single-op tests, by scope (budget_for(dtype, scope)). Each is no looser than what
# its tests always checked; where one is tighter than BUDGETS it is said why.
OP_BUDGETS: dict[str, dict[torch.dtype, Budget]] = {
    # tests/test_cuda.py: one op on CUDA against cuBLAS / cuDNN / aten on CUDA. float64: torch's CUDA
    # float64 result is not the oracle, so 4x its error counts; the floor is FLOAT64_SAME_FORMULA
    # (single ops, reductions of at most a few thousand terms; 1e-10 is for whole models).
    "cuda_op": {**BUDGETS, torch.float64: Budget(rtol_torch=4.0, atol_rel=FLOAT64_SAME_FORMULA)},
    # tests/test_sycl_runtime.py: layer_norm on the CPU against aten's CPU layer_norm, rows of at most
    # 1000 terms normalized to O(1). Both sides accumulate float32 in float32 and differ by summation
    # order only: 2x torch's error plus ~34 float32 eps (2e-6) of the magnitude; float64: the same
    # formula in float64 (FLOAT64_SAME_FORMULA).
    "cpu_layer_norm": {
        **BUDGETS,
        torch.float64: Budget(rtol_torch=2.0, atol_rel=FLOAT64_SAME_FORMULA),
        torch.float32: Budget(rtol_torch=2.0, atol_rel=2e-6),
    },
    # tests/test_sycl_on_cuda.py: the SYCL kernels on an NVIDIA GPU against the float64 oracle alone (no
    # torch term): 1e-4 (float32) / 1e-10 (float64) of the magnitude for outputs of reductions of up to
    # 286 terms, and 10x that for the gradients (sums over the batch and every pixel). That path needs
    # the oneAPI CUDA plugin and a GPU and has not run on a machine of this project yet, so its floors
    # stay as the test was written; tighten them from the first real run.
    "sycl_on_cuda": {
        torch.float64: Budget(rtol_torch=0.0, atol_rel=1e-10),
        torch.float32: Budget(rtol_torch=0.0, atol_rel=1e-4),
    },
    "sycl_on_cuda_grad": {
        torch.float64: Budget(rtol_torch=0.0, atol_rel=1e-9),
        torch.float32: Budget(rtol_torch=0.0, atol_rel=1e-3),
    },
}


def budget_for(dtype: torch.dtype, scope: str = "parity") -> Budget:
    """The relative-to-torch error budget (policy 2) for `dtype`: the whole-model default ("parity", the
    parity harness and benchmarks) or a single-op test's scope of OP_BUDGETS."""
    table = BUDGETS if scope == "parity" else OP_BUDGETS.get(scope)
    if table is None:
        raise ValueError(f"xkernels.tolerances: no budget scope {scope!r}; known: parity, {', '.join(OP_BUDGETS)}")
    try:
        return table[dtype]
    except KeyError:
        raise ValueError(
            f"xkernels.parity: no error budget for dtype {dtype}; known: {', '.join(str(d) for d in table)}"
        ) from None


# layer_norm of rows with mean ~1e15 and a spread of 1 (float64) / 1e9 (float32), tests/test_hostile.py:
# cancellation makes every algorithm lose most digits here, so the result must be as accurate as
# PyTorch's: within 2x PyTorch's own error (~0.16 in float64, ~0.07 in float32 on the test's rows, where
# the xkernels backends reach ~0.04 / ~0.03), or within a floor of the O(1) output for rows where
# PyTorch's error happens to be tiny.
HUGE_MEAN_LAYER_NORM_RTOL_TORCH = 2.0
HUGE_MEAN_LAYER_NORM_FLOOR: dict[torch.dtype, float] = {torch.float64: 1e-6, torch.float32: 1e-2}


def huge_mean_layer_norm_allowed(dtype: torch.dtype, torch_err: float) -> float:
    """Allowed max error of the huge-mean layer_norm case: max(2x PyTorch's error, the dtype's floor)."""
    return max(HUGE_MEAN_LAYER_NORM_RTOL_TORCH * torch_err, HUGE_MEAN_LAYER_NORM_FLOOR[dtype])


def max_error(actual: torch.Tensor, expected_f64: torch.Tensor) -> float:
    """max|actual - expected| in float64 on the CPU (0 for empty tensors)."""
    if expected_f64.numel() == 0:
        return 0.0
    a = actual.detach().cpu().to(torch.float64)
    return float((a - expected_f64.detach().cpu().to(torch.float64)).abs().max())


def within_budget(
    actual: torch.Tensor,
    torch_same: torch.Tensor | None,
    expected_f64: torch.Tensor,
    dtype: torch.dtype,
    scope: str = "parity",
) -> tuple[bool, float, float]:
    """Policy 2 for one tensor: (passed, error, allowed). `torch_same` is PyTorch's own result in `dtype`
    (None: PyTorch's error counts as 0, only the floor applies); the magnitude floor uses max(1, max|r|);
    `scope`: see budget_for."""
    err = max_error(actual, expected_f64)
    torch_err = 0.0 if torch_same is None else max_error(torch_same, expected_f64)
    scale = max(1.0, float(expected_f64.detach().abs().max()) if expected_f64.numel() else 0.0)
    allowed = budget_for(dtype, scope).allowed(torch_err, scale)
    return err <= allowed, err, allowed


# ------------------------------------------------------------------------------ rigorous bounds

# Unit roundoff of each dtype (UNIT_ROUNDOFF), the dtype each accumulates in (ACC_DTYPE) and the largest integer
# up to which every integer is exact (EXACT_INT_LIMIT): xkernels.dtypes, imported above.
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
    "COMPILED_VS_EAGER",
    "ELEMENTWISE",
    "ELEMENTWISE_TERMS",
    "EXACT_INT_LIMIT",
    "FLOAT64_SAME_FORMULA",
    "HUGE_MEAN_LAYER_NORM_FLOOR",
    "HUGE_MEAN_LAYER_NORM_RTOL_TORCH",
    "LOSS_AFTER_TRAINING_REL",
    "MODEL_AGAINST_TORCH",
    "OP_BUDGETS",
    "UNIT_ROUNDOFF",
    "after_sgd_step",
    "against_torch",
    "assert_close",
    "between_backends",
    "budget_for",
    "elementwise",
    "huge_mean_layer_norm_allowed",
    "max_error",
    "statistics",
    "u_acc",
    "u_out",
    "within_budget",
]
