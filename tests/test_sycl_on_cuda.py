"""SYCL kernels on CUDA tensors (docs/oneapi.md): with native CUDA built and the oneAPI CUDA plugin present,
`use_backend("sycl")` runs the SYCL kernels on CUDA tensors on torch's current stream. Checked here: every op,
forward and backward, against float64 torch; stream order on a non-default stream with long work queued
before the op; the dispatch record naming sycl; and that the native default is untouched.

Needs an NVIDIA GPU, xkernels built with the native CUDA and SYCL backends, and the SYCL runtime's CUDA adapter;
every test is skipped, with the reason, otherwise (the case on every machine this project has run on).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import within_budget

_B = xkernels.backends()


def _why_not() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    if not _B["cuda"].available:
        return f"native CUDA backend unavailable: {_B['cuda'].reason}"
    if not _B["sycl"].available:
        return f"SYCL backend unavailable: {_B['sycl'].reason}"
    if not any(d.get("backend") == "cuda" and d.get("usable") for d in _B["sycl"].devices):
        return "the SYCL runtime lists no usable CUDA device (the oneAPI CUDA plugin is not installed)"
    return None


pytestmark = [pytest.mark.cuda, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).cuda()


def _close(ours, ref64, scope="sycl_on_cuda"):
    """Max error against the float64 oracle within the floor of xkernels.tolerances' `scope` (no torch term)."""
    ok, err, allowed = within_budget(ours, None, ref64, ours.dtype, scope=scope)
    assert ok, f"max error {err:.3e} > {allowed:.3e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_every_op_forward_backward(dtype):
    x, w, b = _rand(64, 96, dtype=dtype), _rand(80, 96, seed=1, dtype=dtype), _rand(80, seed=2, dtype=dtype)
    img, k = _rand(2, 8, 13, 11, seed=3, dtype=dtype), _rand(12, 8, 3, 3, seed=4, dtype=dtype)
    ln_w, ln_b = _rand(96, seed=5, dtype=dtype), _rand(96, seed=6, dtype=dtype)
    for t in (x, w, b, img, k, ln_w, ln_b):
        t.requires_grad_(True)
    with xkernels.use_backend("sycl"), xkernels.dispatch_record() as rec:
        outs = [
            xkernels.fused_linear_relu(x, w, b),
            xkernels.conv2d(img, k, None, stride=1, padding=1),
            xkernels.layer_norm(x, (96,), ln_w, ln_b, 1e-5),
        ]
        sum(o.sum() for o in outs).backward()
    assert {backend for (_op, backend, _dev) in rec.counts()} == {"sycl"}  # backward included
    grads = [t.grad.clone() for t in (x, w, b, img, k, ln_w, ln_b)]
    p = [t.detach().double().requires_grad_(True) for t in (x, w, b, img, k, ln_w, ln_b)]
    refs = [
        torch.relu(F.linear(p[0], p[1], p[2])),
        F.conv2d(p[3], p[4], None, 1, 1),
        F.layer_norm(p[0], (96,), p[5], p[6], 1e-5),
    ]
    sum(r.sum() for r in refs).backward()
    for o, r in zip(outs, refs):
        _close(o.detach(), r.detach())
    for g, q in zip(grads, p):
        _close(g, q.grad, scope="sycl_on_cuda_grad")


def test_runs_in_order_on_a_non_default_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = _rand(2048, 2048)
        x = x @ x  # long work queued before the op on the same stream; a missing dependency reads stale x
        with xkernels.use_backend("sycl"):
            y = xkernels.layer_norm(x, (2048,))
        ref = F.layer_norm(x.double(), (2048,))
    torch.cuda.synchronize()
    _close(y, ref)


def test_native_cuda_stays_the_default():
    x, w = _rand(8, 16), _rand(4, 16, seed=1)
    with xkernels.dispatch_record() as rec:
        xkernels.fused_linear_relu(x, w, None)
    assert {backend for (_op, backend, _dev) in rec.counts()} == {"cuda"}
