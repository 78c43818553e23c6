"""Per-dtype tolerances: the ONE place every test takes them from.

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
(relative error is unbounded there). For the test shapes here — reductions of at most a few
hundred terms of O(1) magnitude (randn inputs) — the float32 accumulation error is a few
1e-6 (about n * 2^-24 * |partial sums|), so atol = rtol = 1e-5 for float32 keeps a margin of
several times while still catching any indexing bug (those give O(1) errors). float16 and
bfloat16 use their rtol also as atol: their accumulation is float32 as well, and an element
that rounds to a tiny value is off by at most its own (even tinier) ulp. float64 uses 1e-10:
the same reasoning with 2^-53 gives ~1e-13, and torch's float64 oracle has its own rounding.

Integer-valued inputs small enough that every product and partial sum is an exactly
representable integer (tests that say "exact") are compared with equality instead.
"""
from __future__ import annotations

import torch

# dtype -> (rtol, atol); see the module docstring for why.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (8e-3, 8e-3),
}

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for results computed in `dtype`."""
    return TOLERANCES[dtype]


def assert_close(actual: torch.Tensor, expected_f64: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Asserts `actual` (computed in `dtype`) matches the float64 oracle `expected_f64`.

    Checks dtype and shape exactly and values elementwise within tolerance(dtype); NaN only
    where the oracle has NaN. `what` names the compared quantity in the failure message."""
    assert expected_f64.dtype == torch.float64, f"{what}: the oracle must be float64, got {expected_f64.dtype}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected_f64.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected_f64.shape)}"
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(
        actual.detach().to(torch.float64),
        expected_f64.detach(),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        msg=lambda m: f"{what} ({dtype}, rtol={rtol}, atol={atol}):\n{m}",
    )
