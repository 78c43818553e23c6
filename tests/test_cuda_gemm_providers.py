"""The native CUDA backend's two GEMM providers give the same op: cuBLASLt with the bias/ReLU epilogue fused
(the default where the build found cuBLASLt) and the own kernels of csrc/cuda/kernels/gemm.cuh
(XKERNELS_CUDA_GEMM=native, read once per process, so that side runs in a child process). Each is checked
against float64 torch with the same budget as tests/test_cuda.py, forward and every gradient, on shapes with
odd sizes and the decode-sized M = 1.

Needs an NVIDIA GPU and the native CUDA backend; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import xkernels
from xkernels.tolerances import within_budget

import _backends

pytestmark = pytest.mark.cuda

SHAPES = [(1, 64, 96), (7, 33, 65), (130, 257, 96)]  # (M, N, K)
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.fixture(autouse=True, scope="module")
def _cuda_available():
    _backends.get("cuda")


def check_linear(M, N, K, dtype, bias=True):
    """fused_linear_relu forward and its three gradients against float64 torch (budget relative to torch's
    own error in `dtype`); raises AssertionError naming what failed."""
    g = torch.Generator().manual_seed(M * 131 + N * 7 + K)
    x64, w64 = torch.randn(M, K, generator=g, dtype=torch.float64), torch.randn(N, K, generator=g, dtype=torch.float64)
    b64 = torch.randn(N, generator=g, dtype=torch.float64) if bias else None
    dy64 = torch.randn(M, N, generator=g, dtype=torch.float64)
    dev = torch.device("cuda")

    def run(fn, dt):
        x, w = (t.to(dev, dt).requires_grad_() for t in (x64, w64))
        b = b64.to(dev, dt).requires_grad_() if bias else None
        y = fn(x, w, b)
        grads = torch.autograd.grad(y, [x, w] + ([b] if bias else []), dy64.to(dev, dt))
        return [y.detach(), *grads]

    def torch_fn(x, w, b):
        return torch.relu(torch.nn.functional.linear(x, w, b))

    with xkernels.use_backend("cuda"):
        ours = run(xkernels.fused_linear_relu, dtype)
    same = run(torch_fn, dtype)
    ref = run(torch_fn, torch.float64)
    for name, o, s, r in zip(["output", "grad_input", "grad_weight", "grad_bias"], ours, same, ref):
        ok, err, budget = within_budget(o, s, r, dtype, scope="cuda_op")
        assert ok, f"fused_linear_relu {name} [{dtype}, M={M} N={N} K={K}]: error {err:.3e} > budget {budget:.3e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_default_provider(shape, dtype):
    check_linear(*shape, dtype)
    check_linear(*shape, dtype, bias=False)


def test_native_provider_in_child():
    """The own GEMM kernels, forced by XKERNELS_CUDA_GEMM=native, for every shape and dtype."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {here!r})
        import torch
        from test_cuda_gemm_providers import SHAPES, DTYPES, check_linear
        for shape in SHAPES:
            for dtype in DTYPES:
                check_linear(*shape, dtype)
                check_linear(*shape, dtype, bias=False)
        print("native provider: all checks passed")
        """
    )
    env = dict(os.environ, XKERNELS_CUDA_GEMM="native")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "all checks passed" in p.stdout
