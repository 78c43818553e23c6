"""Typed Python entry points, fake (meta) implementations and autograd for the
xkernels ops. The ops themselves are registered in C++ (csrc/registration.cpp) and
dispatch by device; this layer stays thin."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import _C
from .dtypes import DTYPES, accumulation_dtype

_ops = torch.ops.xkernels

_IntOr2 = int | Sequence[int]

_below_autograd = torch._C._AutoDispatchBelowAutograd


def _call(op, *args):
    """``op(*args)`` for the ops whose autograd kernel is torch.library's, in Python (``register_autograd`` below:
    fused_linear_relu, conv2d, conv2d_relu, and layer_norm through layer_norm_forward), straight to the device
    kernel where the call builds no autograd graph.

    That autograd kernel runs on every call, with or without grad: the dispatcher calls into Python, which
    redispatches below autograd. That round trip cost 12-20 us per call on a 2-vCPU AMD EPYC (AVX2), more than a
    small op's kernel (a 1 x 768 layer_norm on the reference backend: 22 us through it, 10 us without;
    docs/performance.md "Per-call cost"). Where grad mode is off or no argument requires grad, the kernel would
    only redispatch, so this does the same directly. Everything else goes through the dispatcher as usual: a call
    that needs a graph, torch.compile's tracing, and any active TorchDispatchMode (which must see the ops the
    autograd layer produces, e.g. layer_norm_forward). The out= and packed ops have C++ autograd kernels (no round
    trip; layer_norm.out's also bumps `out`'s version counter), so they are called directly."""
    if (
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack() > 0
        or (torch.is_grad_enabled() and torch._C._any_requires_grad(*args))
    ):
        return op(*args)
    with _below_autograd():
        return op(*args)


def _pair(v: _IntOr2, name: str, op: str) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = list(v)
    if len(v) == 1:
        return [v[0], v[0]]
    if len(v) != 2:
        raise ValueError(f"xkernels.{op}: argument '{name}' must be an int or a pair of ints, got {v}")
    return v


# ------------------------------------------------------------------ conv2d shape rules
# The shape rules are C++'s (csrc/include/xkernels/shapes.h), exported through xkernels._C for the fakes below
# (ints or SymInts: they run on meta and fake tensors, with SymInt sizes under torch.compile) and for
# xkernels.nn; string padding ('same' / 'valid') is resolved by the ops' C++ .padding overloads.


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def conv2d_output_shape(input_shape: Sequence[int], weight_shape: Sequence[int], stride, padding, dilation) -> list:
    """F.conv2d's output shape for an input and a weight of these shapes (3-D or 4-D input; stride, padding and
    dilation ints or pairs, padding also 'same' / 'valid'), for valid arguments: anything else gets the op's
    own error when it runs."""
    s, d = _pair(stride, "stride", "conv2d"), _pair(dilation, "dilation", "conv2d")
    if padding == "same":  # stride 1 only: the output has the input's spatial size, by definition
        spatial = list(input_shape[-2:])
    else:
        p = [0, 0] if padding == "valid" else _pair(padding, "padding", "conv2d")
        spatial = [
            _C.conv2d_out_size(n, k, si, pi, di)
            for n, k, si, pi, di in zip(input_shape[-2:], weight_shape[-2:], s, p, d, strict=True)
        ]
    return [*input_shape[:-3], weight_shape[0], *spatial]


# ------------------------------------------------------------------ public functions


def fused_linear_relu(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """relu(input @ weight.T + bias). input [..., K] (1-D allowed), weight [N, K], bias [N] or None."""
    return _call(_ops.fused_linear_relu, input, weight, bias)


def pack_linear_weight(weight: Tensor) -> Tensor:
    """`weight` [N, K] packed for fused_linear_relu_packed (CPU tensors): [ceil(N / C), K, C] with
    C = 64 columns per panel (32 for float64), zero padded — the SYCL CPU GEMM's operand layout,
    computed once instead of on every call. Not differentiable; a copy, not a view."""
    return _ops.pack_linear_weight(weight)


def fused_linear_relu_packed(input: Tensor, packed_weight: Tensor, bias: Tensor | None, out_features: int) -> Tensor:
    """fused_linear_relu(input, weight, bias) with ``packed_weight = pack_linear_weight(weight)`` and
    ``out_features = weight.shape[0]``. CPU tensors, inference only: with grad mode on, arguments that
    require grad raise (the packed copy is not the parameter; differentiate through fused_linear_relu)."""
    return _ops.fused_linear_relu_packed(input, packed_weight, bias, out_features)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: _IntOr2 = 1,
    padding: _IntOr2 | str = 0,
    dilation: _IntOr2 = 1,
    groups: int = 1,
) -> Tensor:
    """Same semantics as torch.nn.functional.conv2d (including padding='same'/'valid',
    unbatched 3-D input and channels_last)."""
    stride = _pair(stride, "stride", "conv2d")
    dilation = _pair(dilation, "dilation", "conv2d")
    if isinstance(padding, str):
        return _call(_ops.conv2d.padding, input, weight, bias, stride, padding, dilation, groups)
    return _call(_ops.conv2d, input, weight, bias, stride, _pair(padding, "padding", "conv2d"), dilation, groups)


def conv2d_relu(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: _IntOr2 = 1,
    padding: _IntOr2 | str = 0,
    dilation: _IntOr2 = 1,
    groups: int = 1,
    residual: Tensor | None = None,
) -> Tensor:
    """``relu(conv2d(input, weight, bias, stride, padding, dilation, groups) + residual)`` in one op.

    conv2d's semantics (padding ints or 'same'/'valid', unbatched 3-D input, channels_last: the output
    takes conv2d's memory format). ``residual`` (optional) has the output's shape, dtype and device, any
    strides. The sum is formed in the accumulation type and rounded once (eager torch rounds after the
    conv and after the add); the ReLU keeps NaN, as torch.relu. Differentiable in input, weight, bias and
    residual (the gradient flows where the output is not <= 0, as torch.relu's)."""
    op = "conv2d_relu"
    stride, dilation = _pair(stride, "stride", op), _pair(dilation, "dilation", op)
    if isinstance(padding, str):
        return _call(_ops.conv2d_relu.padding, input, weight, bias, stride, padding, dilation, groups, residual)
    return _call(
        _ops.conv2d_relu, input, weight, bias, stride, _pair(padding, "padding", op), dilation, groups, residual
    )


def pack_conv2d_weight(weight: Tensor, groups: int = 1) -> Tensor:
    """`weight` [O, C/groups, KH, KW] packed for conv2d_packed (CPU tensors): a flat copy in the layout the
    SYCL CPU conv2d kernels read (the output channel innermost, zero padded to whole lane vectors; see
    csrc/include/xkernels/shapes.h), made once instead of on every call. Not differentiable."""
    return _ops.pack_conv2d_weight(weight, groups)


def conv2d_packed(
    input: Tensor,
    packed_weight: Tensor,
    weight_shape: Sequence[int],
    bias: Tensor | None = None,
    stride: _IntOr2 = 1,
    padding: _IntOr2 | str = 0,
    dilation: _IntOr2 = 1,
    groups: int = 1,
    residual: Tensor | None = None,
    relu: bool = False,
) -> Tensor:
    """conv2d (``relu=False``; ``residual`` must then be None) or conv2d_relu (``relu=True``) with
    ``packed_weight = pack_conv2d_weight(weight, groups)`` and ``weight_shape = weight.shape``. CPU tensors,
    inference only: with grad mode on, arguments that require grad raise (differentiate through conv2d /
    conv2d_relu with the weight itself)."""
    op = "conv2d_packed"
    if residual is not None and not relu:
        raise ValueError(f"xkernels.{op}: argument 'residual' needs relu=True (the conv2d_relu epilogue)")
    stride, dilation = _pair(stride, "stride", op), _pair(dilation, "dilation", op)
    if isinstance(padding, str):
        return _ops.conv2d_packed.padding(
            input, packed_weight, list(weight_shape), bias, stride, padding, dilation, groups, residual, relu
        )
    padding = _pair(padding, "padding", op)
    return _ops.conv2d_packed(
        input, packed_weight, list(weight_shape), bias, stride, padding, dilation, groups, residual, relu
    )


def layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    *,
    out: Tensor | None = None,
) -> Tensor:
    """Same semantics as torch.nn.functional.layer_norm.

    With ``out=``, the result is written into `out` and `out` is returned (op ``layer_norm.out``):
    inference only (no statistics are saved; with grad mode on, arguments that require grad raise, as
    for torch's out= functions). `out` must have the input's shape, dtype and device (it is not
    resized), must not have elements sharing memory, and must be the input itself (in place) or share
    no memory with input, weight and bias. Any strides are accepted; a non-contiguous `out` is filled
    through a temporary (slower)."""
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    if out is not None:
        return _ops.layer_norm.out(input, list(normalized_shape), weight, bias, eps, out=out)
    return _call(_ops.layer_norm, input, list(normalized_shape), weight, bias, eps)


# ------------------------------------------------------------------ fake implementations
# Shape rules mirror csrc/shapes.cpp; the C++ checks produce the user-facing errors in eager
# mode, these produce the same ones under torch.compile / export.


def _check_dtype_supported(t: Tensor, arg: str, op: str) -> None:
    torch._check(
        t.dtype in DTYPES,
        lambda: f"xkernels.{op}: argument '{arg}' must be float32, float64, float16 or bfloat16, got {t.dtype}",
    )


def _check_same(t: Tensor | None, arg: str, ref: Tensor, ref_arg: str, op: str) -> None:
    """`t` (if given) must share dtype and device with `ref` (as checks.h: check_same_dtype_device).
    Needed here too: a call mixing 'meta' and real tensors dispatches to these fakes."""
    if t is None:
        return
    torch._check(
        t.dtype == ref.dtype,
        lambda: (
            f"xkernels.{op}: argument '{arg}' has dtype {t.dtype} but '{ref_arg}' has dtype {ref.dtype}; "
            "they must match"
        ),
    )
    torch._check(
        t.device == ref.device,
        lambda: (
            f"xkernels.{op}: argument '{arg}' is on device {t.device} but '{ref_arg}' is on device "
            f"{ref.device}; they must be on the same device"
        ),
    )


def _linear_out_shape(input: Tensor, weight: Tensor, bias: Tensor | None, op: str) -> list:
    _check_dtype_supported(input, "input", op)
    _check_same(weight, "weight", input, "input", op)
    _check_same(bias, "bias", input, "input", op)
    torch._check(input.dim() >= 1, lambda: f"xkernels.{op}: argument 'input' must have at least 1 dimension")
    torch._check(weight.dim() == 2, lambda: f"xkernels.{op}: argument 'weight' must be 2-D, got {weight.dim()}-D")
    torch._check(
        weight.shape[1] == input.shape[-1],
        lambda: (
            f"xkernels.{op}: argument 'weight' has shape {tuple(weight.shape)} but input's last dimension "
            f"is K={input.shape[-1]}"
        ),
    )
    if bias is not None:
        torch._check(
            bias.dim() == 1 and bias.shape[0] == weight.shape[0],
            lambda: f"xkernels.{op}: argument 'bias' must have shape [{weight.shape[0]}], got {tuple(bias.shape)}",
        )
    return [*input.shape[:-1], weight.shape[0]]


@torch.library.register_fake("xkernels::fused_linear_relu")
def _fused_linear_relu_fake(input, weight, bias=None):
    return input.new_empty(_linear_out_shape(input, weight, bias, "fused_linear_relu"))


@torch.library.register_fake("xkernels::fused_linear_relu_backward")
def _fused_linear_relu_backward_fake(grad_output, input, weight, output, output_mask):
    _linear_out_shape(input, weight, None, "fused_linear_relu_backward")
    _check_same(grad_output, "grad_output", input, "input", "fused_linear_relu_backward")
    _check_same(output, "output", input, "input", "fused_linear_relu_backward")
    gi = input.new_empty(input.shape) if output_mask[0] else input.new_empty((0,))
    gw = weight.new_empty(weight.shape) if output_mask[1] else weight.new_empty((0,))
    gb = weight.new_empty((weight.shape[0],)) if output_mask[2] else weight.new_empty((0,))
    return gi, gw, gb


@torch.library.register_fake("xkernels::pack_linear_weight")
def _pack_linear_weight_fake(weight):
    _check_dtype_supported(weight, "weight", "pack_linear_weight")
    torch._check(
        weight.dim() == 2, lambda: f"xkernels.pack_linear_weight: argument 'weight' must be 2-D, got {weight.dim()}-D"
    )
    c = _C.linear_pack_columns(_dtype_name(weight.dtype))
    return weight.new_empty(((weight.shape[0] + c - 1) // c, weight.shape[1], c))


@torch.library.register_fake("xkernels::fused_linear_relu_packed")
def _fused_linear_relu_packed_fake(input, packed_weight, bias, out_features):
    op = "fused_linear_relu_packed"
    _check_dtype_supported(input, "input", op)
    _check_same(packed_weight, "packed_weight", input, "input", op)
    _check_same(bias, "bias", input, "input", op)
    torch._check(input.dim() >= 1, lambda: f"xkernels.{op}: argument 'input' must have at least 1 dimension")
    c = _C.linear_pack_columns(_dtype_name(input.dtype))
    expected = [(out_features + c - 1) // c, input.shape[-1], c]
    torch._check(
        list(packed_weight.shape) == expected,
        lambda: (
            f"xkernels.{op}: argument 'packed_weight' has shape {list(packed_weight.shape)} but "
            f"pack_linear_weight of a [out_features={out_features}, K={input.shape[-1]}] weight has shape {expected}"
        ),
    )
    if bias is not None:
        torch._check(
            list(bias.shape) == [out_features],
            lambda: f"xkernels.{op}: argument 'bias' must have shape [{out_features}], got {list(bias.shape)}",
        )
    return input.new_empty([*input.shape[:-1], out_features])


def _conv_problem(input, weight, stride, padding, dilation, groups, op):
    _check_dtype_supported(input, "input", op)
    _check_same(weight, "weight", input, "input", op)
    torch._check(
        input.dim() in (3, 4), lambda: f"xkernels.{op}: argument 'input' must be 3-D or 4-D, got {input.dim()}-D"
    )
    torch._check(weight.dim() == 4, lambda: f"xkernels.{op}: argument 'weight' must be 4-D, got {weight.dim()}-D")
    torch._check(groups > 0, lambda: f"xkernels.{op}: argument 'groups' must be positive, got {groups}")
    for name, v, ok in (
        ("stride", stride, lambda s: s > 0),
        ("dilation", dilation, lambda s: s > 0),
        ("padding", padding, lambda s: s >= 0),
    ):
        torch._check(len(v) == 2, lambda: f"xkernels.{op}: argument '{name}' must have 2 elements, got {v}")
        torch._check(ok(v[0]) and ok(v[1]), lambda: f"xkernels.{op}: argument '{name}' is invalid: {v}")
    batched = input.dim() == 4
    C, H, W = input.shape[-3:]
    O, Cg, KH, KW = weight.shape
    torch._check(
        C % groups == 0, lambda: f"xkernels.{op}: argument 'groups'={groups} must divide the input channels C={C}"
    )
    torch._check(
        O % groups == 0, lambda: f"xkernels.{op}: argument 'groups'={groups} must divide the output channels {O}"
    )
    torch._check(
        Cg * groups == C,
        lambda: f"xkernels.{op}: argument 'weight' has shape {tuple(weight.shape)}: expected weight.size(1) = C/groups",
    )
    OH = _C.conv2d_out_size(H, KH, stride[0], padding[0], dilation[0])
    OW = _C.conv2d_out_size(W, KW, stride[1], padding[1], dilation[1])
    torch._check(
        OH > 0 and OW > 0,
        lambda: f"xkernels.{op}: argument 'weight': the dilated kernel size is larger than the padded input size",
    )
    out_shape = [input.shape[0], O, OH, OW] if batched else [O, OH, OW]
    return out_shape, _conv_memory_format(input, weight, stride, padding, dilation, groups)


def _conv_memory_format(input, weight, stride, padding, dilation, groups) -> torch.memory_format:
    """conv2d's output (and input/weight gradient) memory format: ATen's rule for these tensors' device and
    dtype, as csrc/shapes.cpp conv2d_channels_last applies it in eager mode (the C++ is the definition; this
    is its form for fake tensors, calling the same two ATen functions torch's own fake convolution calls)."""
    if input.dim() != 4:
        return torch.contiguous_format
    O, _, KH, KW = weight.shape
    if O == 0 or input.shape[1] == 0 or KH == 0 or KW == 0:  # sizes aten::convolution rejects
        cl = torch.channels_last in (
            torch._prims_common.suggest_memory_format(input),
            torch._prims_common.suggest_memory_format(weight),
        )
        return torch.channels_last if cl else torch.contiguous_format
    backend = torch._C._select_conv_backend(
        input, weight, None, list(stride), list(padding), list(dilation), False, [0, 0], groups
    )
    fmt = torch._C._conv_determine_backend_memory_format(input, weight, backend)
    return torch.channels_last if fmt == torch.channels_last else torch.contiguous_format


@torch.library.register_fake("xkernels::conv2d")
def _conv2d_fake(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    out_shape, fmt = _conv_problem(input, weight, stride, padding, dilation, groups, "conv2d")
    _check_same(bias, "bias", input, "input", "conv2d")
    return torch.empty(out_shape, dtype=input.dtype, device=input.device, memory_format=fmt)


@torch.library.register_fake("xkernels::conv2d_relu")
def _conv2d_relu_fake(
    input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, residual=None
):
    op = "conv2d_relu"
    out_shape, fmt = _conv_problem(input, weight, stride, padding, dilation, groups, op)
    _check_same(bias, "bias", input, "input", op)
    _check_same(residual, "residual", input, "input", op)
    if residual is not None:
        torch._check(
            list(residual.shape) == list(out_shape),
            lambda: (
                f"xkernels.{op}: argument 'residual' must have the output's shape {list(out_shape)}, "
                f"got {list(residual.shape)}"
            ),
        )
    return torch.empty(out_shape, dtype=input.dtype, device=input.device, memory_format=fmt)


def _conv2d_pack_numel(weight_shape, groups: int, dtype: torch.dtype) -> int:
    """Elements of pack_conv2d_weight's result (C++'s rule, shapes.h conv2d_pack_layout; a weight's shape is
    concrete: a packed weight is a constant)."""
    return _C.conv2d_pack_layout([int(n) for n in weight_shape], int(groups), _dtype_name(dtype))[3]


@torch.library.register_fake("xkernels::pack_conv2d_weight")
def _pack_conv2d_weight_fake(weight, groups=1):
    op = "pack_conv2d_weight"
    _check_dtype_supported(weight, "weight", op)
    torch._check(weight.dim() == 4, lambda: f"xkernels.{op}: argument 'weight' must be 4-D, got {weight.dim()}-D")
    torch._check(groups > 0, lambda: f"xkernels.{op}: argument 'groups' must be positive, got {groups}")
    return weight.new_empty([_conv2d_pack_numel(weight.shape, groups, weight.dtype)])


@torch.library.register_fake("xkernels::conv2d_packed")
def _conv2d_packed_fake(
    input, packed_weight, weight_shape, bias, stride, padding, dilation, groups, residual=None, relu=False
):
    op = "conv2d_packed"
    weight = torch.empty(list(weight_shape), dtype=input.dtype, device=input.device)
    out_shape, _ = _conv_problem(input, weight, stride, padding, dilation, groups, op)
    _check_same(packed_weight, "packed_weight", input, "input", op)
    numel = _conv2d_pack_numel(weight_shape, groups, input.dtype)
    torch._check(
        packed_weight.dim() == 1 and packed_weight.numel() == numel,
        lambda: (
            f"xkernels.{op}: argument 'packed_weight' must be what pack_conv2d_weight returns for a weight of "
            f"shape {list(weight_shape)} and groups={groups}: a contiguous 1-D tensor of {numel} elements"
        ),
    )
    _check_same(bias, "bias", input, "input", op)
    _check_same(residual, "residual", input, "input", op)
    cl = input.dim() == 4 and torch._prims_common.suggest_memory_format(input) == torch.channels_last
    fmt = torch.channels_last if cl else torch.contiguous_format
    return torch.empty(out_shape, dtype=input.dtype, device=input.device, memory_format=fmt)


@torch.library.register_fake("xkernels::conv2d_backward")
def _conv2d_backward_fake(grad_output, input, weight, stride, padding, dilation, groups, output_mask):
    _, fmt = _conv_problem(input, weight, stride, padding, dilation, groups, "conv2d_backward")
    _check_same(grad_output, "grad_output", input, "input", "conv2d_backward")
    in_fmt = fmt if input.dim() == 4 else torch.contiguous_format
    gi = (
        torch.empty(input.shape, dtype=input.dtype, device=input.device, memory_format=in_fmt)
        if output_mask[0]
        else input.new_empty((0,))
    )
    gw = (
        torch.empty(weight.shape, dtype=weight.dtype, device=weight.device, memory_format=fmt)
        if output_mask[1]
        else weight.new_empty((0,))
    )
    gb = weight.new_empty((weight.shape[0],)) if output_mask[2] else weight.new_empty((0,))
    return gi, gw, gb


def _ln_stat_shape(input, normalized_shape, op):
    nd = len(normalized_shape)
    torch._check(nd >= 1, lambda: f"xkernels.{op}: argument 'normalized_shape' must have at least 1 dimension")
    torch._check(
        input.dim() >= nd and list(input.shape[input.dim() - nd :]) == list(normalized_shape),
        lambda: (
            f"xkernels.{op}: argument 'normalized_shape'={list(normalized_shape)} must match the trailing "
            f"dimensions of input of shape {tuple(input.shape)}"
        ),
    )
    return [*input.shape[: input.dim() - nd]] + [1] * nd


@torch.library.register_fake("xkernels::layer_norm_forward")
def _layer_norm_forward_fake(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    stat = _ln_stat_shape(input, normalized_shape, "layer_norm")
    _check_dtype_supported(input, "input", "layer_norm")
    _check_same(weight, "weight", input, "input", "layer_norm")
    _check_same(bias, "bias", input, "input", "layer_norm")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            torch._check(
                list(t.shape) == list(normalized_shape),
                lambda: f"xkernels.layer_norm: argument '{name}' must have shape normalized_shape",
            )
    sd = accumulation_dtype(input.dtype)  # the statistics' dtype
    return (
        input.new_empty(input.shape),
        input.new_empty(stat, dtype=sd),
        input.new_empty(stat, dtype=sd),
    )


@torch.library.register_fake("xkernels::layer_norm.out")
def _layer_norm_out_fake(input, normalized_shape, weight=None, bias=None, eps=1e-5, *, out):
    _layer_norm_forward_fake(input, normalized_shape, weight, bias, eps)  # the same argument checks
    _check_same(out, "out", input, "input", "layer_norm")
    torch._check(
        out.shape == input.shape,
        lambda: (
            f"xkernels.layer_norm: argument 'out' must have the input's shape {list(input.shape)}, got "
            f"{list(out.shape)} (out= tensors are not resized)"
        ),
    )
    return out  # written in place; no metadata change


def _layer_norm_out_decomposed(input, normalized_shape, weight=None, bias=None, eps=1e-5, *, out):
    """layer_norm.out as the functional op plus a copy into `out`: what torch.compile / AOT autograd trace on a
    torch whose functionalization cannot take an out= custom op (see below). Eager calls never come here: the
    op's backend and Autograd kernels take precedence over this CompositeImplicitAutograd one."""
    _layer_norm_out_fake(input, normalized_shape, weight, bias, eps, out=out)  # the same argument checks
    return out.copy_(torch.ops.xkernels.layer_norm(input, normalized_shape, weight, bias, eps))


# torch 2.13 functionalizes ops tagged at::Tag::out (csrc/include/xkernels/torch_compat.h gives layer_norm.out
# that tag where the headers have it). Older torch (2.11, 2.12: at::Tag::out_variant only) refuses a custom op
# whose output aliases an input ("Tensor(a!) out -> Tensor(a!)") under torch.compile, but decomposes a mutating
# op that has a CompositeImplicitAutograd kernel before it would refuse: give it this one there.
_OUT_TAG = getattr(torch.Tag, "out", None)
if _OUT_TAG is None or _OUT_TAG not in torch.ops.xkernels.layer_norm.out.tags:
    _compat_lib = torch.library.Library("xkernels", "IMPL")
    _compat_lib.impl("layer_norm.out", _layer_norm_out_decomposed, "CompositeImplicitAutograd")


@torch.library.register_fake("xkernels::layer_norm_backward")
def _layer_norm_backward_fake(grad_output, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    _ln_stat_shape(input, normalized_shape, "layer_norm_backward")
    for name, t in (("grad_output", grad_output), ("weight", weight), ("bias", bias)):
        _check_same(t, name, input, "input", "layer_norm_backward")
    gi = input.new_empty(input.shape) if output_mask[0] else input.new_empty((0,))
    gw = weight.new_empty(weight.shape) if (output_mask[1] and weight is not None) else input.new_empty((0,))
    gb = bias.new_empty(bias.shape) if (output_mask[2] and bias is not None) else input.new_empty((0,))
    return gi, gw, gb


# ------------------------------------------------------------------ autograd
# Backward formulas call the xkernels backward ops, which dispatch per device like the forwards.
# The backend selected for the forward's thread (xkernels.use_backend) is saved with the graph and
# re-applied around the backward op: the autograd engine runs CUDA/XPU backwards on its own device
# threads, which do not see the forward thread's selection. With no selection at forward time, the
# backward thread's own selection (or the process default) applies.


class _ForwardSelection:
    """Re-applies the forward's thread-local backend selection around a backward op."""

    __slots__ = ("name", "previous")

    def __init__(self, name):
        self.name = name
        self.previous = None

    def __enter__(self):
        if self.name is not None:
            self.previous = _C.thread_backend()
            _C.set_thread_backend(self.name)

    def __exit__(self, *exc):
        if self.name is not None:
            _C.set_thread_backend(self.previous)
        return False


def _save_selection(ctx) -> None:
    ctx.backend_selection = _C.thread_backend()


def _fused_linear_relu_setup(ctx, inputs, output):
    input, weight, bias = inputs
    ctx.has_bias = bias is not None
    _save_selection(ctx)
    ctx.save_for_backward(input, weight, output)


def _fused_linear_relu_bwd(ctx, grad):
    input, weight, output = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    with _ForwardSelection(ctx.backend_selection):
        gi, gw, gb = _ops.fused_linear_relu_backward(grad, input, weight, output, mask)
    return (gi if mask[0] else None, gw if mask[1] else None, gb if mask[2] else None)


torch.library.register_autograd(
    "xkernels::fused_linear_relu", _fused_linear_relu_bwd, setup_context=_fused_linear_relu_setup
)


def _conv2d_setup(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups = inputs
    ctx.has_bias = bias is not None
    ctx.params = (stride, padding, dilation, groups)
    _save_selection(ctx)
    ctx.save_for_backward(input, weight)


def _conv2d_bwd(ctx, grad):
    input, weight = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.params
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    with _ForwardSelection(ctx.backend_selection):
        gi, gw, gb = _ops.conv2d_backward(grad, input, weight, stride, padding, dilation, groups, mask)
    return (gi if mask[0] else None, gw if mask[1] else None, gb if mask[2] else None, None, None, None, None)


torch.library.register_autograd("xkernels::conv2d", _conv2d_bwd, setup_context=_conv2d_setup)


def _conv2d_relu_setup(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups, residual = inputs
    ctx.has_bias = bias is not None
    ctx.has_residual = residual is not None
    ctx.params = (stride, padding, dilation, groups)
    _save_selection(ctx)
    ctx.save_for_backward(input, weight, output)


def _conv2d_relu_bwd(ctx, grad):
    input, weight, output = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.params
    # torch.relu's backward (threshold_backward): the gradient flows where NOT (output <= 0), NaN included.
    grad = grad.masked_fill(output <= 0, 0)
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    gi = gw = gb = None
    if any(mask):
        with _ForwardSelection(ctx.backend_selection):
            gi, gw, gb = _ops.conv2d_backward(grad, input, weight, stride, padding, dilation, groups, mask)
    gr = grad if ctx.has_residual and ctx.needs_input_grad[7] else None
    return (
        gi if mask[0] else None,
        gw if mask[1] else None,
        gb if mask[2] else None,
        None,
        None,
        None,
        None,
        gr,
    )


torch.library.register_autograd("xkernels::conv2d_relu", _conv2d_relu_bwd, setup_context=_conv2d_relu_setup)


def _layer_norm_setup(ctx, inputs, output):
    input, normalized_shape, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.normalized_shape = normalized_shape
    ctx.has_weight = weight is not None
    ctx.has_bias = bias is not None
    ctx.mark_non_differentiable(mean, rstd)
    _save_selection(ctx)
    ctx.save_for_backward(input, weight, bias, mean, rstd)


def _layer_norm_bwd(ctx, grad, _grad_mean, _grad_rstd):
    input, weight, bias, mean, rstd = ctx.saved_tensors
    mask = [
        ctx.needs_input_grad[0],
        ctx.has_weight and ctx.needs_input_grad[2],
        ctx.has_bias and ctx.needs_input_grad[3],
    ]
    with _ForwardSelection(ctx.backend_selection):
        gi, gw, gb = _ops.layer_norm_backward(grad, input, ctx.normalized_shape, mean, rstd, weight, bias, mask)
    return (gi if mask[0] else None, None, gw if mask[1] else None, gb if mask[2] else None, None)


torch.library.register_autograd("xkernels::layer_norm_forward", _layer_norm_bwd, setup_context=_layer_norm_setup)
