"""Every launch mode of the native CUDA layer_norm kernels (csrc/cuda/layer_norm_launch.h), executed on the CPU by
the simulator of csrc/cuda/compile_check/cpu_sim.h (tests/_cuda_sim.py), against float64 torch: the
register-row kernels (16-byte vectors; a warp per row with 1, 2, 4 or 8 vectors per lane, a block of 256 or
1024 threads per row) and the general kernels they fall back to (a row that is not a whole number of vectors,
a pointer that is not 16-byte aligned). Forward, the saved statistics and every gradient.

Needs no GPU, only the host C++ compiler and CUDA's headers (skipped with the reason without them).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xkernels.tolerances import assert_close

import _cuda_sim

# (id, dtype, N): which kernel layer_norm_launch.h picks, for 16-byte vectors of V = 16 / itemsize elements.
SHAPES = [
    ("warp-1vec", torch.float32, 4 * 32),
    ("warp-2vec", torch.float32, 4 * 64),
    ("warp-8vec-partial", torch.float32, 4 * 250),
    ("block256-2vec", torch.float32, 4 * 257),
    ("block1024-4vec", torch.float32, 4 * 2049),
    ("warp-4vec-bf16", torch.bfloat16, 8 * 100),
    ("block256-1vec-half", torch.float16, 8 * 256 + 8),
    ("warp-8vec-f64", torch.float64, 2 * 256),
    ("general-not-whole-vectors", torch.float32, 4 * 40 + 1),
    ("general-long-row", torch.float32, 4 * 1024 * 8 + 4),
]


@pytest.fixture(scope="module", autouse=True)
def _simulator():
    if _cuda_sim.cuda_include_dir() is None:
        pytest.skip("CUDA headers (cuda_runtime.h) not found (CUDA_HOME, nvcc, /usr/local/cuda): simulator not built")
    _cuda_sim.build()
    _cuda_sim.configure()


def _run(x, w, b, dy):
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = _cuda_sim.SimulatedCuda.layer_norm(xs, [x.shape[-1]], ws, bs, 1e-5)
    grads = torch.autograd.grad(y, [xs, ws, bs], dy)
    return y.detach(), grads


def _oracle(x, w, b, dy):
    xs, ws, bs = (t.detach().double().requires_grad_() for t in (x, w, b))
    y = F.layer_norm(xs, [x.shape[-1]], ws, bs, 1e-5)
    grads = torch.autograd.grad(y, [xs, ws, bs], dy.double())
    return y.detach(), grads


@pytest.mark.parametrize("name,dtype,N", SHAPES, ids=[s[0] for s in SHAPES])
def test_layer_norm_launch_modes(name, dtype, N):
    g = torch.Generator().manual_seed(N)
    M = 3
    x = (torch.randn(M, N, generator=g) * 3 + 1).to(dtype)
    w, b = torch.randn(N, generator=g).to(dtype), torch.randn(N, generator=g).to(dtype)
    dy = torch.randn(M, N, generator=g).to(dtype)
    y, grads = _run(x, w, b, dy)
    ey, egrads = _oracle(x, w, b, dy)
    assert_close(y, ey, dtype, f"layer_norm[{name}] output")
    for what, got, exp in zip(("grad_input", "grad_weight", "grad_bias"), grads, egrads):
        assert_close(got, exp, dtype, f"layer_norm[{name}] {what}")


def test_layer_norm_unaligned_rows_use_the_general_kernels():
    """A contiguous input at an odd element offset is not 16-byte aligned: the general kernels run, same results."""
    g = torch.Generator().manual_seed(7)
    N = 4 * 64
    storage = torch.randn(3 * N + 1, generator=g)
    x = storage[1:].view(3, N)
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    w, b, dy = torch.randn(N, generator=g), torch.randn(N, generator=g), torch.randn(3, N, generator=g)
    xs = x.detach().requires_grad_()
    y = _cuda_sim.SimulatedCuda.layer_norm(xs, [N], w, b, 1e-5)
    (gx,) = torch.autograd.grad(y, [xs], dy)
    ey, egrads = _oracle(x, w, b, dy)
    assert_close(y.detach(), ey, torch.float32, "layer_norm[unaligned] output")
    assert_close(gx, egrads[0], torch.float32, "layer_norm[unaligned] grad_input")
