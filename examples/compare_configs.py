"""Where does a model diverge between two ways of running it? A small transformer encoder (plain
PyTorch, no xkernels module) compared module by module across two configurations.

As a script (default: float32 against bfloat16 autocast; --plot writes error against module index):

    python examples/compare_configs.py
    python examples/compare_configs.py --configs eager,compile --plot compare.png
    python examples/compare_configs.py --configs cpu,cuda          # on a machine with a GPU

or as factories for the command line (each returns (model, inputs)):

    python -m xkernels parity examples/compare_configs.py:make --configs fp32,bf16-autocast
    python -m xkernels parity examples/compare_configs.py:encoder12 --configs fp32,bf16-autocast
    python -m xkernels parity examples/compare_configs.py:resnet50 --configs fp32,bf16-autocast

`encoder12` (a 12-layer encoder of BERT-base width) and `resnet50` (ResNet-50's layout, written out
here, randomly initialised) are the sizes docs/tools.md times the comparison on.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

import xkernels


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class Encoder(nn.Module):
    """Token and position embeddings, pre-norm encoder layers, a final norm and a classifier."""

    def __init__(self, vocab=1000, d=64, heads=4, layers=2, ffn=256, max_len=128, classes=10, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ffn, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(dim=1))


def _tokens(batch, seq, vocab, device):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1)).to(device)


def make(device: str | None = None):
    """(model, inputs): a seeded 2-layer encoder (d=64) and a batch of 4 sequences of 32 tokens."""
    torch.manual_seed(0)
    device = device or xkernels.best_device()
    return Encoder().to(device), _tokens(4, 32, 1000, device)


def encoder12():
    """(model, inputs): 12 layers of BERT-base width (d=768, 12 heads, ffn 3072; 85M parameters of
    layers) on 2 sequences of 64 tokens, on the CPU."""
    torch.manual_seed(0)
    model = Encoder(vocab=8000, d=768, heads=12, layers=12, ffn=3072, max_len=64, classes=16)
    return model, _tokens(2, 64, 8000, "cpu")


# ----------------------------------------------------------------------------- ResNet-50's layout


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """ResNet-50's layers (3, 4, 6, 3 bottlenecks; 25.6M parameters), randomly initialised."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layer = []
            for i in range(blocks):
                layer.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = 4 * width
            stages.append(nn.Sequential(*layer))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


def resnet50():
    """(model, inputs): ResNet-50 on 2 images of 224x224, on the CPU."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    return ResNet50(), x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="fp32,bf16-autocast", help="two (or more) configurations, comma-separated")
    ap.add_argument("--plot", metavar="FILE", help="write error against module index (matplotlib)")
    ap.add_argument("--details", default="all", choices=["none", "failing", "all"])
    args = ap.parse_args(argv)
    model, tokens = make()
    rep = xkernels.parity.compare(model, tokens, args.configs.split(","), name="Encoder(2 layers, d=64)")
    rep.print(details=args.details)
    if args.plot:
        rep.plot(args.plot)
        print(f"plot written to {args.plot}")
    for side in rep.sides:
        outs = [e for e in side.entries if e.kind == "output" and e.error.scale > 0]
        worst = max(outs, key=lambda e: e.error.max_abs / e.error.scale, default=None)
        if worst is not None and math.isfinite(worst.error.max_abs):
            rel = worst.error.max_abs / worst.error.scale
            print(f"{side.backend}: largest output error {rel:.2e} of the output's magnitude, at {worst.label}")
    return 0 if rep.passed else 1


if __name__ == "__main__":
    sys.exit(main())
