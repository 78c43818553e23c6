"""float64 torch.autograd.gradcheck of every op with respect to every differentiable argument:
the backward kernels against finite differences of the forward kernels."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

import xkernels

F64 = torch.float64


def leaf(*shape, **kw):
    return torch.randn(*shape, dtype=F64, **kw).requires_grad_()


@pytest.mark.parametrize("shape,N", [((4, 6), 5), ((2, 3, 7), 3), ((5,), 2)])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_fused_linear_relu(backend, shape, N, with_bias):
    x, w = leaf(*shape), leaf(N, shape[-1])
    b = leaf(N) if with_bias else None
    assert gradcheck(xkernels.fused_linear_relu, (x, w, b))


def test_fused_linear_relu_noncontiguous(backend):
    x = torch.randn(6, 4, dtype=F64).t().requires_grad_()
    w = torch.randn(3, 12, dtype=F64)[:, ::2].requires_grad_()
    assert gradcheck(xkernels.fused_linear_relu, (x, w, leaf(3)))


# (input shape, weight shape, stride, padding, dilation, groups, channels_last)
CONV = {
    "basic": ((2, 3, 5, 6), (4, 3, 3, 3), 1, 1, 1, 1, False),
    "strided_dilated_groups": ((1, 4, 7, 6), (6, 2, 2, 3), (2, 1), (1, 2), (1, 2), 2, False),
    "channels_last": ((2, 3, 5, 4), (2, 3, 2, 2), (1, 2), (0, 1), 1, 1, True),
    "unbatched": ((2, 5, 5), (3, 2, 3, 2), 1, (1, 0), (2, 1), 1, False),
    "same_even_kernel": ((1, 2, 5, 6), (3, 2, 4, 2), 1, "same", 1, 1, False),
    "valid": ((1, 2, 5, 6), (2, 2, 3, 3), (2, 2), "valid", 1, 1, False),
}


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("cfg", CONV.values(), ids=CONV.keys())
def test_conv2d(backend, cfg, with_bias):
    in_shape, w_shape, stride, padding, dilation, groups, channels_last = cfg
    x, w = torch.randn(*in_shape, dtype=F64), torch.randn(*w_shape, dtype=F64)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()
    w.requires_grad_()
    b = leaf(w_shape[0]) if with_bias else None

    def fn(x, w, b):
        return xkernels.conv2d(x, w, b, stride, padding, dilation, groups)

    assert gradcheck(fn, (x, w, b))


LN = {
    "last_dim": ((4, 7), [7]),
    "two_dims": ((2, 3, 4), [3, 4]),
    "one_element_rows": ((3, 1), [1]),
}


@pytest.mark.parametrize("affine", ["weight+bias", "weight", "bias", "none"])
@pytest.mark.parametrize("cfg", LN.values(), ids=LN.keys())
def test_layer_norm(backend, cfg, affine):
    shape, ns = cfg
    x = leaf(*shape)
    w = leaf(*ns) if "weight" in affine else None
    b = leaf(*ns) if "bias" in affine else None

    def fn(x, w, b):
        return xkernels.layer_norm(x, ns, w, b)

    assert gradcheck(fn, (x, w, b))
