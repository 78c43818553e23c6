"""Measures conv2d's work-group shape per layer on this machine's SYCL CPU device: the data behind the
per-device tiling table in csrc/sycl/conv2d.cpp (choose_tiling) and docs/performance.md.

    PYTHONPATH=python python scripts/tune_conv2d.py [--batches 1 8] [--layouts nchw channels_last]
                                                    [--tilings "tiles=1" "tiles=4,kblock=256" ...] [--csv FILE]

For every ResNet-50 conv layer (benchmarks/cases.py), batch and input layout, it times the SYCL backend's
conv2d_packed (the weight packed once, as xkernels.nn.Conv2d caches it) under each XKERNELS_CONV2D_TILING
setting ("default" = the table's choice, no override) and prints GFLOP/s per setting, the best setting and
the default's share of the best. The settings run round-robin per layer (best of --repeats blocks of
calls), so machine noise hits them alike. Results are bit-identical across settings (tests/test_conv2d_tiling.py);
only time differs.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import xkernels  # noqa: E402
from benchmarks.cases import RESNET50_1X1, RESNET50_3X3  # noqa: E402

ENV = "XKERNELS_CONV2D_TILING"
DEFAULT_TILINGS = ["default", "tiles=1", "tiles=2", "tiles=4", "tiles=8", "tiles=4,kblock=256", "tiles=8,kblock=576"]


def _time(fn, calls: int, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def _set_tiling(tiling: str) -> None:
    if tiling == "default":
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = tiling


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--layouts", nargs="+", default=["nchw", "channels_last"], choices=["nchw", "channels_last"])
    ap.add_argument("--tilings", nargs="+", default=DEFAULT_TILINGS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.05, help="time per block of calls (sets the calls)")
    ap.add_argument("--csv", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)

    layers = [(c, o, hw, 3) for c, o, hw in RESNET50_3X3] + [(c, o, hw, 1) for c, o, hw in RESNET50_1X1]
    table = Table(title=f"conv2d_packed GFLOP/s per {ENV} (SYCL backend, float32)")
    for col in ["layer", "N", "layout", *args.tilings, "best", "default / best"]:
        table.add_column(col, justify="right" if col not in ("layer", "layout", "best") else "left")
    rows = []
    torch.manual_seed(0)
    with xkernels.use_backend("sycl"):
        for c, o, hw, k in layers:
            w = torch.randn(o, c, k, k) / (c * k * k) ** 0.5
            packed = xkernels.pack_conv2d_weight(w)
            for n in args.batches:
                for layout in args.layouts:
                    x = torch.randn(n, c, hw, hw)
                    if layout == "channels_last":
                        x = x.to(memory_format=torch.channels_last)
                    flops = 2.0 * n * o * hw * hw * c * k * k

                    def run(x=x, w=w, packed=packed, k=k):
                        with torch.no_grad():
                            xkernels.conv2d_packed(x, packed, w.shape, None, padding=k // 2)

                    _set_tiling("default")
                    t0 = time.perf_counter()
                    run()
                    calls = max(1, int(args.min_seconds / max(time.perf_counter() - t0, 1e-6)))
                    best_t = {t: float("inf") for t in args.tilings}
                    for _ in range(args.repeats):  # round-robin over the settings
                        for tiling in args.tilings:
                            _set_tiling(tiling)
                            best_t[tiling] = min(best_t[tiling], _time(run, calls, 1))
                    _set_tiling("default")
                    gf = {t: flops / s / 1e9 for t, s in best_t.items()}
                    best = max(gf, key=gf.get)
                    share = gf.get("default", float("nan")) / gf[best]
                    name = f"{k}x{k} {c}->{o} {hw}x{hw}"
                    table.add_row(name, str(n), layout, *(f"{gf[t]:.1f}" for t in args.tilings), best, f"{share:.2f}")
                    rows.append({"layer": name, "N": n, "layout": layout, **gf, "best": best})
    Console().print(table)
    if args.csv:
        with args.csv.open("w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
