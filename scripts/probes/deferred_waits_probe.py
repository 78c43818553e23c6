"""ResNet-50 inference with and without deferred-wait regions, interleaved in one process.

    PYTHONPATH=python python scripts/probes/deferred_waits_probe.py [--batch 1] [--rounds 30]

Two `xkernels.optimize(model, pack_weights=True)` copies of one eval-mode ResNet-50 (this package's
xkernels.models.ResNet, BatchNorm statistics calibrated on one batch), one with `defer_waits=False` (every
convolution waits for its kernels) and one with the default (each stage of bottlenecks waits once:
python/xkernels/_deferred.py). Checks that both give the same bits on the same input, then times one forward of
each per round under torch.no_grad(), alternating which goes first; prints the median and best time of each and
the ratio of the medians (> 1: the regions are faster). The SYCL backend on the CPU device.
"""

from __future__ import annotations

import xkernels  # isort: skip  (before torch: xkernels shortens OpenMP's spin-wait, docs/performance.md)
import torch  # isort: skip

import argparse
import statistics
import time

from xkernels import models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = models.ResNet((3, 4, 6, 3))
    models.calibrate_batchnorm(model, torch.randn(4, 3, 64, 64))
    model.eval()
    x = torch.randn(args.batch, 3, 224, 224)
    runs = {
        "wait per convolution": xkernels.optimize(model, pack_weights=True, defer_waits=False),
        "deferred-wait regions": xkernels.optimize(model, pack_weights=True),
    }
    names = list(runs)
    times: dict[str, list[float]] = {n: [] for n in names}
    with xkernels.use_backend("sycl"), torch.no_grad():
        for i in range(3):  # the remembered routes, the packed weights, the kernels' compilation
            outs = [runs[n](x + i) for n in reversed(names)]
            if not torch.equal(outs[0], outs[1]):
                raise SystemExit("the two models disagree")
        for r in range(args.rounds):
            for n in names if r % 2 == 0 else reversed(names):
                t = time.perf_counter()
                runs[n](x)
                times[n].append(time.perf_counter() - t)
    med = {n: statistics.median(times[n]) * 1e3 for n in names}
    for n in names:
        print(f"{n:24s} median {med[n]:8.2f} ms   best {min(times[n]) * 1e3:8.2f} ms")
    print(f"ratio (wait / deferred, medians): {med[names[0]] / med[names[1]]:.3f}x")


if __name__ == "__main__":
    main()
