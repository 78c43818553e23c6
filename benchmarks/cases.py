"""Benchmark cases for each op, with explicit work formulas.

FLOPs: fused_linear_relu fwd 2*M*N*K (+ bias/ReLU ignored); backward adds dX and dW GEMMs (4*M*N*K).
conv2d fwd 2*N*O*OH*OW*(C/groups)*KH*KW; backward x2 more. layer_norm is memory bound: bytes moved
= read x + write y (+ weight/bias) fwd; backward reads x, dy, writes dx (+ stats), 3x the tensor.
layer_norm.out: the same bytes as the layer_norm forward (read x + write y), so its GB/s compare
directly with the "copy" provider's (out.copy_(x): the copy bandwidth). FusedLinearReLU (module-level
inference, no_grad): 2*M*N*K as the op.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .harness import Case, wall_timer


def no_grad(fn):
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


# PyTorch's own computation of each op: the "torch" provider, and the scale of each case's error budget.
TORCH_OPS = {
    "fused_linear_relu": lambda x, w, b=None: torch.relu(F.linear(x, w, b)),
    "conv2d": F.conv2d,
    "layer_norm": F.layer_norm,
    # torch has no out= for layer_norm: torch's row is F.layer_norm with a fresh output (what a caller gets).
    "layer_norm.out": lambda x, ns, w, b, out: F.layer_norm(x, ns, w, b),
    # Module-level inference (linear_module_cases): torch.nn.Linear + ReLU's computation.
    "FusedLinearReLU": no_grad(lambda m, x: torch.relu(F.linear(x, m.weight, m.bias))),
    # conv_module_cases: torch.nn.Conv2d's computation.
    "Conv2d": no_grad(lambda m, x: F.conv2d(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)),
}


def _case(op, mode, dtype, shape, make, oracle, work, metric, big, device) -> Case:
    """A Case whose error budget is scaled by PyTorch's own result, timed by CUDA events on CUDA tensors."""
    timer = wall_timer
    if torch.device(device).type == "cuda":
        from .harness import cuda_event_timer as timer
    return Case(
        op,
        mode,
        dtype,
        shape,
        make,
        oracle,
        work,
        metric,
        big=big,
        torch_same=lambda a, k: TORCH_OPS[op](*a, **k),
        timer=timer,
    )


LINEAR_M = [1, 8, 64, 512, 4096]
LINEAR_NK = [1024, 4096]
# ResNet-50's distinct stride-1 3x3 and 1x1 conv layers (C_in, C_out, H=W): the tiling table's cases
# (scripts/tune_conv2d.py).
RESNET50_3X3 = [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)]
RESNET50_1X1 = [(64, 256, 56), (256, 64, 56), (512, 128, 28), (1024, 256, 14), (2048, 512, 7)]
# Every distinct conv layer of xkernels.models.resnet50 (v1: a stage's stride sits on its first 1x1 conv and on the
# downsample path), as (C_in, C_out, H=W of the input, kernel, stride), padding kernel // 2: the stem, 9 stride-1
# 1x1 layers, 4 stride-1 3x3 layers and the 6 stride-2 1x1 layers (the conv suites' default).
RESNET50_LAYERS = [
    (3, 64, 224, 7, 2),
    (64, 64, 56, 1, 1),
    (64, 64, 56, 3, 1),
    (64, 256, 56, 1, 1),
    (256, 64, 56, 1, 1),
    (256, 128, 56, 1, 2),
    (256, 512, 56, 1, 2),
    (128, 128, 28, 3, 1),
    (128, 512, 28, 1, 1),
    (512, 128, 28, 1, 1),
    (512, 256, 28, 1, 2),
    (512, 1024, 28, 1, 2),
    (256, 256, 14, 3, 1),
    (256, 1024, 14, 1, 1),
    (1024, 256, 14, 1, 1),
    (1024, 512, 14, 1, 2),
    (1024, 2048, 14, 1, 2),
    (512, 512, 7, 3, 1),
    (512, 2048, 7, 1, 1),
    (2048, 512, 7, 1, 1),
]
LAYER_NORM = [(2048, 1024), (8192, 1024), (2048, 4096), (512, 8192)]


def _g(seed):
    return torch.Generator().manual_seed(seed)


def linear_cases(dtype, modes, ms=LINEAR_M, nks=LINEAR_NK, mnk=None, device="cpu"):
    """Square N = K = nk for every m (or the given (M, N, K) triples)."""
    out = []
    for m, n, k in mnk or [(m, nk, nk) for nk in nks for m in ms]:
        for mode in modes:

            def make(m=m, n=n, k=k, mode=mode):
                g = _g(m * 7 + k + (n != k) * n)
                rg = mode == "fwd+bwd"
                x = (torch.randn(m, k, generator=g) / k**0.5).to(device, dtype).requires_grad_(rg)
                w = torch.randn(n, k, generator=g).to(device, dtype).requires_grad_(rg)
                b = torch.randn(n, generator=g).to(device, dtype).requires_grad_(rg)
                return (x, w, b), {}

            flops = 2.0 * m * n * k * (3 if mode == "fwd+bwd" else 1)
            shape = f"M={m},N=K={n}" if n == k else f"M={m},N={n},K={k}"
            out.append(
                _case(
                    "fused_linear_relu",
                    mode,
                    dtype,
                    shape,
                    make,
                    lambda a, kw: torch.relu(F.linear(*(t.detach().double() for t in a))),
                    flops,
                    "GFLOP/s",
                    m * n * k > 64 * 1024 * 1024,
                    device,
                )
            )
    return out


def conv_cases(dtype, modes, batches=(1, 8), layouts=("nchw", "channels_last"), layers=None, device="cpu"):
    """layers: (C_in, C_out, H=W, kernel[, stride, groups]); padding kernel // 2; default RESNET50_LAYERS."""
    layers = layers or RESNET50_LAYERS
    out = []
    for c, o, hw, k, *sg in layers:
        s, groups = (*sg, 1, 1)[:2] if sg else (1, 1)
        for n in batches:
            for layout in layouts:
                for mode in modes:

                    def make(c=c, o=o, hw=hw, k=k, n=n, s=s, groups=groups, layout=layout, mode=mode):
                        g = _g(c + o + hw + n)
                        rg = mode == "fwd+bwd"
                        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
                        x = torch.randn(n, c, hw, hw, generator=g).to(device, dtype).contiguous(memory_format=fmt)
                        fan_in = c // groups * k * k
                        w = (torch.randn(o, c // groups, k, k, generator=g) / fan_in**0.5).to(device, dtype)
                        w = w.contiguous(memory_format=fmt)
                        b = torch.randn(o, generator=g).to(device, dtype)
                        for t in (x, w, b):
                            t.requires_grad_(rg)
                        return (x, w, b), {"padding": k // 2, "stride": s, "groups": groups}

                    ohw = (hw + 2 * (k // 2) - k) // s + 1
                    flops = 2.0 * n * o * ohw * ohw * (c // groups) * k * k * (3 if mode == "fwd+bwd" else 1)
                    extra = (f" s={s}" if s != 1 else "") + (f" g={groups}" if groups != 1 else "")
                    out.append(
                        _case(
                            "conv2d",
                            mode,
                            dtype,
                            f"{k}x{k} C={c} O={o} HW={hw} N={n}{extra} {layout}",
                            make,
                            lambda a, kw: F.conv2d(*(t.detach().double() for t in a), **kw),
                            flops,
                            "GFLOP/s",
                            flops > 2e9,
                            device,
                        )
                    )
    return out


def layer_norm_cases(dtype, modes, shapes=LAYER_NORM, device="cpu"):
    out = []
    for rows, hidden in shapes:
        for mode in modes:

            def make(rows=rows, hidden=hidden, mode=mode):
                g = _g(rows + hidden)
                rg = mode == "fwd+bwd"
                x = torch.randn(rows, hidden, generator=g).to(device, dtype).requires_grad_(rg)
                w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(device, dtype).requires_grad_(rg)
                b = (0.1 * torch.randn(hidden, generator=g)).to(device, dtype).requires_grad_(rg)
                return (x, [hidden], w, b), {}

            elt = torch.empty((), dtype=dtype).element_size()
            nbytes = rows * hidden * elt * (2 if mode == "fwd" else 5)
            out.append(
                _case(
                    "layer_norm",
                    mode,
                    dtype,
                    f"{rows}x{hidden}",
                    make,
                    lambda a, k: F.layer_norm(
                        a[0].detach().double(), a[1], a[2].detach().double(), a[3].detach().double()
                    ),
                    nbytes,
                    "GB/s",
                    rows * hidden > 4 * 1024 * 1024,
                    device,
                )
            )
    return out


def layer_norm_out_cases(dtype, shapes=LAYER_NORM):
    """layer_norm into a preallocated output (forward only: layer_norm.out does not differentiate)."""
    out = []
    for rows, hidden in shapes:

        def make(rows=rows, hidden=hidden):
            g = _g(rows + hidden)
            x = torch.randn(rows, hidden, generator=g).to(dtype)
            w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(dtype)
            b = (0.1 * torch.randn(hidden, generator=g)).to(dtype)
            return (x, [hidden], w, b), {"out": torch.empty_like(x)}

        elt = torch.empty((), dtype=dtype).element_size()
        out.append(
            _case(
                "layer_norm.out",
                "fwd",
                dtype,
                f"{rows}x{hidden}",
                make,
                lambda a, k: F.layer_norm(a[0].double(), a[1], a[2].double(), a[3].double()),
                rows * hidden * elt * 2,
                "GB/s",
                rows * hidden > 4 * 1024 * 1024,
                "cpu",
            )
        )
    return out


def linear_module_cases(dtype, ms=(64, 512), nk=1024):
    """xkernels.nn.FusedLinearReLU inference (no_grad) with its cached packed weight, vs the plain op
    (xkernels[sycl-unpacked]) and torch's relu(linear)."""
    import xkernels

    out = []
    for m in ms:

        def make(m=m):
            torch.manual_seed(m + nk)
            mod = xkernels.nn.FusedLinearReLU(nk, nk, dtype=dtype, pack_weight=True)  # inference: opted in
            x = torch.randn(m, nk).to(dtype)
            return (mod, x), {}

        out.append(
            _case(
                "FusedLinearReLU",
                "fwd",
                dtype,
                f"M={m},N=K={nk}",
                make,
                lambda a, k: torch.relu(
                    F.linear(a[1].double(), a[0].weight.detach().double(), a[0].bias.detach().double())
                ),
                2.0 * m * nk * nk,
                "GFLOP/s",
                m * nk * nk > 64 * 1024 * 1024,
                "cpu",
            )
        )
    return out


def conv_module_cases(dtype, batches=(1, 8), layers=None, layouts=("nchw", "channels_last")):
    """xkernels.nn.Conv2d inference (no_grad) with its cached packed weight, on ResNet-50's layers in both memory
    formats (channels_last: input and weight, as optimize() leaves a conv model; shape label "CL"), vs the plain
    op re-packing per call (xkernels[sycl-unpacked]), torch's F.conv2d and torch.compile with freezing.
    layers: (C_in, C_out, H=W, kernel[, stride]); padding kernel // 2; default RESNET50_LAYERS."""
    import xkernels

    layers = layers or RESNET50_LAYERS
    out = []
    for c, o, hw, k, *st in layers:
        s = st[0] if st else 1
        for n in batches:
            for layout in layouts:
                fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format

                def make(c=c, o=o, hw=hw, k=k, s=s, n=n, fmt=fmt):
                    g = _g(c + o + hw + n)
                    mod = xkernels.nn.Conv2d(c, o, k, stride=s, padding=k // 2, dtype=dtype)
                    with torch.no_grad():
                        mod.weight.copy_(torch.randn(o, c, k, k, generator=g) / (c * k * k) ** 0.5)
                        mod.bias.copy_(torch.randn(o, generator=g))
                    mod.to(memory_format=fmt)
                    mod.pack_weight = True  # inference: opted in
                    return (mod, torch.randn(n, c, hw, hw, generator=g).to(dtype).contiguous(memory_format=fmt)), {}

                ohw = (hw + 2 * (k // 2) - k) // s + 1
                flops = 2.0 * n * o * ohw * ohw * c * k * k
                out.append(
                    _case(
                        "Conv2d",
                        "fwd",
                        dtype,
                        f"{k}x{k} C={c} O={o} HW={hw} N={n}"
                        + (f" s={s}" if s != 1 else "")
                        + (" CL" if layout == "channels_last" else ""),
                        make,
                        lambda a, kw: F.conv2d(
                            a[1].double(),
                            a[0].weight.detach().double(),
                            a[0].bias.detach().double(),
                            stride=a[0].stride,
                            padding=a[0].padding,
                        ),
                        flops,
                        "GFLOP/s",
                        flops > 2e9,
                        "cpu",
                    )
                )
    return out
