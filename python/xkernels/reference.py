"""Pure-PyTorch definitions of the xkernels ops: the float64 oracles of the parity harness,
and PyTorch's own same-dtype implementation that the error budget is measured against.

Every function here is plain torch code that works in any dtype; called on float64 CPU
tensors (``oracle()`` does the casting) it is the oracle. ``torch_ops()`` is a context in
which every ``torch.ops.xkernels.*`` call (forward and backward, eager or traced by
autograd) runs the matching PyTorch/ATen ops instead, in the caller's dtype and device: the
"torch" pseudo-backend of the parity reports, for whole models as well as single ops.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C
from .dtypes import accumulation_dtype

__all__ = [
    "fused_linear_relu",
    "conv2d",
    "layer_norm",
    "FUNCTIONS",
    "oracle",
    "to_oracle",
    "torch_ops",
    "conv2d_pack_layout",
]


def fused_linear_relu(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, relu_mask: Tensor | None = None
) -> Tensor:
    """relu(input @ weight.T + bias).

    With ``relu_mask`` (a boolean tensor of the output's shape) the ReLU is replaced by a
    multiplication with that fixed mask. The gradient then flows exactly where the mask is
    set — this is how the harness checks a backend's backward: the op's backward is defined
    by its own forward output (grad flows where output > 0), so its oracle must use the same
    mask, not the float64 forward's, which can differ where the pre-activation is ~0.
    """
    z = F.linear(input, weight, bias)
    return F.relu(z) if relu_mask is None else z * relu_mask.to(z.dtype)


def conv2d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """torch.nn.functional.conv2d."""
    with warnings.catch_warnings():  # 'same' with an even kernel: "may require a zero-padded copy"
        warnings.filterwarnings("ignore", message=".*padding='same'.*", category=UserWarning)
        return F.conv2d(input, weight, bias, stride, padding, dilation, groups)


def layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """torch.nn.functional.layer_norm."""
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    return F.layer_norm(input, list(normalized_shape), weight, bias, eps)


FUNCTIONS = {"fused_linear_relu": fused_linear_relu, "conv2d": conv2d, "layer_norm": layer_norm}


def to_oracle(t):
    """A floating-point tensor as a float64 CPU copy (leaf, detached); anything else unchanged."""
    if isinstance(t, Tensor) and t.is_floating_point():
        return t.detach().to(device="cpu", dtype=torch.float64)
    return t


def oracle(op: str, *args, **kwargs) -> Tensor:
    """The float64 CPU result of ``op`` for the given (any dtype/device) arguments."""
    return FUNCTIONS[op](*[to_oracle(a) for a in args], **{k: to_oracle(v) for k, v in kwargs.items()})


# ---------------------------------------------------------------------------- torch pseudo-backend


def _flat2(t: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-1])


def _empty(like: Tensor) -> Tensor:
    return like.new_empty((0,))


def _t_fused_linear_relu_backward(grad_output, input, weight, output, output_mask):
    # What autograd does for relu(linear(...)) in this dtype, with the mask of the given output.
    g = grad_output * (output > 0).to(grad_output.dtype)
    g2, x2 = _flat2(g), _flat2(input)
    gi = (g2 @ weight).reshape(input.shape) if output_mask[0] else _empty(input)
    gw = g2.t() @ x2 if output_mask[1] else _empty(weight)
    gb = g2.sum(0) if output_mask[2] else _empty(weight)
    return gi, gw, gb


def _t_conv2d_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask):
    batched = input.dim() == 4
    x = input if batched else input.unsqueeze(0)
    g = grad_output if batched else grad_output.unsqueeze(0)
    gi, gw, gb = torch.ops.aten.convolution_backward(
        g,
        x,
        weight,
        [weight.shape[0]],
        list(stride),
        list(padding),
        list(dilation),
        False,
        [0, 0],
        groups,
        list(output_mask),
    )
    gi = (gi if batched else gi.squeeze(0)) if output_mask[0] else _empty(input)
    return gi, gw if output_mask[1] else _empty(weight), gb if output_mask[2] else _empty(weight)


def _t_layer_norm_forward(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    out, mean, rstd = torch.ops.aten.native_layer_norm(input, list(normalized_shape), weight, bias, eps)
    sd = accumulation_dtype(input.dtype)  # the statistics' dtype
    return out, mean.to(sd), rstd.to(sd)


def _t_layer_norm_backward(grad_output, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    mask = [output_mask[0], output_mask[1] and weight is not None, output_mask[2] and bias is not None]
    try:
        gi, gw, gb = torch.ops.aten.native_layer_norm_backward(
            grad_output, input, list(normalized_shape), mean, rstd, weight, bias, mask
        )
    except RuntimeError:
        # ATen's CPU kernels keep half/bfloat16 statistics in the input dtype (CUDA's in float32):
        # the statistics came from ATen's own forward, so this cast back is exact.
        gi, gw, gb = torch.ops.aten.native_layer_norm_backward(
            grad_output, input, list(normalized_shape), mean.to(input.dtype), rstd.to(input.dtype), weight, bias, mask
        )
    return (gi if mask[0] else _empty(input), gw if mask[1] else _empty(input), gb if mask[2] else _empty(input))


def _t_conv2d_relu(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, residual=None):
    y = F.conv2d(input, weight, bias, stride, padding, dilation, groups)
    return torch.relu(y if residual is None else y + residual)


def conv2d_pack_layout(weight_shape, groups: int, dtype: torch.dtype):
    """(lanes over groups?, lanes, pad) of pack_conv2d_weight: C++'s rule (shapes.h conv2d_pack_layout, through
    xkernels._C). pad is G padded to the lanes (lanes over groups) or the width of the output-channel panels."""
    group_lanes, lanes, pad, _, _ = _C.conv2d_pack_layout(
        [int(n) for n in weight_shape], int(groups), str(dtype).removeprefix("torch.")
    )
    return group_lanes, lanes, pad


def conv2d_pack_winograd(weight_shape, groups: int, dtype: torch.dtype) -> int:
    """Element offset of the Winograd weights in pack_conv2d_weight's result (0: none; C++'s rule)."""
    return _C.conv2d_pack_layout([int(n) for n in weight_shape], int(groups), str(dtype).removeprefix("torch."))[4]


def winograd_weight(weight):
    """U = G g G^T of F(2x2, 3x3) per (output, input) channel pair, [O, C, 4, 4], in the operation order of
    kernels/conv2d.hpp's wino_weight_transform (rows, then columns): bit-identical to the packed U."""

    def rows(a, dim):
        a0, a1, a2 = a.select(dim, 0), a.select(dim, 1), a.select(dim, 2)
        return torch.stack([a0, ((a0 + a1) + a2) * 0.5, ((a0 - a1) + a2) * 0.5, a2], dim)

    return rows(rows(weight, 2), 3)


def _t_pack_conv2d_weight(weight, groups=1):
    """pack_conv2d_weight in torch ops: the layout shapes.h chooses, arranged here independently of the C++
    packing code."""
    O, Cpg, KH, KW = weight.shape
    G = groups
    w5 = weight.reshape(G, O // G, Cpg, KH, KW)
    group_lanes, _, pad = conv2d_pack_layout(weight.shape, groups, weight.dtype)
    if group_lanes:  # [KH, KW, Cpg, Opg, G_pad]
        out = weight.new_zeros(KH, KW, Cpg, O // G, pad)
        out[..., :G] = w5.permute(3, 4, 2, 1, 0)
        return out.reshape(-1)
    P, panels = pad, -(-(O // G) // pad)  # [G, panels, KH, KW, Cpg, P] + one zero
    rows = weight.new_zeros(G, KH, KW, Cpg, panels * P)
    rows[..., : O // G] = w5.permute(0, 3, 4, 2, 1)
    out = rows.view(G, KH, KW, Cpg, panels, P).permute(0, 4, 1, 2, 3, 5)
    packed = torch.cat([out.reshape(-1), weight.new_zeros(1)])
    offset = conv2d_pack_winograd(weight.shape, groups, weight.dtype)
    if offset == 0:
        return packed
    # Winograd weights: zeros up to the 64-byte boundary, then U as [16, panels, C, P], float32 for every type (for
    # half and bfloat16 from the weight widened to float32, its floats stored as pairs of 16-bit elements)
    u = weight.new_zeros(4, 4, Cpg, panels * P, dtype=torch.float32)
    u[..., :O] = winograd_weight(weight.float()).permute(2, 3, 1, 0)
    u = u.view(16, Cpg, panels, P).permute(0, 2, 1, 3).contiguous().view(-1).view(weight.dtype)
    return torch.cat([packed, weight.new_zeros(offset - packed.numel()), u])


def _t_unpack_conv2d_weight(packed, weight_shape, groups):
    O, Cpg, KH, KW = weight_shape
    G = groups
    group_lanes, _, pad = conv2d_pack_layout(weight_shape, groups, packed.dtype)
    if group_lanes:
        return packed.view(KH, KW, Cpg, O // G, pad)[..., :G].permute(4, 3, 2, 0, 1).reshape(weight_shape)
    panels = -(-(O // G) // pad)
    body = packed[: G * panels * KH * KW * Cpg * pad].view(G, panels, KH, KW, Cpg, pad)
    rows = body.permute(0, 2, 3, 4, 1, 5).reshape(G, KH, KW, Cpg, panels * pad)[..., : O // G]
    return rows.permute(0, 4, 3, 1, 2).reshape(weight_shape)


def _t_conv2d_packed(
    input, packed_weight, weight_shape, bias, stride, padding, dilation, groups, residual=None, relu=False
):
    weight = _t_unpack_conv2d_weight(packed_weight, list(weight_shape), groups)
    if relu:
        return _t_conv2d_relu(input, weight, bias, stride, padding, dilation, groups, residual)
    return F.conv2d(input, weight, bias, stride, padding, dilation, groups)


_TORCH_IMPLS = {
    "fused_linear_relu": fused_linear_relu,
    "fused_linear_relu_backward": _t_fused_linear_relu_backward,
    "conv2d": F.conv2d,
    "conv2d_backward": _t_conv2d_backward,
    "conv2d_relu": _t_conv2d_relu,
    "pack_conv2d_weight": _t_pack_conv2d_weight,
    "conv2d_packed": _t_conv2d_packed,
    "layer_norm_forward": _t_layer_norm_forward,
    "layer_norm_backward": _t_layer_norm_backward,
}


class _TorchOpsMode(TorchDispatchMode):
    """Replaces xkernels ops below autograd (so xkernels' own autograd formulas still run and
    call the backward ops, which are replaced too). Composite ops (layer_norm,
    conv2d.padding) decompose before they get here."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "xkernels":
            name = func._schema.name.split("::", 1)[1]
            impl = _TORCH_IMPLS.get(name)
            if impl is None:  # pragma: no cover - a new op without a torch implementation
                raise NotImplementedError(f"xkernels.reference.torch_ops: no PyTorch implementation of xkernels.{name}")
            self.calls[name] = self.calls.get(name, 0) + 1
            return impl(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def torch_ops():
    """Inside the block, every xkernels op runs PyTorch's own ops in the same dtype and device.
    Yields a dict counting the replaced calls per op."""
    mode = _TorchOpsMode()
    with mode:
        yield mode.calls
