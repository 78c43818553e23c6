"""Memory: 10,000 calls per op (forward and backward) and backend leave resident memory flat.

Each (op, backend) runs in a fresh child process so that other tests' allocations do not blur the
measurement: warm-up calls first (kernel compilation, allocator caches, autograd graph pools), then
RSS is sampled before and after the 10,000 calls. A leak of even 100 bytes per call would show as
~1 MB; the limit allows a few MB of allocator noise.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from _reliability import backend_params, child_env, describe_result, require_op

CALLS = 10_000
WARMUP = 1_000
LIMIT_BYTES = 4 * 2**20

CHILD = r"""
import gc, json, os, sys, torch, xkernels
torch.set_num_threads(1)
backend, op, calls, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dev = torch.device("cuda" if backend == "cuda" else "cpu")
g = torch.Generator().manual_seed(0)
def t(*s):
    return torch.randn(*s, generator=g).to(dev).requires_grad_(True)
if op == "fused_linear_relu":
    args = (t(4, 16), t(8, 16), t(8)); f = lambda: xkernels.fused_linear_relu(*args)
elif op == "conv2d":
    args = (t(1, 2, 6, 6), t(4, 2, 3, 3), t(4)); f = lambda: xkernels.conv2d(*args, padding=1)
else:
    args = (t(4, 32), t(32), t(32)); f = lambda: xkernels.layer_norm(args[0], [32], args[1], args[2])
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def step():
    y = f()
    y.backward(torch.ones_like(y))
    for a in args:
        a.grad = None
with xkernels.use_backend(backend):
    for _ in range(warmup):
        step()
    gc.collect()
    r0 = rss()
    samples = []
    for i in range(calls):
        step()
        if i % 1000 == 999:
            samples.append(rss())
    gc.collect()
    r1 = rss()
print(json.dumps({"before": r0, "after": r1, "samples": samples}))
"""


@pytest.mark.parametrize("op", ["fused_linear_relu", "conv2d", "layer_norm"])
@pytest.mark.parametrize("backend", backend_params())
def test_resident_memory_stays_flat(backend, op):
    require_op(backend, op)
    r = subprocess.run([sys.executable, "-c", CHILD, backend, op, str(CALLS), str(WARMUP)], capture_output=True,
                       text=True, timeout=900, env=child_env(OMP_NUM_THREADS=1))
    assert r.returncode == 0, describe_result(r)
    m = json.loads(r.stdout.strip().splitlines()[-1])
    grew = m["after"] - m["before"]
    mb = [round((s - m["before"]) / 2**20, 2) for s in m["samples"]]
    assert grew <= LIMIT_BYTES, (
        f"{op} on {backend}: resident memory grew by {grew / 2**20:.2f} MiB over {CALLS} forward+backward calls "
        f"(growth every 1000 calls, MiB: {mb})")
    # and no steady climb: the last samples are no higher than the middle ones plus noise
    assert m["samples"][-1] - m["samples"][len(m["samples"]) // 2] <= LIMIT_BYTES // 2, (
        f"{op} on {backend}: memory still climbing (MiB per 1000 calls: {mb})")
