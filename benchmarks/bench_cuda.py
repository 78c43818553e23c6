"""Native CUDA kernels vs torch (cuBLAS / cuDNN / aten) on the same GPU, through the one harness
(benchmarks/harness.py): the float64 correctness check first, then interleaved timing with CUDA
events (warm-up excluded, median and spread), FLOP/s or GB/s from the cases' formulas, rows with
provenance appended to a CSV, and the geometric-mean time ratio xkernels / torch (> 1: slower).

    python benchmarks/bench_cuda.py --csv out.csv [--max-seconds 150] [--quick]

float32 comparisons disable TF32 in torch (cuBLAS and cuDNN) because xkernels computes
float32 in float32; float16 / bfloat16 use tensor cores on both sides. Without the native CUDA
backend (or a GPU) it prints why and exits 0: there is nothing to measure.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import the benchmarks package from the repository
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import xkernels
from benchmarks import cases as C
from benchmarks.harness import append_csv, provenance, time_case
from benchmarks.providers import all_providers

LINEAR_MNK = [(4096, 4096, 4096), (64, 4096, 4096), (8192, 4096, 1024), (1, 4096, 4096), (1024, 4096, 4096)]
# (C_in, C_out, H=W, kernel, stride, groups), batch 32
CONV_LAYERS = [(64, 64, 56, 3, 1, 1), (256, 256, 14, 3, 1, 1), (128, 128, 56, 3, 1, 128), (3, 64, 224, 7, 2, 1)]
LAYER_NORM_SHAPES = [(8192, 1024), (4096, 8192), (65536, 768)]


def build_cases(quick: bool, dtypes: list[torch.dtype]) -> list:
    """Shape-major across the ops (linear, layer_norm, conv2d, then each op's next shape), dtype inner: a
    --max-seconds cut still leaves every op and dtype measured."""
    n = 2 if quick else None
    dev = "cuda"
    modes = ["fwd", "fwd+bwd"]
    per_op = [
        [lambda dt, s=s: C.linear_cases(dt, modes, mnk=[s], device=dev) for s in LINEAR_MNK[:n]],
        [lambda dt, s=s: C.layer_norm_cases(dt, modes, shapes=[s], device=dev) for s in LAYER_NORM_SHAPES[:n]],
        [
            lambda dt, layer=layer: C.conv_cases(dt, modes, batches=(32,), layers=[layer], device=dev)
            for layer in CONV_LAYERS[:n]
        ],
    ]
    groups = [g for i in range(max(map(len, per_op))) for op_groups in per_op for g in op_groups[i : i + 1]]
    return [case for make in groups for dt in dtypes for case in make(dt)]


def gpu_description() -> str:
    """The GPU, its architecture, driver and the CUDA torch was built with, for each CSV row's device column."""
    major, minor = torch.cuda.get_device_capability()
    try:
        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            )
            .stdout.split("\n")[0]
            .strip()
        )
    except OSError:
        driver = ""
    return f"{torch.cuda.get_device_name()} (sm_{major}{minor}, driver {driver or '?'}, CUDA {torch.version.cuda})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, type=Path)
    ap.add_argument("--max-seconds", type=float, default=150.0, help="stop starting new cases after this long")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of timed work per provider and case")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = ap.parse_args(argv)
    st = xkernels.backends()["cuda"]
    if not st.available:
        print(f"bench_cuda: skipped: the native CUDA backend is unavailable: {st.reason}")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    providers = all_providers(["cuda", "torch"])
    prov = provenance(device=gpu_description())
    t_start = time.monotonic()
    rows = []
    for case in build_cases(args.quick, [getattr(torch, d) for d in args.dtypes.split(",")]):
        if time.monotonic() - t_start > args.max_seconds:
            print("bench_cuda: stopped early (--max-seconds)")
            break
        case_rows = time_case(case, providers, args.repeats, args.min_time)
        by = {r["provider"]: r for r in case_rows}
        if "xkernels[cuda]" in by and "torch" in by:
            ratio = float(by["xkernels[cuda]"]["median_ms"]) / float(by["torch"]["median_ms"])
            print(
                f"{case.op:18s} {case.shape:40s} {str(case.dtype)[6:]:9s} {case.mode:8s} "
                f"xkernels {by['xkernels[cuda]']['median_ms']} ms  torch {by['torch']['median_ms']} ms  "
                f"ratio {ratio:6.2f}",
                flush=True,
            )
        append_csv(case_rows, args.csv, prov)
        rows += case_rows
    if not rows:
        print("bench_cuda: no case ran")
        return 1
    print(f"bench_cuda: {len(rows)} rows -> {args.csv} in {time.monotonic() - t_start:.0f} s")
    for op in ("fused_linear_relu", "conv2d", "layer_norm"):
        key = lambda r: (r["mode"], r["dtype"], r["shape"])  # noqa: E731
        xk = {key(r): float(r["median_ms"]) for r in rows if r["op"] == op and r["provider"] == "xkernels[cuda]"}
        th = {key(r): float(r["median_ms"]) for r in rows if r["op"] == op and r["provider"] == "torch"}
        ratios = [xk[k] / th[k] for k in xk if k in th]
        if ratios:
            print(
                f"  {op:18s} geometric-mean time ratio xkernels/torch: "
                f"{statistics.geometric_mean(ratios):.2f} over {len(ratios)} cases"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
