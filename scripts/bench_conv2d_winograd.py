#!/usr/bin/env python3
"""conv2d_packed per ResNet-50 3x3 stride-1 layer (channels_last, bias): Winograd (XKERNELS_CONV_WINOGRAD=1) vs the
direct kernel (=0) vs torch eager F.conv2d, interleaved in one process, the order rotated every round (whatever
runs right after torch's OpenMP ops pays their workers' spin-wait). Usage (SYCL backend):
  XKERNELS_BACKEND=sycl PYTHONPATH=python python scripts/bench_conv2d_winograd.py [BATCHES=1,8] [ROUNDS=5] [LAYERS]
LAYERS: C:H pairs, e.g. 512:5,256:14 (default: ResNet-50's 3x3 stride-1 layers).
"""

import xkernels  # isort: skip  (before torch: xkernels shortens OpenMP's spin-wait, docs/performance.md)
import torch  # isort: skip

import os
import statistics
import sys
import time

import torch.nn.functional as F

torch.manual_seed(0)
LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]
batches = [int(b) for b in (sys.argv[1] if len(sys.argv) > 1 else "1,8").split(",")]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
if len(sys.argv) > 3:
    LAYERS = [tuple(int(v) for v in pair.split(":")) for pair in sys.argv[3].split(",")]


def timeit(f, reps):
    f()
    t = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t) / reps * 1e3


print(f"threads={torch.get_num_threads()}")
for N in batches:
    for C, H in LAYERS:
        x = torch.randn(N, C, H, H).to(memory_format=torch.channels_last)
        w = torch.randn(C, C, 3, 3) * 0.05
        b = torch.randn(C)
        pk = xkernels.pack_conv2d_weight(w)

        def xk(mode):
            def f():
                os.environ["XKERNELS_CONV_WINOGRAD"] = mode
                with torch.no_grad():
                    xkernels.conv2d_packed(x, pk, w.shape, b, padding=1)

            return f

        def te():
            with torch.no_grad():
                F.conv2d(x, w, b, padding=1)

        flops = 2 * N * C * C * 9 * H * H
        reps = max(2, int(2e9 / flops))
        res = {"wino": [], "direct": [], "torch": []}
        fns = [("wino", xk("1")), ("direct", xk("0")), ("torch", te)]
        for r in range(rounds):
            for name, f in fns[r % 3 :] + fns[: r % 3]:
                res[name].append(timeit(f, reps))
        med = {k: statistics.median(v) for k, v in res.items()}
        tiles = N * ((H + 1) // 2) ** 2
        print(
            f"N={N} C=O={C} {H}x{H} ({tiles} tiles): wino {med['wino']:.3f} ms  direct {med['direct']:.3f} ms  "
            f"torch {med['torch']:.3f} ms  "
            f"direct/wino {med['direct'] / med['wino']:.2f}x torch/wino {med['torch'] / med['wino']:.2f}x  "
            f"(direct {flops / med['direct'] / 1e6:.0f} GFLOP/s)",
            flush=True,
        )
