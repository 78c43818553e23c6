"""ReLU keeps NaN (as torch.relu) on every kernel path of the fused ops, not only the small-shape one.

fused_linear_relu runs a dot-product kernel up to 96 rows and a register-blocked panel GEMM above
(csrc/sycl/fused_linear_relu.cpp, kDotMaxRows), the pre-packed op the panel GEMM too; conv2d_relu runs
the channel-lane GEMM or, for depthwise-like layers, the group-lane one. A NaN input element must give
NaN exactly where torch.relu(F.linear / F.conv2d) does, on each of them, and the rest must match."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import assert_close


@pytest.mark.parametrize("M", [3, 97, 200], ids=lambda m: f"M{m}")
def test_fused_linear_relu_nan(backend, M):
    x, w, b = torch.randn(M, 33), torch.randn(70, 33), torch.randn(70)
    x[M // 2, 5] = float("nan")  # row M // 2 of the output: all NaN
    out = xkernels.fused_linear_relu(x, w, b)
    expected = torch.relu(F.linear(x.double(), w.double(), b.double()))
    assert torch.equal(out.isnan(), expected.isnan()) and out[M // 2].isnan().all()
    assert_close(out, expected, torch.float32, f"fused_linear_relu M={M} with a NaN row")


@pytest.mark.parametrize("M", [3, 200], ids=lambda m: f"M{m}")
def test_fused_linear_relu_packed_nan(cpu_backend, M):
    x, w, b = torch.randn(M, 33), torch.randn(70, 33), torch.randn(70)
    x[1, 0] = float("nan")
    out = xkernels.fused_linear_relu_packed(x, xkernels.pack_linear_weight(w), b, 70)
    expected = torch.relu(F.linear(x.double(), w.double(), b.double()))
    assert torch.equal(out.isnan(), expected.isnan()) and out[1].isnan().all()
    assert_close(out, expected, torch.float32, f"fused_linear_relu_packed M={M} with a NaN row")


@pytest.mark.parametrize("groups", [1, 8], ids=["dense", "depthwise"])
def test_conv2d_relu_nan(backend, groups):
    x, w, b = torch.randn(2, 8, 9, 9), torch.randn(16, 8 // groups, 3, 3), torch.randn(16)
    x[1, 3, 4, 4] = float("nan")
    out = xkernels.conv2d_relu(x, w, b, padding=1, groups=groups)
    expected = torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=groups))
    assert out.isnan().any() and torch.equal(out.isnan(), expected.isnan())
    assert_close(out, expected, torch.float32, f"conv2d_relu groups={groups} with a NaN input")
