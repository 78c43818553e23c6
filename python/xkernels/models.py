"""Reference models for the model-level benchmarks and tests (plain torch.nn, no xkernels ops).

- ``resnet50()`` / ``ResNet``: ResNet-50 as in He et al., "Deep Residual Learning for Image
  Recognition" (2015), Table 1 (50-layer column): a 7x7/2 stem conv with 64 channels, 3x3/2 max
  pooling, four stages of [3, 4, 6, 3] bottleneck blocks (1x1, 3x3, 1x1 convolutions with 64, 128,
  256, 512 channels, expanded 4x), BatchNorm after every convolution, projection shortcuts (the
  paper's option B: a strided 1x1 conv + BN where the shape changes, identity otherwise),
  global average pooling and a 1000-way fully connected layer. As in the paper, a stage's
  downsampling stride sits on the block's first 1x1 conv (3.8 GFLOPs per 224x224 image);
  ``stride_in_3x3=True`` moves it to the 3x3 conv ("ResNet-50 v1.5", torchvision's choice).
  Initialization as torchvision's (Kaiming-normal fan_out convs, BN weight 1, bias 0), so the
  block structure mirrors ``torchvision.models.resnet50`` (which cannot be installed here).
- ``TransformerEncoder``: a pre-LN encoder (x + attn(ln1(x)); x + ffn(ln2(x)); final LayerNorm),
  multi-head self-attention through ``F.scaled_dot_product_attention``, FFN = Linear, ReLU,
  Linear in an ``nn.Sequential`` (so ``xkernels.optimize`` fuses the Linear+ReLU).
- ``mlp()``: an ``nn.Sequential`` of Linear+ReLU blocks.
- ``calibrate_batchnorm(model, x)``: fills every BatchNorm's running statistics from one batch
  (so eval-mode BN and its folding are not the identity).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "Bottleneck",
    "ResNet",
    "resnet50",
    "SelfAttention",
    "EncoderLayer",
    "TransformerEncoder",
    "mlp",
    "calibrate_batchnorm",
]


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 convolutions, each followed by BatchNorm, ReLU after the first two and after
    the residual addition (one ReLU module used three times, as torchvision's block)."""

    expansion = 4

    def __init__(
        self,
        in_channels: int,
        width: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        stride_in_3x3: bool = False,
    ):
        super().__init__()
        out_channels = width * self.expansion
        s1, s3 = (1, stride) if stride_in_3x3 else (stride, 1)
        self.conv1 = nn.Conv2d(in_channels, width, 1, stride=s1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=s3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(
        self,
        layers=(3, 4, 6, 3),
        widths=(64, 128, 256, 512),
        num_classes: int = 1000,
        stem_channels: int = 64,
        stride_in_3x3: bool = False,
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(3, stem_channels, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem_channels)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        channels = stem_channels
        stages = []
        for i, (blocks, width) in enumerate(zip(layers, widths)):
            stride = 1 if i == 0 else 2
            out = width * Bottleneck.expansion
            down = None
            if stride != 1 or channels != out:
                down = nn.Sequential(nn.Conv2d(channels, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))
            seq = [Bottleneck(channels, width, stride, down, stride_in_3x3)]
            seq += [Bottleneck(out, width, 1, None, stride_in_3x3) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*seq))
            channels = out
        self.layer1, self.layer2, self.layer3, self.layer4 = (stages + [nn.Identity()] * 4)[:4]
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 1000, stride_in_3x3: bool = False) -> ResNet:
    """ResNet-50 (25.6 M parameters; see the module docstring)."""
    return ResNet((3, 4, 6, 3), (64, 128, 256, 512), num_classes, stride_in_3x3=stride_in_3x3)


class SelfAttention(nn.Module):
    """Multi-head self-attention: one Linear for q, k, v; scaled dot-product attention; output Linear."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class EncoderLayer(nn.Module):
    """Pre-LN transformer layer: x + attn(ln1(x)), then x + ffn(ln2(x)); ffn = Linear, ReLU, Linear."""

    def __init__(self, d_model: int, heads: int, ffn: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn), nn.ReLU(), nn.Linear(ffn, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerEncoder(nn.Module):
    """`layers` pre-LN encoder layers and a final LayerNorm; input [batch, tokens, d_model]."""

    def __init__(self, layers: int = 4, d_model: int = 768, heads: int = 12, ffn: int = 3072):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, heads, ffn) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.ln(x)


def mlp(sizes=(1024, 4096, 4096, 4096, 1024)) -> nn.Sequential:
    """Linear+ReLU blocks: sizes[0] -> sizes[1] -> ... -> sizes[-1], a ReLU after every Linear."""
    mods: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        mods += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*mods)


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, x: Tensor) -> nn.Module:
    """Sets every BatchNorm's running statistics to those of one forward pass over `x` (train-mode
    BN with momentum 1), then restores each module's mode and momentum. Returns `model`."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    modes = {m: m.training for m in model.modules()}
    saved = [(m, m.momentum) for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = 1.0
    model.train()
    try:
        model(x)
    finally:
        for m, mom in saved:
            m.momentum = mom
        for m, t in modes.items():
            m.training = t
    return model
