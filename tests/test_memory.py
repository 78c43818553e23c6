"""Memory: repeated calls per op (forward and backward) and backend leave resident memory flat.

Each (op, backend) runs in a fresh child process so that other tests' allocations do not blur the
measurement: warm-up calls first (kernel compilation, allocator caches, autograd graph pools), then
RSS is sampled every INTERVAL calls. The bound is per call: the median growth per interval, divided
by INTERVAL, must stay below LIMIT_BYTES_PER_CALL, so a leak of 100 bytes per call fails (the
limit leaves room for RSS moving in whole pages), while a one-off allocation (an allocator growing
its pool once) moves a single interval and not the median.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from _reliability import child_env, describe_result

pytestmark = pytest.mark.explicit_device  # the child puts its tensors on the backend's device

INTERVAL = 500
INTERVALS = 20  # 10,000 measured calls
INTERVALS_SLOW = 6  # slow (conformance) backends: 3,000 calls; the per-call bound is the same
WARMUP = 1_000
LIMIT_BYTES_PER_CALL = 64

CHILD = r"""
import gc, json, os, sys, torch, xkernels
torch.set_num_threads(1)
backend, dev, op = sys.argv[1], torch.device(sys.argv[2]), sys.argv[3]
interval, intervals, warmup = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
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
    samples = [rss()]
    for _ in range(intervals):
        for _ in range(interval):
            step()
        samples.append(rss())
print(json.dumps({"samples": samples}))
"""


@pytest.mark.parametrize("op", ["fused_linear_relu", "conv2d", "layer_norm"])
def test_resident_memory_stays_flat(backend, op):
    intervals = INTERVALS_SLOW if backend.slow else INTERVALS
    argv = [backend.name, backend.device.type, op, str(INTERVAL), str(intervals), str(WARMUP)]
    r = subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        capture_output=True,
        text=True,
        timeout=900,
        env=child_env(OMP_NUM_THREADS=1),
    )
    assert r.returncode == 0, describe_result(r)
    samples = json.loads(r.stdout.strip().splitlines()[-1])["samples"]
    growth = [b - a for a, b in zip(samples, samples[1:])]
    per_call = statistics.median(growth) / INTERVAL
    kib = [round((s - samples[0]) / 1024) for s in samples]
    assert per_call < LIMIT_BYTES_PER_CALL, (
        f"{op} on {backend}: resident memory grows by {per_call:.0f} bytes per forward+backward call (median over "
        f"{intervals} intervals of {INTERVAL} calls; limit {LIMIT_BYTES_PER_CALL}); growth since the first sample, "
        f"KiB: {kib}"
    )
