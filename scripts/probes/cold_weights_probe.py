"""ResNet-50's convolution layers with cold weights: xkernels against torch.compile + freezing, layer by layer.

    PYTHONPATH=python python scripts/probes/cold_weights_probe.py [--batch 1] [--rounds 5] [--only 3x3]

In a model at batch 1 every layer's weights come from memory, not from the caches (ResNet-50 holds ~100 MB of
them), which a benchmark that repeats one layer never sees. Per ResNet-50 layer shape (channels_last, float32,
bias + ReLU as after BatchNorm folding), this builds a module of `copies` independent convolutions of that shape
(enough copies for >= 150 MB of weights, 2..24) that all read the same input, and times one call of the whole
module per round, providers interleaved: inductor with freezing (`torch.compile`, oneDNN with pre-packed weights)
and `xkernels.optimize(..., pack_weights=True)` (SYCL CPU device). Per layer: the best time per copy and the ratio
torch.compile+freezing / xkernels (> 1: xkernels faster); at the end the sum weighted by how often ResNet-50
(this package's xkernels.models.resnet50: the stride in the 1x1 of each stage's first block) has the layer.
Both providers' outputs are checked against eager torch before timing. The 15-24 outputs of a call are alive at
once; so that torch's allocator (inductor's outputs) does not hand each call fresh, page-faulting memory while
xkernels' caching host allocator reuses its blocks, glibc is told at start to keep freed memory (mallopt: no
trimming, no mmap below 32 MiB), which in a model inductor's buffer reuse achieves by itself. A layer that stays
in the caches (one convolution repeated) is what the op suite measures (`python -m benchmarks.run --ops Conv2d`).
"""

from __future__ import annotations

import xkernels  # isort: skip  (before torch: xkernels shortens OpenMP's spin-wait, docs/performance.md)
import torch  # isort: skip

import argparse
import copy
import ctypes
import ctypes.util
import sys
import time

import torch._inductor.config as inductor_config
from rich.console import Console
from rich.table import Table
from torch import nn

# (in channels, out channels, input size, kernel, stride, layers of this shape in ResNet-50)
LAYERS = [
    (3, 64, 224, 7, 2, 1),
    (64, 64, 56, 1, 1, 1),
    (256, 64, 56, 1, 1, 2),
    (64, 64, 56, 3, 1, 3),
    (64, 256, 56, 1, 1, 4),
    (256, 128, 56, 1, 2, 1),
    (512, 128, 28, 1, 1, 3),
    (128, 128, 28, 3, 1, 4),
    (128, 512, 28, 1, 1, 4),
    (256, 512, 56, 1, 2, 1),
    (512, 256, 28, 1, 2, 1),
    (1024, 256, 14, 1, 1, 5),
    (256, 256, 14, 3, 1, 6),
    (256, 1024, 14, 1, 1, 6),
    (512, 1024, 28, 1, 2, 1),
    (1024, 512, 14, 1, 2, 1),
    (2048, 512, 7, 1, 1, 2),
    (512, 512, 7, 3, 1, 3),
    (512, 2048, 7, 1, 1, 3),
    (1024, 2048, 14, 1, 2, 1),
]


class Copies(nn.Module):
    """`n` convolutions of one shape (each its own weights), each followed by ReLU, all on the same input."""

    def __init__(self, c: int, o: int, k: int, stride: int, n: int):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c, o, k, stride, k // 2) for _ in range(n))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.relu(conv(x)) for conv in self.convs]


def keep_freed_memory() -> bool:
    """glibc: freed memory stays in the process (M_TRIM_THRESHOLD huge, M_MMAP_THRESHOLD 32 MiB). False elsewhere."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_trim_threshold, 2**30)) and bool(libc.mallopt(m_mmap_threshold, 32 << 20))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="", help="only layers whose label contains this text, e.g. 3x3")
    args = ap.parse_args(argv)
    inductor_config.freezing = True
    if not keep_freed_memory():
        print("note: mallopt unavailable: torch's allocations may page-fault on every call", file=sys.stderr)
    torch.manual_seed(0)
    cl = torch.channels_last
    table = Table(
        title=f"ResNet-50 layers, batch {args.batch}, float32 channels_last, cold weights: "
        f"us per layer (best of {args.rounds} rounds)"
    )
    for col in ("layer", "in ResNet-50", "copies", "torch.compile+freezing", "xkernels", "ratio"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    totals = [0.0, 0.0]
    for c, o, hw, k, stride, count in LAYERS:
        label = f"{k}x{k} {c}->{o} {hw}x{hw}" + (f" s{stride}" if stride > 1 else "")
        if args.only not in label:
            continue
        torch._dynamo.reset()  # a compiled module per shape (no recompile limit, no cross-shape reuse)
        copies = max(2, min(24, int(150e6 / (c * o * k * k * 4))))
        model = Copies(c, o, k, stride, copies).eval().to(memory_format=cl)
        x = torch.randn(args.batch, c, hw, hw).contiguous(memory_format=cl)
        ours = xkernels.optimize(copy.deepcopy(model), pack_weights=True)
        best = {"cf": float("inf"), "xk": float("inf")}
        with torch.no_grad():
            compiled = torch.compile(model)
            expected = model(x)
            for f in (compiled, ours):
                for got, want in zip(f(x), expected, strict=True):  # parity before timing
                    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3 * want.abs().max().item())
                f(x)
            for _ in range(args.rounds):
                for name, f in (("cf", compiled), ("xk", ours)):
                    t0 = time.perf_counter()
                    f(x)
                    best[name] = min(best[name], (time.perf_counter() - t0) / copies)
        totals[0] += best["cf"] * count
        totals[1] += best["xk"] * count
        table.add_row(
            label, str(count), str(copies), f"{best['cf'] * 1e6:.0f}", f"{best['xk'] * 1e6:.0f}",
            f"{best['cf'] / best['xk']:.2f}x",
        )  # fmt: skip
        print(f"  {label}: {best['cf'] * 1e6:.0f} / {best['xk'] * 1e6:.0f} us", file=sys.stderr, flush=True)
    table.add_row(
        "weighted sum (ms)", "", "", f"{totals[0] * 1e3:.2f}", f"{totals[1] * 1e3:.2f}",
        f"{totals[0] / totals[1]:.2f}x" if totals[1] else "",
    )  # fmt: skip
    Console(width=150).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
