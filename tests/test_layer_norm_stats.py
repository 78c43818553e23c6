"""layer_norm's saved statistics for rows far from zero (|mean| / std = 5e5 in float32, 1e13 in float64).

The two-pass formula computes the variance about the computed mean mu and corrects it by the mean of the
deviations: var = (sum d^2 - (sum d)^2 / N) / N, d = x - mu. mu is off the exact mean by up to half an
ulp of the mean, which here is a sizeable fraction of the std; without the correction the variance grows
by that offset squared (1e-4 relative here, against 1e-5 allowed for float32 statistics). The
deviations themselves are exact (x and mu are within a factor 2), so the corrected rstd is accurate to
a few ulps. (The normalized output carries the mean's offset to first order, for every algorithm,
so only the statistics are compared here.)"""

from __future__ import annotations

import pytest
import torch

from xkernels.tolerances import statistics

OFFSET = {torch.float32: 5e5, torch.float64: 1e13}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("N", [64, 1000], ids=lambda n: f"N{n}")
def test_rstd_far_from_zero(backend, dtype, N):
    gen = torch.Generator().manual_seed(N)
    x = (OFFSET[dtype] + torch.randn(16, N, generator=gen, dtype=torch.float64)).to(dtype)
    eps = 1e-5
    _, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [N], None, None, eps)
    # The oracle on the rows shifted by their first element (exact: x and x[0] are within a factor 2),
    # where the float64 two-pass sums lose nothing (torch's var of the unshifted rows is ~1e-9 off here).
    x64 = x.double()
    shifted = x64 - x64[:, :1]
    ref_mean = x64[:, :1] + shifted.mean(-1, keepdim=True)
    ref_rstd = (shifted.var(-1, unbiased=False, keepdim=True) + eps).rsqrt()
    tol = statistics(mean.dtype)
    torch.testing.assert_close(mean.double(), ref_mean, rtol=tol, atol=0)
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=tol, atol=0)
