"""Drop-in modules on the xkernels ops (what ``xkernels.optimize(model)`` swaps in).

- ``FusedLinearReLU``: relu(linear(x)) in one op. Constructor, parameters, initialization and
  state_dict keys are those of ``torch.nn.Linear`` (a checkpoint of ``Linear`` loads into it
  and back); the ReLU is part of the module. Opt-in (``pack_weight=True``): on the SYCL CPU
  backend, calls that need no gradient reuse a pre-packed copy of the weight (see the class docstring).
- ``Conv2d`` / ``LayerNorm``: subclasses of ``torch.nn.Conv2d`` / ``torch.nn.LayerNorm`` (same
  constructor, parameters, state_dict, repr; ``isinstance(m, torch.nn.Conv2d)`` holds) whose
  forward runs the xkernels op. Conv2d takes every padding form (int, pair, 'same', 'valid') and every
  padding_mode ('zeros', 'reflect', 'replicate', 'circular': padded as torch.nn.Conv2d pads).

- ``FoldedConv2d`` (a Conv2d with an eval-mode BatchNorm2d folded in; inference only) and ``Conv2dEpilogue``
  (conv -> [residual add] -> ReLU through ``conv2d_epilogue()``, i.e. the fused op ``xkernels.conv2d_relu``):
  what ``optimize(model)`` builds.

``optimize(model)`` and its torch.fx passes live in ``xkernels._optimize``; ``optimize``, ``call_graph``,
``find_conv_bn``, ``find_conv_epilogues``, ``ConvBNMatch`` and ``EpilogueMatch`` are re-exported here.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from . import _C, _deferred, ops

__all__ = [
    "FusedLinearReLU",
    "Conv2d",
    "FoldedConv2d",
    "Conv2dEpilogue",
    "LayerNorm",
    "conv2d_epilogue",
    "optimize",
    "call_graph",
    "find_conv_bn",
    "find_conv_epilogues",
    "ConvBNMatch",
    "EpilogueMatch",
]


class FusedLinearReLU(nn.Module):
    """relu(x @ weight.T + bias), as ``nn.Sequential(nn.Linear(...), nn.ReLU())`` in one op.

    Same arguments, parameters (``weight`` [out_features, in_features], ``bias``
    [out_features]), initialization and state_dict keys as ``torch.nn.Linear``.

    Pre-packed weight (opt-in: ``pack_weight=True`` in the constructor, ``m.pack_weight = True``, or
    ``xkernels.optimize(model, pack_weights=True)``): when the call runs on the SYCL backend with CPU tensors and
    needs no gradient (grad mode off, or none of input / weight / bias requires grad), the forward uses
    ``fused_linear_relu_packed`` with a copy of the weight packed once by ``pack_linear_weight``,
    instead of letting ``fused_linear_relu`` re-pack it on every call. The copy is cached on the
    module (not a parameter or buffer: not in ``state_dict``) under the key (weight object, its
    data_ptr, ``_version``, shape, dtype, device, backend) and rebuilt when any of them changes: an
    in-place update (``with torch.no_grad(): m.weight.add_(1)``), ``m.weight = Parameter(...)``,
    ``.to(dtype)``, ``load_state_dict``. Everything else (training, other backends and devices,
    torch.compile tracing) uses ``fused_linear_relu`` with the parameter itself, so gradients
    always flow to ``weight``. The cache costs one weight-sized tensor of memory. On a CPU with AMX a bfloat16
    weight with both feature counts multiples of 32 is not packed: the op's AMX kernel reads it as stored. On AVX2
    CPUs calls with at most 16 rows (a decode step) also run ``fused_linear_relu``, which is faster there
    (``xkernels._C.sycl.linear_unpacked_max_rows()``).

    Why opt-in: a change to the weight's values that bypasses autograd's version counter is
    invisible to the cache and the module would keep computing with the old values. Such changes
    are writes through ``m.weight.data`` (``m.weight.data.mul_(2)``), through a NumPy array or
    DLPack capsule sharing the memory, or from C++/another process. After any of those call
    ``m.invalidate_packed_weight()``. Turn packing on for inference (frozen weights), where it pays."""

    __constants__ = ["in_features", "out_features"]
    pack_weight: bool = False

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        pack_weight: bool = False,
    ) -> None:
        super().__init__()
        self.pack_weight = bool(pack_weight)
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty((out_features, in_features), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's initialization, so that the same seed gives the same parameters.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> FusedLinearReLU:
        """A FusedLinearReLU sharing `linear`'s Parameter objects."""
        m = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        m.weight = linear.weight
        m.bias = linear.bias
        m.train(linear.training)
        return m

    def forward(self, input: Tensor) -> Tensor:
        packed = self._packed_weight(input)
        if packed is not None:
            return ops.fused_linear_relu_packed(input, packed, self.bias, self.out_features)
        return ops.fused_linear_relu(input, self.weight, self.bias)

    def _packed_weight(self, input: Tensor) -> Tensor | None:
        """The cached packed weight when this call can use it (see the class docstring), else None."""
        if self.weight.dim() != 2:
            return None

        def unpacked_is_faster() -> bool:  # also: few rows, where the dot kernel (the weight as stored) is faster
            return (
                self._amx_reads_weight() or input.dim() == 0 or input.numel() <= _unpacked_max_rows() * input.shape[-1]
            )

        return _packed_copy(self, input, self.bias, ops.pack_linear_weight, unpacked_is_faster)

    def _amx_reads_weight(self) -> bool:
        """bfloat16 on a CPU with AMX: fused_linear_relu reads the weight as stored (nothing to pre-pack)."""
        w = self.weight
        return w.dtype == torch.bfloat16 and bool(_C.sycl.linear_amx_for_cpu_tensors(w.shape[0], w.shape[1]))

    def invalidate_packed_weight(self) -> None:
        """Drops the packed copy of the weight (rebuilt at the next call that uses it). Needed only after the
        weight's values changed in a way autograd's version counter does not see (see the class docstring)."""
        self.__dict__.pop("_packed_cache", None)

    def __getstate__(self) -> dict:
        return _state_without_caches(super().__getstate__())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}" + (
            ", pack_weight=True" if self.pack_weight else ""
        )


def _grad_needed(*tensors: Tensor | None) -> bool:
    """Grad mode is on and one of `tensors` (None skipped) requires grad: the packed ops (inference only) are out."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


@functools.cache
def _unpacked_max_rows() -> int:
    """FusedLinearReLU(pack_weight=True) calls with at most this many rows run fused_linear_relu with the weight as
    stored: 16 on CPUs whose SYCL kernels run 8 lanes (AVX2), where that is faster; 0 elsewhere
    (_C.sycl.linear_unpacked_max_rows, csrc/sycl/fused_linear_relu.cpp, with the measurements)."""
    return int(_C.sycl.linear_unpacked_max_rows())


def _packed_copy(
    module: nn.Module,
    input: Tensor,
    bias: Tensor | None,
    pack: Callable[[Tensor], Tensor],
    unpacked_is_faster: Callable[[], bool] | None = None,
):
    """`module.weight` packed by `pack`, cached on the module, when this call can use a packed copy: packing
    on, not tracing, no gradient needed, CPU tensors of the weight's dtype on the SYCL backend; else None.
    The cache key (weight object, data_ptr, _version, shape, dtype, device, backend) rebuilds the copy after
    any change autograd's version counter sees (FusedLinearReLU's docstring says which changes it does not).
    `unpacked_is_faster()`, asked last (on the SYCL backend only): True where the unpacked op is the faster one."""
    w = module.weight
    if not module.pack_weight or torch.compiler.is_compiling():
        return None
    if _grad_needed(w, input, bias):
        return None
    if w.device.type != "cpu" or input.device != w.device or input.dtype != w.dtype:
        return None
    backend = _cpu_backend(w.dtype)
    if backend != "sycl" or (unpacked_is_faster is not None and unpacked_is_faster()):
        return None
    key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, backend)
    cached = module.__dict__.get("_packed_cache")
    if cached is not None and cached[0]() is w and cached[1] == key:
        return cached[2]
    with torch.no_grad():
        packed = pack(w)
    module.__dict__["_packed_cache"] = (weakref.ref(w), key, packed)
    return packed


def _cpu_backend(dtype: torch.dtype) -> str:
    """The backend the CPU dispatch (csrc/backend.cpp cpu_backend_choice) picks for `dtype` in this thread: the
    explicit request, or for 'auto' sycl when the SYCL CPU device runs this dtype, else reference."""
    return _C.cpu_backend(str(dtype).removeprefix("torch."))


# Per-module caches in the instance __dict__: not pickled (weak references; rebuilt at the next call).
_CACHE_KEYS = ("_packed_cache", "_packed_call")


def _state_without_caches(state: dict) -> dict:
    """A module's pickled state (torch.save(module), copy.copy) without its packed-weight caches."""
    return {k: v for k, v in state.items() if k not in _CACHE_KEYS}


_conv2d_packed_op = torch.ops.xkernels.conv2d_packed.default


class _PackedConvCall:
    """A Conv2d call's route to ``conv2d_packed``, remembered by the module after a call that took it.

    Choosing the route takes Python (the layout, the packed-weight cache, the epilogue's residual check, the
    op's argument normalisation), and in a model that Python runs right after a convolution has pushed it out
    of the caches, where it costs several times what it does in a loop (docs/performance.md: ~1.7 ms of a
    ResNet-50 step at batch 1). So a module that took the route remembers what the choice was made on, and
    ``call`` re-checks exactly that for the next call: the input's shape, dtype, device and (channels_last
    modules) layout; the weight object, its storage, version counter, shape and dtype; the residual's shape and
    dtype; grad mode and requires_grad; the thread's backend choice. Any difference returns None and the call
    goes the long way, which decides afresh (and remembers again). An attribute assignment on the module
    (stride, padding, ``pack_weight``, a new Parameter, ``train()``...) forgets the plan (Conv2d.__setattr__),
    and no plan is used while torch.compile traces.
    """

    __slots__ = (
        "shape", "dtype", "dtype_name", "out_shape", "weight", "weight_shape", "version", "data_ptr", "packed",
        "stride", "padding", "dilation", "groups", "channels_last", "relu",
    )  # fmt: skip

    def call(self, module: Conv2d, input: Tensor, residual: Tensor | None) -> Tensor | None:
        """conv2d_packed's result for this call, or None where the plan does not apply to it."""
        w = module.weight
        if (
            input.shape != self.shape
            or input.dtype is not self.dtype
            or not input.is_cpu
            or self.weight() is not w
            or w._version != self.version
            or w.data_ptr() != self.data_ptr
            or w.shape != self.weight_shape
            or w.dtype is not self.dtype
            or (self.channels_last and not input.is_contiguous(memory_format=torch.channels_last))
        ):
            return None
        if residual is not None and (
            not self.relu or residual.shape != self.out_shape or residual.dtype is not self.dtype
        ):
            return None
        bias = module.bias
        if _grad_needed(input, w, bias, residual):
            return None
        if _C.cpu_backend(self.dtype_name) != "sycl":
            return None
        return _conv2d_packed_op(
            input, self.packed, self.weight_shape, bias, self.stride, self.padding, self.dilation, self.groups,
            residual, self.relu,
        )  # fmt: skip

    @staticmethod
    def remember(module: Conv2d, input: Tensor, packed: Tensor, relu: bool) -> None:
        """Records the route `module` just took for `input` (conv2d_packed with `packed`, with or without the
        ReLU epilogue). Only zero padding given as numbers: string padding takes the op's .padding overload."""
        if isinstance(module.padding, str) or module.padding_mode != "zeros":
            return
        w = module.weight
        p = _PackedConvCall()
        p.shape, p.dtype, p.dtype_name = input.shape, input.dtype, str(input.dtype).removeprefix("torch.")
        p.weight, p.weight_shape, p.version, p.data_ptr = weakref.ref(w), w.shape, w._version, w.data_ptr()
        p.packed, p.groups, p.relu = packed, module.groups, relu
        p.stride, p.padding, p.dilation = list(module.stride), list(module.padding), list(module.dilation)
        p.channels_last = bool(module.channels_last) and input.dim() == 4 and input.dtype != torch.float64
        p.out_shape = torch.Size(
            ops.conv2d_output_shape(input.shape, w.shape, module.stride, module.padding, module.dilation)
        )
        module.__dict__["_packed_call"] = p  # not through __setattr__, which forgets the plan


def _unsupported_padding_mode(mode: str) -> ValueError:
    return ValueError(
        f"xkernels.nn.Conv2d: argument 'padding_mode' must be 'zeros', got '{mode}'. The xkernels conv2d op "
        "pads with zeros only; keep torch.nn.Conv2d for this layer (xkernels.optimize() leaves such layers as "
        "they are) or pad explicitly with torch.nn.functional.pad and use padding=0."
    )


class Conv2d(nn.Conv2d):
    """``torch.nn.Conv2d`` running the xkernels conv2d op.

    Every ``torch.nn.Conv2d`` constructor argument is accepted with torch's meaning and validation. With
    ``padding_mode`` 'reflect', 'replicate' or 'circular' the input is padded exactly as torch pads it
    (``F.pad`` by ``_reversed_padding_repeated_twice``, which for ``padding='same'`` puts the odd extra element
    on the right/bottom), then convolved by the xkernels op with padding 0; 'zeros' padding happens inside
    the op.

    Pre-packed weight (opt-in: ``m.pack_weight = True`` or ``xkernels.optimize(model, pack_weights=True)``):
    calls that need no gradient, on the SYCL backend with CPU tensors, use ``conv2d_packed`` with a copy of
    the weight packed once by ``pack_conv2d_weight`` (the kernels otherwise re-pack it on every call), cached
    and invalidated exactly as ``FusedLinearReLU``'s (read its docstring for the one way a copy can go stale;
    ``m.invalidate_packed_weight()`` drops it)."""

    pack_weight: bool = False
    # Set by ``xkernels.optimize(..., memory_format="channels_last")``: a 4-D input in another format is made
    # channels_last before the convolution (a no-op check for inputs already so, which after the first
    # convolution of a model they all are: the op's output follows ATen's format rule). float64 is left as it
    # comes: ATen computes float64 convolutions in contiguous format on CPU and cuDNN, so converting would
    # only add a copy per layer.
    channels_last: bool = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        )

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d) -> Conv2d:
        """A Conv2d sharing `conv`'s Parameter objects (and its padding and padding_mode)."""
        m = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            conv.bias is not None,
            conv.padding_mode,
            device="meta",
        )
        m.weight = conv.weight
        m.bias = conv.bias
        m.train(conv.training)
        return m

    # Set (to a description of the BatchNorm) on convolutions that carry a BatchNorm2d folded into their
    # weight and bias (FoldedConv2d, and a Conv2dEpilogue made from one): inference only, train() refuses.
    folded_batchnorm: str | None = None

    def _get_name(self) -> str:  # repr says which Conv2d this is
        return "xkernels.nn.Conv2d"

    def train(self, mode: bool = True):
        if mode and self.folded_batchnorm is not None:
            raise RuntimeError(
                f"{self._get_name()}: this convolution has {self.folded_batchnorm} folded into its weight and bias "
                "by xkernels.optimize() on a model in eval mode, which is for inference only: training it would "
                "neither normalize by batch statistics nor update the BatchNorm's running statistics. Train the "
                "original model (optimize() left it untouched, unless inplace=True), or optimize a model in "
                "train mode (xkernels.optimize(model.train()) folds nothing)."
            )
        return super().train(mode)

    def forward(self, input: Tensor) -> Tensor:
        out = self._remembered_call(input, None)
        if out is not None:
            return out
        return self._conv_forward(input, self.weight, self.bias)

    def _remembered_call(self, input: Tensor, residual: Tensor | None) -> Tensor | None:
        """The remembered packed route's result (_PackedConvCall), or None for the long way, which runs torch ops
        on the input: before it, a deferred-wait region's queued kernels are waited for (_deferred.py)."""
        if torch.compiler.is_compiling():
            return None
        plan = self.__dict__.get("_packed_call")
        if plan is not None:
            out = plan.call(self, input, residual)
            if out is not None:
                return out
        _deferred.settle()
        return None

    def __setattr__(self, name: str, value) -> None:
        self.__dict__.pop("_packed_call", None)  # the remembered route assumed the old value (_PackedConvCall)
        super().__setattr__(name, value)

    def __getstate__(self) -> dict:
        return _state_without_caches(super().__getstate__())

    def _layout(self, input: Tensor) -> Tensor:
        """The input in the format this module was set to run in (``channels_last``), else as it is."""
        if self.channels_last and input.dim() == 4 and input.dtype != torch.float64:
            return input.contiguous(memory_format=torch.channels_last)
        return input

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        input = self._layout(input)
        padding = self.padding
        if self.padding_mode != "zeros":
            # torch.nn.Conv2d's rule: pad explicitly in the padding mode, then convolve without padding.
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = (0, 0)
        packed = self._packed_weight(input) if weight is self.weight else None
        if packed is not None:
            out = ops.conv2d_packed(input, packed, weight.shape, bias, self.stride, padding, self.dilation, self.groups)
            _PackedConvCall.remember(self, input, packed, relu=False)
            return out
        return ops.conv2d(input, weight, bias, self.stride, padding, self.dilation, self.groups)

    def _packed_weight(self, input: Tensor) -> Tensor | None:
        """The cached packed weight when this call can use it (see the class docstring), else None."""
        if self.weight.dim() != 4 or input.dim() not in (3, 4):
            return None
        return _packed_copy(
            self, input, self.bias, lambda w: ops.pack_conv2d_weight(w, self.groups), self._amx_reads_weight
        )

    def _amx_reads_weight(self) -> bool:
        """bfloat16 1x1 and 3x3 convolutions on a CPU with AMX: conv2d reads the weight as stored (nothing to
        pre-pack)."""
        w = self.weight
        if w.dtype != torch.bfloat16:
            return False
        pad = (0, 0) if isinstance(self.padding, str) else tuple(self.padding)  # 'same'/'valid' of 1x1: no padding
        kh, kw = w.shape[2], w.shape[3]
        return bool(
            _C.sycl.conv2d_amx_for_cpu_tensors(
                w.shape[0], w.shape[1] * self.groups, kh, kw, tuple(self.stride), pad, self.groups
            )
        )

    def invalidate_packed_weight(self) -> None:
        """Drops the packed copy of the weight (rebuilt at the next call that uses it)."""
        self.__dict__.pop("_packed_cache", None)
        self.__dict__.pop("_packed_call", None)

    def extra_repr(self) -> str:
        return (
            super().extra_repr()
            + (", pack_weight=True" if self.pack_weight else "")
            + (", channels_last=True" if self.channels_last else "")
        )


def _conv_like(cls, conv: nn.Conv2d, bias: bool) -> Conv2d:
    """An uninitialized (meta) `cls` with `conv`'s hyper-parameters."""
    return cls(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,
        conv.stride,
        conv.padding,
        conv.dilation,
        conv.groups,
        bias,
        conv.padding_mode,
        device="meta",
    )


class FoldedConv2d(Conv2d):
    """An ``xkernels.nn.Conv2d`` whose weight and bias are a ``Conv2d`` followed by an eval-mode
    ``BatchNorm2d`` folded into one convolution (built by ``from_conv_bn``; inference only).

    With s = bn.weight / sqrt(bn.running_var + bn.eps) (bn.weight = 1 without affine), per output channel::

        weight' = conv.weight * s        bias' = (conv.bias - bn.running_mean) * s + bn.bias   (conv.bias = 0 if None)

    computed in float64 and rounded once to the conv's dtype. The parameters are new tensors
    (``requires_grad=False``): later changes to the original conv or BatchNorm are not seen. ``train()``
    raises (see ``Conv2d.train``)."""

    def _get_name(self) -> str:
        return "xkernels.nn.FoldedConv2d"

    @classmethod
    def from_conv_bn(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d, description: str = "a BatchNorm2d") -> FoldedConv2d:
        if not _foldable_batchnorm(bn) or bn.num_features != conv.out_channels:
            raise ValueError(
                f"xkernels.nn.FoldedConv2d: cannot fold {bn} into {conv}: the BatchNorm must be in eval "
                "mode, track running statistics and have one feature per output channel"
            )
        with torch.no_grad():
            w = conv.weight.detach().double()
            scale = torch.rsqrt(bn.running_var.double() + bn.eps)
            if bn.weight is not None:
                scale = scale * bn.weight.detach().double()
            b = conv.bias.detach().double() if conv.bias is not None else torch.zeros_like(scale)
            shift = (b - bn.running_mean.double()) * scale
            if bn.bias is not None:
                shift = shift + bn.bias.detach().double()
            weight = (w * scale.reshape(-1, *([1] * (w.dim() - 1)))).to(conv.weight.dtype)
            bias = shift.to(conv.weight.dtype)
        m = _conv_like(cls, conv, bias=True)
        m.weight = nn.Parameter(weight.contiguous(memory_format=_memory_format(conv.weight)), requires_grad=False)
        m.bias = nn.Parameter(bias, requires_grad=False)
        m.folded_batchnorm = description
        m.training = False
        return m

    def extra_repr(self) -> str:
        return super().extra_repr() + f", folded={self.folded_batchnorm}"


def _memory_format(t: Tensor) -> torch.memory_format:
    return (
        torch.channels_last
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
        else torch.contiguous_format
    )


def _foldable_batchnorm(bn: nn.Module) -> bool:
    return (
        type(bn) is nn.BatchNorm2d
        and not bn.training
        and bn.track_running_stats
        and bn.running_mean is not None
        and bn.running_var is not None
    )


def conv2d_epilogue(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride,
    padding,
    dilation,
    groups: int,
    residual: Tensor | None = None,
    relu: bool = False,
    packed_weight: Tensor | None = None,
) -> Tensor:
    """``relu?(conv2d(input, weight, bias) + residual?)``: the computation of a matched conv epilogue.
    ``packed_weight`` (optional, ``pack_conv2d_weight(weight, groups)``; inference) runs ``conv2d_packed``.

    Everything ``xkernels.optimize`` matches as a conv epilogue (``find_conv_epilogues``) runs through this
    one function. With ``relu`` it is the fused op ``xkernels.conv2d_relu`` (bias, residual add and ReLU in
    the convolution's store, one rounding), when the residual has the output's shape and dtype (the op's
    contract); otherwise, and without ``relu``, the unfused sequence xkernels conv2d -> ``+ residual`` ->
    ``torch.relu`` (torch's broadcasting and type promotion for the add).
    """
    if _epilogue_fuses(input, weight, stride, padding, dilation, residual, relu):
        if packed_weight is not None:
            return ops.conv2d_packed(
                input, packed_weight, weight.shape, bias, stride, padding, dilation, groups, residual, relu=True
            )
        return ops.conv2d_relu(input, weight, bias, stride, padding, dilation, groups, residual)
    if packed_weight is not None:
        y = ops.conv2d_packed(input, packed_weight, weight.shape, bias, stride, padding, dilation, groups)
    else:
        y = ops.conv2d(input, weight, bias, stride, padding, dilation, groups)
    if residual is not None:
        y = y + residual
    if relu:
        y = torch.relu(y)
    return y


def _epilogue_fuses(
    input: Tensor, weight: Tensor, stride, padding, dilation, residual: Tensor | None, relu: bool
) -> bool:
    """Whether conv2d_epilogue runs the fused op conv2d_relu (ReLU, and no residual or one that fits its contract)."""
    return relu and (residual is None or _residual_fits(input, weight, stride, padding, dilation, residual))


def _residual_fits(input: Tensor, weight: Tensor, stride, padding, dilation, residual: Tensor) -> bool:
    """Whether ``residual`` meets conv2d_relu's contract: the output's dtype and shape. Under torch.compile the
    answer is no, and the unfused sequence runs (inductor fuses its add and ReLU into one pointwise kernel):
    the output shape is C++'s rule (xkernels._C, through ops.conv2d_output_shape), which dynamo cannot trace."""
    if torch.compiler.is_compiling():
        return False
    shape = ops.conv2d_output_shape(input.shape, weight.shape, stride, padding, dilation)
    return residual.dtype == input.dtype and list(residual.shape) == shape


class Conv2dEpilogue(Conv2d):
    """``xkernels.nn.Conv2d`` with an epilogue: ``forward(input, residual=None)`` returns
    ``relu(conv2d(input) + residual)`` (``relu=True``) or ``conv2d(input) + residual``, through
    ``conv2d_epilogue`` (the fused op ``conv2d_relu``). Made by ``xkernels.optimize`` from a matched
    conv -> [add residual] -> ReLU chain; shares the source convolution's Parameter objects."""

    relu: bool = False

    def _get_name(self) -> str:
        return "xkernels.nn.Conv2dEpilogue"

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d, relu: bool = True) -> Conv2dEpilogue:
        if conv.padding_mode != "zeros":
            raise _unsupported_padding_mode(conv.padding_mode)
        m = _conv_like(cls, conv, bias=conv.bias is not None)
        m.weight = conv.weight
        m.bias = conv.bias
        m.relu = bool(relu)
        m.pack_weight = getattr(conv, "pack_weight", False)
        m.channels_last = getattr(conv, "channels_last", False)
        m.folded_batchnorm = getattr(conv, "folded_batchnorm", None)
        m.training = conv.training
        return m

    def forward(self, input: Tensor, residual: Tensor | None = None) -> Tensor:
        out = self._remembered_call(input, residual)
        if out is not None:
            return out
        if self.padding_mode != "zeros":
            raise _unsupported_padding_mode(self.padding_mode)
        input = self._layout(input)
        packed = self._packed_weight(input)
        out = conv2d_epilogue(
            input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, residual, self.relu,
            packed,
        )  # fmt: skip
        if packed is not None and (
            residual is None
            or _epilogue_fuses(input, self.weight, self.stride, self.padding, self.dilation, residual, self.relu)
        ):  # conv2d_epilogue's call was conv2d_packed alone (the fused epilogue, or no residual)
            _PackedConvCall.remember(self, input, packed, self.relu)
        return out

    def extra_repr(self) -> str:
        return (
            super().extra_repr()
            + f", relu={self.relu}"
            + (f", folded={self.folded_batchnorm}" if self.folded_batchnorm else "")
        )


class LayerNorm(nn.LayerNorm):
    """``torch.nn.LayerNorm`` running the xkernels layer_norm op."""

    @classmethod
    def from_layer_norm(cls, ln: nn.LayerNorm) -> LayerNorm:
        """A LayerNorm sharing `ln`'s Parameter objects."""
        m = cls(ln.normalized_shape, ln.eps, ln.elementwise_affine, bias=ln.bias is not None, device="meta")
        m.weight = ln.weight
        m.bias = ln.bias
        m.train(ln.training)
        return m

    def _get_name(self) -> str:
        return "xkernels.nn.LayerNorm"

    def forward(self, input: Tensor) -> Tensor:
        return ops.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


# optimize() builds the modules above; it lives in its own module, which imports this one (hence at the end).
from ._optimize import (  # noqa: E402
    ConvBNMatch,
    EpilogueMatch,
    call_graph,
    find_conv_bn,
    find_conv_epilogues,
    optimize,
)
