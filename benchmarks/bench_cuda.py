"""Native CUDA kernels vs torch (cuBLAS / cuDNN / aten) on the same GPU.

For every case: a correctness check against float64 first, then timing with CUDA events
(warm-up excluded, each repetition timed on its own, median and inter-quartile range),
FLOP/s or GB/s from explicit formulas, and the ratio xkernels / torch (> 1: slower).
Rows go to a CSV with device, versions and commit.

    python benchmarks/bench_cuda.py --csv out.csv [--max-seconds 150] [--quick]

float32 comparisons disable TF32 in torch (cuBLAS and cuDNN) because xkernels computes
float32 in float32; float16 / bfloat16 use tensor cores on both sides.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import xkernels


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except Exception:  # noqa: BLE001 - not a git checkout
        return os.environ.get("XKERNELS_COMMIT", "unknown")


def time_ms(fn, warmup: int, reps: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def quartiles(v: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
    return q[0], statistics.median(v), q[2]


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double().cpu()
    return ((a.double().cpu() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def linear_cases(quick):
    shapes = [(4096, 4096, 4096), (8192, 1024, 4096), (64, 4096, 4096)]
    return shapes[:2] if quick else shapes


def conv_cases(quick):
    # N, C, H, W, O, k, stride, groups
    shapes = [(32, 64, 56, 56, 64, 3, 1, 1), (32, 256, 14, 14, 256, 3, 1, 1), (32, 128, 56, 56, 128, 3, 1, 128),
              (32, 3, 224, 224, 64, 7, 2, 1)]
    return shapes[:2] if quick else shapes


def ln_cases(quick):
    shapes = [(8192, 1024), (4096, 8192), (65536, 768)]
    return shapes[:2] if quick else shapes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--max-seconds", type=float, default=150.0, help="stop starting new cases after this long")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = ap.parse_args()
    if not xkernels.backends()["cuda"].available:
        print("bench_cuda: native CUDA backend unavailable:", xkernels.backends()["cuda"].reason)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                xkernels=xkernels.__version__, commit=commit(), host=platform.node(),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    t_start = time.monotonic()
    rows = []
    tol = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}

    def record(op, case, dtype, direction, ours_fn, theirs_fn, work, unit):
        o = quartiles(time_ms(ours_fn, args.warmup, args.reps))
        t = quartiles(time_ms(theirs_fn, args.warmup, args.reps))
        rate = lambda ms: work / (ms * 1e-3) / (1e12 if unit == "TFLOP/s" else 1e9)  # noqa: E731
        row = dict(op=op, case=case, dtype=str(dtype).replace("torch.", ""), direction=direction,
                   xk_ms_p25=o[0], xk_ms_median=o[1], xk_ms_p75=o[2], torch_ms_p25=t[0], torch_ms_median=t[1],
                   torch_ms_p75=t[2], ratio=o[1] / t[1], xk_rate=rate(o[1]), torch_rate=rate(t[1]), unit=unit, **meta)
        rows.append(row)
        print(f"{op:18s} {case:34s} {row['dtype']:9s} {direction:8s} xkernels {o[1]:9.3f} ms "
              f"({row['xk_rate']:8.2f} {unit})  torch {t[1]:9.3f} ms ({row['torch_rate']:8.2f})  "
              f"ratio {row['ratio']:6.2f}", flush=True)

    def check(name, ours, ref64, dtype):
        e = rel_err(ours, ref64)
        if e > tol[dtype]:
            raise SystemExit(f"bench_cuda: {name} [{dtype}] is wrong (relative error {e:.2e}); not timing it")

    def out_of_time():
        return time.monotonic() - t_start > args.max_seconds

    for dtype in dtypes:
        for M, K, N in linear_cases(args.quick):
            if out_of_time():
                break
            x = torch.randn(M, K, device=dev, dtype=dtype)
            w = torch.randn(N, K, device=dev, dtype=dtype) / K**0.5
            b = torch.randn(N, device=dev, dtype=dtype)
            case = f"M{M} K{K} N{N}"
            check(f"fused_linear_relu {case}", xkernels.fused_linear_relu(x, w, b),
                  torch.relu(F.linear(x.double(), w.double(), b.double())), dtype)
            record("fused_linear_relu", case, dtype, "fwd", lambda: xkernels.fused_linear_relu(x, w, b),
                   lambda: torch.relu(F.linear(x, w, b)), 2 * M * N * K, "TFLOP/s")
            xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, w, b))
            gy = torch.randn(M, N, device=dev, dtype=dtype)
            record("fused_linear_relu", case, dtype, "fwd+bwd",
                   lambda: torch.autograd.grad(xkernels.fused_linear_relu(xr, wr, br), (xr, wr, br), gy),
                   lambda: torch.autograd.grad(torch.relu(F.linear(xr, wr, br)), (xr, wr, br), gy),
                   6 * M * N * K, "TFLOP/s")
        for Nb, C, H, W, O, k, s, g in conv_cases(args.quick):
            if out_of_time():
                break
            for cl in (False, True):
                fmt = torch.channels_last if cl else torch.contiguous_format
                x = torch.randn(Nb, C, H, W, device=dev, dtype=dtype).contiguous(memory_format=fmt)
                w = (torch.randn(O, C // g, k, k, device=dev, dtype=dtype) / (C // g * k * k) ** 0.5).contiguous(
                    memory_format=fmt)
                b = torch.randn(O, device=dev, dtype=dtype)
                kw = dict(stride=s, padding=k // 2, groups=g)
                y = F.conv2d(x, w, b, **kw)
                flops = 2 * Nb * O * y.shape[2] * y.shape[3] * (C // g) * k * k
                case = f"N{Nb} C{C} {H}x{W} O{O} k{k} s{s} g{g}{' cl' if cl else ''}"
                check(f"conv2d {case}", xkernels.conv2d(x, w, b, **kw),
                      F.conv2d(x.double(), w.double(), b.double(), **kw), dtype)
                record("conv2d", case, dtype, "fwd", lambda: xkernels.conv2d(x, w, b, **kw),
                       lambda: F.conv2d(x, w, b, **kw), flops, "TFLOP/s")
                xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, w, b))
                gy = torch.randn_like(y)
                record("conv2d", case, dtype, "fwd+bwd",
                       lambda: torch.autograd.grad(xkernels.conv2d(xr, wr, br, **kw), (xr, wr, br), gy),
                       lambda: torch.autograd.grad(F.conv2d(xr, wr, br, **kw), (xr, wr, br), gy), 3 * flops,
                       "TFLOP/s")
                if out_of_time():
                    break
        for M, N in ln_cases(args.quick):
            if out_of_time():
                break
            x = torch.randn(M, N, device=dev, dtype=dtype)
            w = torch.randn(N, device=dev, dtype=dtype)
            b = torch.randn(N, device=dev, dtype=dtype)
            case = f"M{M} N{N}"
            check(f"layer_norm {case}", xkernels.layer_norm(x, N, w, b),
                  F.layer_norm(x.double(), (N,), w.double(), b.double()), dtype)
            nbytes = 2 * M * N * x.element_size()  # read x, write y
            record("layer_norm", case, dtype, "fwd", lambda: xkernels.layer_norm(x, N, w, b),
                   lambda: F.layer_norm(x, (N,), w, b), nbytes, "GB/s")
            xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, w, b))
            gy = torch.randn_like(x)
            record("layer_norm", case, dtype, "fwd+bwd",
                   lambda: torch.autograd.grad(xkernels.layer_norm(xr, N, wr, br), (xr, wr, br), gy),
                   lambda: torch.autograd.grad(F.layer_norm(xr, (N,), wr, br), (xr, wr, br), gy), 5 * nbytes,
                   "GB/s")
    if not rows:
        print("bench_cuda: no case ran")
        return 1
    with open(args.csv, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)
    print(f"bench_cuda: {len(rows)} rows -> {args.csv} in {time.monotonic() - t_start:.0f} s"
          + (" (stopped early: --max-seconds)" if out_of_time() else ""))
    for op in ("fused_linear_relu", "conv2d", "layer_norm"):
        r = [row["ratio"] for row in rows if row["op"] == op]
        if r:
            print(f"  {op:18s} geometric-mean time ratio xkernels/torch: "
                  f"{statistics.geometric_mean(r):.2f} over {len(r)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
