"""Arguments with the right NUMBER of elements in the wrong SHAPE are rejected (a check on numel alone
would let them through and read them in the wrong order): conv2d_relu's residual, layer_norm's weight and
bias, through the Python functions and the ops directly (the C++ checks)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels


@pytest.mark.parametrize("shape", [(1, 2, 4, 2), (1, 4, 2, 2), (16,)], ids=str)
@pytest.mark.parametrize("direct", [False, True], ids=["function", "op"])
def test_conv2d_relu_residual_shape(backend, shape, direct):
    x, w, b = torch.randn(1, 3, 4, 6), torch.randn(2, 3, 3, 3), torch.randn(2)  # output [1, 2, 2, 4]
    r = torch.randn(shape)
    assert r.numel() == 16
    if direct:
        call = lambda: torch.ops.xkernels.conv2d_relu(x, w, b, [1, 1], [0, 0], [1, 1], 1, r)  # noqa: E731
    else:
        call = lambda: xkernels.conv2d_relu(x, w, b, residual=r)  # noqa: E731
    with pytest.raises(ValueError, match=r"xkernels\.conv2d_relu: argument 'residual' must have the output's shape"):
        call()


@pytest.mark.parametrize("which", ["weight", "bias"])
@pytest.mark.parametrize("shape", [(3, 2), (6,)], ids=str)
def test_layer_norm_parameter_shape(backend, which, shape):
    x = torch.randn(4, 2, 3)
    p = torch.randn(shape)
    with pytest.raises(RuntimeError):  # PyTorch rejects it too
        F.layer_norm(x, [2, 3], **{which: p})
    for call in (
        lambda: xkernels.layer_norm(x, [2, 3], **{which: p}),
        lambda: torch.ops.xkernels.layer_norm_forward(
            x, [2, 3], p if which == "weight" else None, p if which == "bias" else None, 1e-5
        ),
    ):
        with pytest.raises(ValueError, match=rf"xkernels\.layer_norm\w*: argument '{which}' must have shape"):
            call()
