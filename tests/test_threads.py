"""Threads: many Python threads calling every op (forward and backward) concurrently on every
available backend get the right results, and the first-use kernel compilation happens once per
device, not once per thread."""

from __future__ import annotations

import json
import threading

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import elementwise

import _backends
from _reliability import child_env, describe_result, run_python

pytestmark = pytest.mark.explicit_device  # float64 oracles on the CPU; each thread moves its inputs

THREADS = 8
ITERS = 20
ITERS_SLOW = 3  # slow (conformance) backends: the same concurrency, fewer rounds


def _problems(seed: int):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    lin = (r(5 + seed % 3, 13), r(7, 13), r(7))
    conv = (r(2, 4, 9, 8), r(6, 2, 3, 3), r(6))
    ln = (r(3 + seed % 2, 5, 33), r(33), r(33))
    return lin, conv, ln


def _expected(lin, conv, ln):
    out = {}
    x, w, b = (t.clone().requires_grad_(True) for t in lin)
    y = torch.relu(F.linear(x, w, b))
    out["lin"] = (y.detach(), *torch.autograd.grad(y.sum(), [x, w, b]))
    x, w, b = (t.clone().requires_grad_(True) for t in conv)
    y = F.conv2d(x, w, b, padding=1, groups=2)
    out["conv"] = (y.detach(), *torch.autograd.grad(y.sum(), [x, w, b]))
    x, w, b = (t.clone().requires_grad_(True) for t in ln)
    y = F.layer_norm(x, [33], w, b)
    out["ln"] = (y.detach(), *torch.autograd.grad(y.sum(), [x, w, b]))
    return out


def _run(backend, lin, conv, ln, dtype):
    dev = backend.device
    out = {}
    with xkernels.use_backend(backend):  # per-thread selection
        x, w, b = (t.to(dev, dtype).requires_grad_(True) for t in lin)
        y = xkernels.fused_linear_relu(x, w, b)
        out["lin"] = (y.detach(), *torch.autograd.grad(y.sum(), [x, w, b]))
        x, w, b = (t.to(dev, dtype).requires_grad_(True) for t in conv)
        y = xkernels.conv2d(x, w, b, padding=1, groups=2)
        out["conv"] = (y.detach(), *torch.autograd.grad(y.sum(), [x, w, b]))
        x, w, b = (t.to(dev, dtype).requires_grad_(True) for t in ln)
        y = xkernels.layer_norm(x, [33], w, b)
        out["ln"] = (y.detach(), *torch.autograd.grad(y.sum(), [x, w, b]))
    return out


def test_concurrent_calls_are_correct(backend):
    dtype = torch.float32
    rtol, atol = elementwise(dtype)
    iters = ITERS_SLOW if backend.slow else ITERS
    cases = [_problems(s) for s in range(THREADS)]
    expected = [_expected(*c) for c in cases]
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def worker(i):
        try:
            start.wait()
            for it in range(iters):
                got = _run(backend, *cases[i], dtype)
                for key, tensors in got.items():
                    for j, (a, e) in enumerate(zip(tensors, expected[i][key])):
                        torch.testing.assert_close(
                            a.cpu().double(),
                            e,
                            rtol=rtol,
                            atol=atol,
                            msg=lambda m: f"thread {i} iter {it} {key}[{j}]: {m}",
                        )
        except BaseException as e:  # noqa: BLE001
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "threads hung (deadlock?)"
    assert not errors, "\n".join(errors[:5])


def test_thread_backend_selection_is_per_thread():
    """use_backend in one thread does not leak into another running concurrently."""
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def a():
        with xkernels.use_backend("reference"):
            inside.set()
            release.wait(10)
            seen["a"] = xkernels.current_backend()

    def b():
        inside.wait(10)
        seen["b"] = xkernels.current_backend()
        release.set()

    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start()
    tb.start()
    ta.join(20)
    tb.join(20)
    assert seen["a"] == "reference"
    assert seen["b"] == xkernels._C.default_backend()  # no override in thread b


COMPILE_ONCE_CHILD = r"""
import json, threading, torch, xkernels
from xkernels import _C
barrier = threading.Barrier(16)
errors = []
def work():
    try:
        barrier.wait()
        with xkernels.use_backend("sycl"):
            x = torch.randn(4, 32, requires_grad=True)
            for f in (lambda: xkernels.layer_norm(x, [32]),
                      lambda: xkernels.fused_linear_relu(x, torch.randn(8, 32)),
                      lambda: xkernels.conv2d(torch.randn(1, 2, 5, 5, requires_grad=True), torch.randn(3, 2, 3, 3))):
                f().sum().backward()
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work) for _ in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps({"errors": errors, "builds": _C.sycl.build_log()}))
"""


@pytest.mark.sycl
def test_first_use_compilation_happens_once_per_device(tmp_path):
    """16 threads hit every op (forward and backward) at once in a process with an empty kernel
    cache: each kernel group is built once for the device, not once per thread."""
    _backends.get("sycl")
    r = run_python(
        COMPILE_ONCE_CHILD,
        timeout=600,
        env=child_env(
            XKERNELS_CACHE_DIR=str(tmp_path), SYCL_CACHE_DIR=str(tmp_path / "sycl"), SYCL_CACHE_PERSISTENT="1"
        ),
    )
    assert r.returncode == 0, describe_result(r)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["errors"] == [], out["errors"][:3]
    labels = [label for label, _seconds in out["builds"]]  # "<device>: <kernel group>"
    assert labels, "no kernel group was built"
    dup = {lb: labels.count(lb) for lb in labels if labels.count(lb) > 1}
    assert not dup, f"kernel groups built more than once per device: {dup}"
