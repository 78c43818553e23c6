"""Run the benchmark suite: python -m benchmarks.run [--quick] [--ops ...] [--providers ...]

Appends rows (with provenance) to benchmarks/results/results.csv, prints a side-by-side table with
the xkernels/torch ratio, and draws PNG plots (benchmarks/results/<op>.png).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# xkernels before torch: at import it sets GOMP_SPINCOUNT (unless set) while libgomp can
# still see it, as a user's program would; torch's spinning OpenMP workers would otherwise slow the
# SYCL ops and torch itself (docs/performance.md). The header line prints the policy in effect.
import xkernels  # isort: skip
import torch  # isort: skip

from . import cases as C
from .harness import RESULTS_DIR, append_csv, env_summary, provenance, time_case
from .providers import all_providers


def build_cases(args):
    dtypes = [getattr(torch, d) for d in args.dtypes]
    modes = args.modes
    out = []
    for dt in dtypes:
        if "fused_linear_relu" in args.ops:
            out += C.linear_cases(dt, modes, ms=[1, 64, 512], nks=[1024]) if args.quick else C.linear_cases(dt, modes)
        if "conv2d" in args.ops:
            out += (
                C.conv_cases(dt, modes, batches=(1,), layers=[(64, 64, 56, 3), (256, 64, 56, 1)])
                if args.quick
                else C.conv_cases(dt, modes)
            )
        if "layer_norm" in args.ops:
            out += (
                C.layer_norm_cases(dt, modes, shapes=[(2048, 1024), (512, 8192)])
                if args.quick
                else C.layer_norm_cases(dt, modes)
            )
        if "layer_norm.out" in args.ops and "fwd" in modes:  # forward-only ops
            out += C.layer_norm_out_cases(dt)
        if "FusedLinearReLU" in args.ops and "fwd" in modes:
            out += C.linear_module_cases(dt)
        if "Conv2d" in args.ops and "fwd" in modes:
            out += (
                C.conv_module_cases(dt, batches=(1,), layers=[(256, 256, 14, 3), (2048, 512, 7, 1)])
                if args.quick
                else C.conv_module_cases(dt)
            )
    return out


def print_table(rows):
    by_case: dict = {}
    for r in rows:
        by_case.setdefault((r["op"], r["mode"], r["dtype"], r["shape"]), {})[r["provider"]] = r
    for (op, mode, dtype, shape), provs in by_case.items():
        torch_row = provs.get("torch")
        copy_row = provs.get("copy")  # the copy-bandwidth baseline (layer_norm.out)
        parts = []
        for name, r in provs.items():
            ratio = ""
            if torch_row and name not in ("torch", "copy"):
                ratio = f" ({float(torch_row['median_ms']) / float(r['median_ms']):.2f}x torch)"
            if copy_row and name != "copy":
                ratio += f" ({float(copy_row['median_ms']) / float(r['median_ms']) * 100:.0f}% of copy)"
            parts.append(f"{name} {float(r['median']):.1f} {r['unit']} ±{float(r['spread']) * 100:.0f}%{ratio}")
        print(f"  {op:18s} {mode:7s} {dtype:8s} {shape:36s} | " + " | ".join(parts), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small subset (< 2 minutes)")
    ap.add_argument(
        "--ops",
        nargs="+",
        default=["fused_linear_relu", "conv2d", "layer_norm", "layer_norm.out", "FusedLinearReLU", "Conv2d"],
    )
    ap.add_argument(
        "--providers",
        nargs="+",
        default=None,
        help="e.g. sycl sycl-unpacked reference torch copy torch.compile torch.compile+freezing "
        "(default: all available)",
    )
    ap.add_argument("--dtypes", nargs="+", default=None, help="default: float32 (+ bfloat16 unless --quick)")
    ap.add_argument("--modes", nargs="+", default=["fwd", "fwd+bwd"], choices=["fwd", "fwd+bwd"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of timed work per provider and case")
    ap.add_argument("--csv", type=Path, default=RESULTS_DIR / "results.csv")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.dtypes is None:
        args.dtypes = ["float32"] if args.quick else ["float32", "bfloat16"]
    if args.providers is None and args.quick:
        args.providers = ["sycl", "sycl-unpacked", "cuda", "reference", "torch", "copy"]
    elif args.providers is None:
        # The reference backend is the plain-loop oracle, not a contender: at ~1 GFLOP/s it took two thirds of
        # the standard suite's time. --providers reference ... adds it back, and --providers acpp ... the
        # AdaptiveCpp build of the kernels (a conformance backend, no speed target).
        args.providers = ["sycl", "sycl-unpacked", "cuda", "torch", "copy", "torch.compile", "torch.compile+freezing"]

    prov = provenance()
    providers = all_providers(args.providers)
    print(
        f"xkernels {prov['xkernels']} @ {prov['commit']} | torch {prov['torch']} | SYCL {prov['sycl_runtime']} | "
        f"{prov['device']} | torch threads {prov['threads']} | env {env_summary()}"
    )
    for p in providers:
        print(f"  provider {p.name:22s} {'available' if p.available else 'unavailable: ' + p.reason}")
    t0 = time.perf_counter()
    xkernels.warmup()  # kernel compilation is not part of any timing
    print(f"  warmup (kernel compilation) {time.perf_counter() - t0:.1f}s")
    cases = build_cases(args)
    all_rows = []
    for i, case in enumerate(cases, 1):
        print(
            f"[{i}/{len(cases)}] {case.op} {case.mode} {str(case.dtype).replace('torch.', '')} {case.shape}", flush=True
        )
        rows = time_case(case, providers, args.repeats, args.min_time)
        print_table(rows)
        append_csv(rows, args.csv, prov)
        all_rows += rows
    print(f"done: {len(all_rows)} rows in {time.perf_counter() - t0:.0f}s -> {args.csv}")
    if not args.no_plot and all_rows:
        from .plot import plot_rows

        for path in plot_rows(all_rows, args.csv.parent):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
