"""Where the SYCL kernels' time goes: one model step under the kernel profiler, a row per kernel.

    PYTHONPATH=python python scripts/kernel_profile.py --model resnet50 --mode train --batch 2
    PYTHONPATH=python python scripts/kernel_profile.py --model encoder --mode infer

The profiler (``_C.sycl.set_kernel_profiling``) makes every launch wait for its kernel and adds the wall time
from submission to completion to that kernel's row, so the rows say which kernels dominate a step; the step
itself runs slower than unprofiled (no overlap of launches). The model runs through ``xkernels.optimize`` on the
``sycl`` backend (inference: packed weights), after warm-up steps that compile the kernels.
"""

from __future__ import annotations

import xkernels  # isort: skip  (before torch: xkernels shortens OpenMP's spin-wait, docs/performance.md)
import torch  # isort: skip

import argparse
import copy
import sys
import time

from rich.console import Console
from rich.table import Table

from xkernels import models


def build(model: str, mode: str, batch: int, size: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(0)
    if model == "resnet50":
        net = models.resnet50()
        x = torch.randn(batch, 3, size, size, generator=g)
        target = torch.randn(batch, 1000, generator=g)
    elif model == "encoder":
        net = models.TransformerEncoder(layers=4, d_model=768, heads=12, ffn=3072)
        x = torch.randn(batch, 128, 768, generator=g)
        target = torch.randn(batch, 128, 768, generator=g)
    else:
        net = models.mlp()
        x = torch.randn(batch, 1024, generator=g)
        target = torch.randn(batch, 1024, generator=g)
    if mode == "infer":
        if model == "resnet50":
            models.calibrate_batchnorm(net, x)
        net.eval()
    else:
        net.train()
    net, x, target = net.to(dtype), x.to(dtype), target.to(dtype)
    return xkernels.optimize(copy.deepcopy(net), pack_weights=mode == "infer"), x, target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["resnet50", "encoder", "mlp"], default="resnet50")
    ap.add_argument("--mode", choices=["infer", "train"], default="train")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=224, help="ResNet-50 image size")
    ap.add_argument("--steps", type=int, default=3, help="profiled steps (after 2 warm-up steps)")
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = ap.parse_args(argv)
    net, x, target = build(args.model, args.mode, args.batch, args.size, getattr(torch, args.dtype))

    def step():
        if args.mode == "infer":
            with torch.no_grad():
                net(x)
            return
        net.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(net(x), target).backward()

    sycl = xkernels._C.sycl
    with xkernels.use_backend("sycl"):
        for _ in range(2):
            step()
        sycl.kernel_profile(reset=True)
        sycl.set_kernel_profiling(True)
        try:
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            wall = (time.perf_counter() - t0) / args.steps
        finally:
            sycl.set_kernel_profiling(False)
    rows = sycl.kernel_profile(reset=True)
    total = sum(s for _, s in rows.values()) / args.steps
    table = Table(
        title=f"{args.model} {args.mode} {args.dtype} batch {args.batch}: {wall * 1e3:.1f} ms per profiled step, "
        f"{total * 1e3:.1f} ms in SYCL kernels"
    )
    for col in ("kernel", "launches / step", "ms / step", "% of kernel time"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for label, (n, s) in sorted(rows.items(), key=lambda kv: -kv[1][1])[: args.rows]:
        per_step = s / args.steps
        table.add_row(label, f"{n / args.steps:g}", f"{per_step * 1e3:.2f}", f"{100 * per_step / total:.1f}")
    Console(width=150).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
