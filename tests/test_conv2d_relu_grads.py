"""conv2d_relu's gradients against PyTorch's autograd of torch.relu(F.conv2d(...) + residual) in float64:
with only some of the four tensors requiring grad (the first layer of a network: the input does not),
and with NaN / Inf in the forward output, where torch's ReLU backward (threshold_backward) lets the
gradient through a NaN (NaN <= 0 is false) and an +Inf, and blocks it at -Inf -> 0."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import assert_close

NAMES = ("input", "weight", "bias", "residual")


def _tensors(dtype, seed=0):
    """Drawn on the CPU (the same values on every backend), then on torch's default device (the backend's)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 4, 6, 5), (6, 2, 3, 3), (6,), (2, 6, 6, 5), (2, 6, 6, 5)]
    dev = torch.get_default_device()
    return tuple(torch.randn(s, generator=g, dtype=torch.float64, device="cpu").to(dtype).to(dev) for s in shapes)


ARGS = dict(stride=1, padding=(1, 1), dilation=1, groups=2)


def _ours_and_torch(tensors, want, dy):
    """Runs xkernels.conv2d_relu and the float64 torch oracle with the tensors of `want` requiring grad;
    returns (ours leaves, ours output, torch leaves, torch output)."""
    ours = [t.clone().requires_grad_(n in want) for n, t in zip(NAMES, tensors)]
    ref = [t.double().requires_grad_(n in want) for n, t in zip(NAMES, tensors)]
    out = xkernels.conv2d_relu(ours[0], ours[1], ours[2], **ARGS, residual=ours[3])
    expected = torch.relu(F.conv2d(ref[0], ref[1], ref[2], **ARGS) + ref[3])
    if want:
        out.backward(dy)
        expected.backward(dy.double())
    return ours, out, ref, expected


WANTS = ["weight", "bias", "weight+bias", "input", "residual", "input+residual", "weight+residual"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("needs", WANTS)
def test_partial_requires_grad(backend, needs, dtype):
    """Only the requested gradients exist, and each equals torch's (weight/bias alone: the first layer)."""
    want = needs.split("+")
    x, w, b, r, dy = _tensors(dtype)
    ours, out, ref, expected = _ours_and_torch((x, w, b, r), want, dy)
    assert out.requires_grad
    assert_close(out, expected.detach(), dtype, "conv2d_relu output")
    for n, a, e in zip(NAMES, ours, ref):
        if n in want:
            assert a.grad is not None, f"grad of {n} missing with requires_grad={want}"
            assert_close(a.grad, e.grad, dtype, f"grad of {n} (requires_grad: {needs})")
        else:
            assert a.grad is None, f"grad of {n} computed but not requested ({needs})"


def test_nothing_requires_grad(backend):
    x, w, b, r, _ = _tensors(torch.float32)
    out = xkernels.conv2d_relu(x, w, b, **ARGS, residual=r)
    assert not out.requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("where", ["residual", "input"])
def test_grads_through_nan_and_inf(backend, where, dtype):
    """The forward output holds NaN, +Inf and -Inf (from the residual, or a NaN input element): every
    gradient equals torch's float64 autograd, NaNs in the same places."""
    x, w, b, r, dy = _tensors(dtype, seed=1)
    if where == "residual":
        r[0, 0, 1, 1] = float("nan")
        r[0, 1, 2, 3] = float("inf")
        r[1, 2, 4, 4] = float("-inf")
        r[1, 5, 0, 0] = float("nan")
    else:
        x[1, 3, 2, 2] = float("nan")  # NaN output on a 3x3 patch of channels 3..5 of batch 1
    want = list(NAMES)
    ours, out, ref, expected = _ours_and_torch((x, w, b, r), want, dy)
    assert out.isnan().any(), "the case must put NaN into the output"
    if where == "residual":
        assert out[0, 1, 2, 3] == float("inf") and out[1, 2, 4, 4] == 0
    assert_close(out, expected.detach(), dtype, "conv2d_relu output")
    for n, a, e in zip(NAMES, ours, ref):
        assert_close(a.grad, e.grad, dtype, f"grad of {n} ({where} holds NaN/Inf)")
    if where == "residual":
        # where the output is NaN the gradient passes (threshold_backward), at -Inf it is blocked
        assert ours[3].grad[0, 0, 1, 1] == dy[0, 0, 1, 1] and ours[3].grad[1, 2, 4, 4] == 0
