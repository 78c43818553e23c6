#!/usr/bin/env python3
"""Error of conv2d_packed's Winograd F(2x2, 3x3) path against the float64 oracle, next to the direct kernel's and
torch's own float32 error, for ResNet-50's 3x3 stride-1 layer shapes (batch 1, channels_last) and several input
kinds. Prints max |err| / max |ref| per (layer, kind) and the parity budget (xkernels.tolerances policy 2).

Usage (SYCL backend): XKERNELS_BACKEND=sycl PYTHONPATH=python python scripts/conv2d_winograd_error.py
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import within_budget

LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]
KINDS = {
    "randn": lambda x, w: (x, w),
    "relu_acts": lambda x, w: (x.clamp_min(0), w),  # post-ReLU activations: all non-negative
    "offset+100": lambda x, w: (x + 100.0, w),
    "wide_range": lambda x, w: (x * torch.exp(torch.empty_like(x).uniform_(-7, 7)), w),
    "large_w": lambda x, w: (x, w * 1e4),
}


def main() -> None:
    torch.manual_seed(0)
    print("layer            kind          wino      direct    torch     wino/direct  wino/budget")
    worst = 0.0
    for C, H in LAYERS:
        for kind, make in KINDS.items():
            x, w = make(torch.randn(1, C, H, H), torch.randn(C, C, 3, 3) / (9 * C) ** 0.5)
            x = x.contiguous(memory_format=torch.channels_last)
            ref = F.conv2d(x.double(), w.double(), padding=1)
            scale = float(ref.abs().max())
            packed = xkernels.pack_conv2d_weight(w)
            errs = {}
            with torch.no_grad():
                for mode in ("1", "0"):
                    os.environ["XKERNELS_CONV_WINOGRAD"] = mode
                    out = xkernels.conv2d_packed(x, packed, w.shape, None, padding=1)
                    errs[mode] = float((out.double() - ref).abs().max()) / scale
                tout = F.conv2d(x, w, padding=1)
            terr = float((tout.double() - ref).abs().max()) / scale
            os.environ["XKERNELS_CONV_WINOGRAD"] = "1"
            with torch.no_grad():
                out = xkernels.conv2d_packed(x, packed, w.shape, None, padding=1)
            _, err, allowed = within_budget(out, tout, ref, torch.float32)
            worst = max(worst, err / allowed)
            print(
                f"C={C:3d} {H:2d}x{H:<2d}     {kind:12s}  {errs['1']:.2e}  {errs['0']:.2e}  {terr:.2e}  "
                f"{errs['1'] / errs['0']:6.2f}       {err / allowed:.3f}"
            )
    print(f"worst error / parity budget: {worst:.3f}")


if __name__ == "__main__":
    main()
