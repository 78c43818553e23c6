"""A small CNN + MLP + LayerNorm model, for model-level parity.

As a factory for the command line (the factory returns (model, inputs)):

    python -m xkernels parity examples/model_parity.py:make --optimize
    python -m xkernels parity examples/model_parity.py:make --configs eager,optimize,optimize+backend=sycl

or as a script, which prints the module-by-module report of every backend:

    python examples/model_parity.py [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn

import xkernels


class SmallNet(nn.Module):
    """conv -> relu -> strided conv -> relu -> layer norm -> MLP (Linear+ReLU, Linear)."""

    def __init__(self, in_channels: int = 3, size: int = 16, classes: int = 4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        s = size // 2
        self.norm = nn.LayerNorm([16, s, s])
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * s * s, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x):
        return self.head(self.norm(self.features(x)))


def make(dtype: torch.dtype = torch.float32, batch: int = 8):
    """(model, inputs): a seeded SmallNet and a batch of images on xkernels.best_device()."""
    torch.manual_seed(0)
    device = xkernels.best_device()
    model = SmallNet().to(device=device, dtype=dtype).eval()
    x = torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    return model, x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "float16", "bfloat16"])
    ap.add_argument("--details", default="all", choices=["none", "failing", "all"])
    args = ap.parse_args(argv)
    model, x = make(getattr(torch, args.dtype))
    model = xkernels.optimize(model)
    rep = xkernels.parity.check_model(model, x, name="SmallNet")
    rep.print(details=args.details)
    return 0 if rep.passed else 1


if __name__ == "__main__":
    sys.exit(main())
