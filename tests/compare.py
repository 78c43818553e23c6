"""Forward + backward comparison of an xkernels op against a float64 torch oracle."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from xkernels.tolerances import assert_close


def randn(*shape, dtype: torch.dtype) -> torch.Tensor:
    """Standard-normal values drawn in float32 and rounded to `dtype` (same values for every dtype
    up to that rounding, and the oracle sees exactly the rounded values)."""
    return torch.randn(*shape).to(dtype)


def small_ints(*shape, dtype: torch.dtype = torch.float32, bound: int = 3) -> torch.Tensor:
    """Integers in [-bound, bound]: products and sums stay exact in float32 for the test sizes."""
    return torch.randint(-bound, bound + 1, shape).to(dtype)


def memory_formats(t: torch.Tensor) -> tuple[bool, bool]:
    """(contiguous, channels_last-contiguous) — compared instead of raw strides, which may differ in
    size-1 dimensions between two tensors of the same format."""
    return t.is_contiguous(), t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)


def strided_like_grad(t: torch.Tensor) -> torch.Tensor:
    """The same values as `t` in a non-contiguous layout (last two dims swapped in memory)."""
    if t.dim() < 2:
        return t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def check_forward_backward(
    op: Callable[..., torch.Tensor],
    oracle: Callable[..., torch.Tensor],
    tensors: Sequence[torch.Tensor | None],
    names: Sequence[str],
    dtype: torch.dtype,
    what: str,
    *,
    noncontiguous_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs op(*tensors) and oracle(*tensors cast to float64); compares the outputs, then the
    gradients of every given tensor for one random grad_output. Tensors keep their layout
    (strides, storage offset) on the op side. Returns (output, oracle output)."""
    ours = [None if t is None else t.detach().requires_grad_(True) for t in tensors]
    ref = [None if t is None else t.detach().to(torch.float64).requires_grad_(True) for t in tensors]
    out = op(*ours)
    expected = oracle(*ref)
    assert_close(out, expected, dtype, f"{what}: output")

    grad_out = randn(*out.shape, dtype=dtype)
    if noncontiguous_grad:
        grad_out = strided_like_grad(grad_out)
    pairs = [(n, a, b) for n, a, b in zip(names, ours, ref) if a is not None]
    grads = torch.autograd.grad(out, [a for _, a, _ in pairs], grad_out)
    ref_grads = torch.autograd.grad(expected, [b for _, _, b in pairs], grad_out.to(torch.float64), allow_unused=True)
    for (name, a, _), g, rg in zip(pairs, grads, ref_grads):
        if rg is None:  # the oracle's output does not depend on it (e.g. empty output)
            rg = torch.zeros(a.shape, dtype=torch.float64)
        assert_close(g, rg, dtype, f"{what}: grad of {name}")
    return out, expected
