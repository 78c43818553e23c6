"""Facts about the dtypes xkernels computes in, written once for the Python side (the C++ side's are in
csrc/include/xkernels/dispatch.h): which dtypes, the dtype each accumulates in, and each float format.

Every op computes float64, float32, float16 and bfloat16 tensors; float16/bfloat16/float32 accumulate in
float32 and float64 in float64, rounding once when an element is stored (layer_norm's saved mean / rstd are
kept in the accumulation dtype). Used by xkernels.ops (fakes), xkernels.reference and xkernels.tolerances.
"""

from __future__ import annotations

import torch

# The dtypes xkernels computes in (every op, every backend).
DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

# Explicit mantissa (fraction) bits p - 1 of each format, and its smallest normal exponent.
MANTISSA_BITS: dict[torch.dtype, int] = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
MIN_EXPONENT: dict[torch.dtype, int] = {
    torch.float64: -1022,
    torch.float32: -126,
    torch.float16: -14,
    torch.bfloat16: -126,
}


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype results of `dtype` are accumulated in (and layer_norm's statistics kept in): float64 for
    float64, float32 for the others."""
    return torch.float64 if dtype == torch.float64 else torch.float32


ACC_DTYPE: dict[torch.dtype, torch.dtype] = {d: accumulation_dtype(d) for d in DTYPES}
# Unit roundoff 2^-p of each dtype (round to nearest).
UNIT_ROUNDOFF: dict[torch.dtype, float] = {d: 2.0 ** -(MANTISSA_BITS[d] + 1) for d in DTYPES}
# Largest integer up to which every integer is exactly representable (2^p).
EXACT_INT_LIMIT: dict[torch.dtype, int] = {d: 2 ** (MANTISSA_BITS[d] + 1) for d in DTYPES}

__all__ = [
    "ACC_DTYPE",
    "DTYPES",
    "EXACT_INT_LIMIT",
    "MANTISSA_BITS",
    "MIN_EXPONENT",
    "UNIT_ROUNDOFF",
    "accumulation_dtype",
]
