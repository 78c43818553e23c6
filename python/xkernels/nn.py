"""Drop-in modules on the xkernels ops, and ``optimize(model)``.

- ``FusedLinearReLU``: relu(linear(x)) in one op. Constructor, parameters, initialization and
  state_dict keys are those of ``torch.nn.Linear`` (a checkpoint of ``Linear`` loads into it
  and back); the ReLU is part of the module. Opt-in (``pack_weight=True``): on the SYCL CPU
  backend, calls that need no gradient reuse a pre-packed copy of the weight (see the class docstring).
- ``Conv2d`` / ``LayerNorm``: subclasses of ``torch.nn.Conv2d`` / ``torch.nn.LayerNorm`` (same
  constructor, parameters, state_dict, repr; ``isinstance(m, torch.nn.Conv2d)`` holds) whose
  forward runs the xkernels op. Conv2d takes every padding form (int, pair, 'same', 'valid') and every
  padding_mode ('zeros', 'reflect', 'replicate', 'circular': padded as torch.nn.Conv2d pads).

``optimize(model)`` swaps these in for ``nn.Linear`` + ``nn.ReLU`` pairs, ``nn.Conv2d`` and
``nn.LayerNorm`` anywhere in a model, sharing the original Parameter objects. For an eval-mode model it also
folds BatchNorm2d into the preceding convolution (``FoldedConv2d``; inference only, ``train()`` refuses) and
rewrites conv -> [residual add] -> ReLU chains into ``Conv2dEpilogue`` calls, which all compute through
``conv2d_epilogue()``, i.e. the fused op ``xkernels.conv2d_relu`` (see the optimize section below). With
``pack_weights=True`` the convolutions also keep a packed copy of their weight for inference (``conv2d_packed``).
"""

from __future__ import annotations

import copy
import math
import operator
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import Tensor, nn

from . import _C, ops
from .backends import current_backend

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
    always flow to ``weight``. The cache costs one weight-sized tensor of memory.

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
        return _packed_copy(self, input, self.bias, ops.pack_linear_weight)

    def invalidate_packed_weight(self) -> None:
        """Drops the packed copy of the weight (rebuilt at the next call that uses it). Needed only after the
        weight's values changed in a way autograd's version counter does not see (see the class docstring)."""
        self.__dict__.pop("_packed_cache", None)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}" + (
            ", pack_weight=True" if self.pack_weight else ""
        )


def _packed_copy(module: nn.Module, input: Tensor, bias: Tensor | None, pack: Callable[[Tensor], Tensor]):
    """`module.weight` packed by `pack`, cached on the module, when this call can use a packed copy: packing
    on, not tracing, no gradient needed, CPU tensors of the weight's dtype on the SYCL backend; else None.
    The cache key (weight object, data_ptr, _version, shape, dtype, device, backend) rebuilds the copy after
    any change autograd's version counter sees (FusedLinearReLU's docstring says which changes it does not)."""
    w = module.weight
    if not module.pack_weight or torch.compiler.is_compiling():
        return None
    if torch.is_grad_enabled() and (
        w.requires_grad or input.requires_grad or (bias is not None and bias.requires_grad)
    ):
        return None
    if w.device.type != "cpu" or input.device != w.device or input.dtype != w.dtype:
        return None
    backend = _cpu_backend(w.dtype)
    if backend != "sycl":
        return None
    key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, backend)
    cached = module.__dict__.get("_packed_cache")
    if cached is not None and cached[0]() is w and cached[1] == key:
        return cached[2]
    with torch.no_grad():
        packed = pack(w)
    module.__dict__["_packed_cache"] = (weakref.ref(w), key, packed)
    return packed


_SYCL_CPU_OK: dict[torch.dtype, bool] = {}


def _cpu_backend(dtype: torch.dtype) -> str:
    """The backend the CPU chooser (csrc/backend.cpp) picks for `dtype` in this thread: the explicit
    request, or for 'auto' sycl when the SYCL CPU device runs this dtype, else reference."""
    requested = current_backend()
    if requested != "auto":
        return requested
    if dtype not in _SYCL_CPU_OK:  # device availability does not change within a process
        _SYCL_CPU_OK[dtype] = bool(_C.with_sycl) and bool(_C.sycl.cpu_status(str(dtype).replace("torch.", ""))[0])
    return "sycl" if _SYCL_CPU_OK[dtype] else "reference"


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

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        padding = self.padding
        if self.padding_mode != "zeros":
            # torch.nn.Conv2d's rule: pad explicitly in the padding mode, then convolve without padding.
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = (0, 0)
        packed = self._packed_weight(input) if weight is self.weight else None
        if packed is not None:
            return ops.conv2d_packed(
                input, packed, weight.shape, bias, self.stride, padding, self.dilation, self.groups
            )
        return ops.conv2d(input, weight, bias, self.stride, padding, self.dilation, self.groups)

    def _packed_weight(self, input: Tensor) -> Tensor | None:
        """The cached packed weight when this call can use it (see the class docstring), else None."""
        if self.weight.dim() != 4 or input.dim() not in (3, 4):
            return None
        return _packed_copy(self, input, self.bias, lambda w: ops.pack_conv2d_weight(w, self.groups))

    def invalidate_packed_weight(self) -> None:
        """Drops the packed copy of the weight (rebuilt at the next call that uses it)."""
        self.__dict__.pop("_packed_cache", None)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", pack_weight=True" if self.pack_weight else "")


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


def _conv_out_shape(input: Tensor, weight: Tensor, stride, padding, dilation) -> list[int]:
    """F.conv2d's output shape (for valid arguments; anything else gets the op's own error)."""

    def pair(v):
        return [v, v] if isinstance(v, int) else list(v)

    s, d = pair(stride), pair(dilation)
    k = list(weight.shape[-2:])
    if isinstance(padding, str):
        p = [di * (ki - 1) // 2 for di, ki in zip(d, k, strict=True)] if padding == "same" else [0, 0]
        extra = [di * (ki - 1) % 2 for di, ki in zip(d, k, strict=True)] if padding == "same" else [0, 0]
    else:
        p, extra = pair(padding), [0, 0]
    spatial = [
        (n + 2 * pi + ei - di * (ki - 1) - 1) // si + 1
        for n, pi, ei, di, ki, si in zip(input.shape[-2:], p, extra, d, k, s, strict=True)
    ]
    return [*input.shape[:-3], weight.shape[0], *spatial]


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
    if relu and (
        residual is None
        or (
            residual.dtype == input.dtype
            and list(residual.shape) == _conv_out_shape(input, weight, stride, padding, dilation)
        )
    ):
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
        m.folded_batchnorm = getattr(conv, "folded_batchnorm", None)
        m.training = conv.training
        return m

    def forward(self, input: Tensor, residual: Tensor | None = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise _unsupported_padding_mode(self.padding_mode)
        return conv2d_epilogue(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            residual,
            self.relu,
            self._packed_weight(input),
        )

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


# ------------------------------------------------------------------------------------ optimize
#
# optimize() runs three separate passes over the model, each testable on its own:
#   1. fold_batchnorm   (eval-mode models): Conv2d -> BatchNorm2d  =>  FoldedConv2d, the BN slot -> Identity
#   2. module swaps     (always): Linear+ReLU in a Sequential, Conv2d, LayerNorm  =>  xkernels.nn modules
#   3. conv epilogues   (eval-mode models): conv -> [Identity...] -> [add residual] -> ReLU  =>  Conv2dEpilogue,
#                       whose forward is conv2d_epilogue() (the fused op conv2d_relu)
# Passes 1 and 3 find their patterns with torch.fx: each container module's forward is traced once with
# every submodule as a leaf (call_graph), which shows which child's output feeds which. The rewrite
# itself is module-level (slots of the module tree are replaced), except that a non-Sequential module
# whose forward gets an epilogue with a residual add or a functional ReLU becomes a torch.fx.GraphModule
# with the same children (only the graph knows where the residual comes from).


def _shallow_copy(module: nn.Module) -> nn.Module:
    """A new module object with the same parameters/buffers (the same objects) and its own
    child table, so replacing children does not touch the original."""
    new = copy.copy(module)
    new._modules = dict(module._modules)
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    return new


class _Tree:
    """The model being rewritten. Without `inplace`, every module on the path to a replaced slot is
    shallow-copied the first time it is written to (copy on write), so the original is never modified."""

    def __init__(self, root: nn.Module, inplace: bool):
        self.root = root
        self.inplace = inplace
        self._own: set[int] = set()

    def get(self, path: str) -> nn.Module:
        return self.root.get_submodule(path) if path else self.root

    def _writable(self, path: str) -> nn.Module:
        if self.inplace:
            return self.get(path)
        if not path:
            if id(self.root) not in self._own:
                self.root = _shallow_copy(self.root)
                self._own.add(id(self.root))
            return self.root
        parent_path, _, name = path.rpartition(".")
        parent = self._writable(parent_path)
        m = parent._modules[name]
        if id(m) not in self._own:
            m = _shallow_copy(m)
            parent._modules[name] = m
            self._own.add(id(m))
        return m

    def set(self, path: str, new: nn.Module) -> None:
        self._own.add(id(new))
        if not path:
            self.root = new
            return
        parent_path, _, name = path.rpartition(".")
        self._writable(parent_path)._modules[name] = new


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


class _LeafTracer(fx.Tracer):
    """Traces one module's forward with every submodule call as a leaf (call_module node)."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return True


def call_graph(module: nn.Module) -> fx.Graph | None:
    """`module`'s forward as a torch.fx graph in which every submodule call is one call_module node
    (targets relative to `module`), or None when the forward cannot be traced symbolically (data-dependent
    control flow, unsupported Python): such a module keeps its structure and no pattern is matched in it."""
    if not module._modules:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _LeafTracer().trace(module)
    except Exception:  # noqa: BLE001 - any tracing failure means "not analyzable"
        return None


@dataclass
class _Graphs:
    """call_graph() of every container in the tree, with how often each module object is called."""

    graphs: dict[str, fx.Graph]  # container path -> graph (traceable ones)
    calls: dict[int, int]  # id(module) -> call_module nodes targeting it, all graphs
    occurrences: dict[int, int]  # id(module) -> paths at which it sits in the tree

    def called_once(self, m: nn.Module) -> bool:
        return self.calls.get(id(m), 0) == 1 and self.occurrences.get(id(m), 0) == 1


def _graphs(root: nn.Module) -> _Graphs:
    graphs, calls, occ = {}, {}, {}
    for _path, m in root.named_modules(remove_duplicate=False):
        occ[id(m)] = occ.get(id(m), 0) + 1
    for path, m in root.named_modules():
        if isinstance(m, (FusedLinearReLU, Conv2d, LayerNorm)):
            continue
        g = call_graph(m)
        if g is None:
            continue
        graphs[path] = g
        for n in g.nodes:
            if n.op == "call_module":
                sub = m.get_submodule(n.target)
                calls[id(sub)] = calls.get(id(sub), 0) + 1
    return _Graphs(graphs, calls, occ)


def _node_module(tree_root: nn.Module, container: str, node: fx.Node) -> tuple[str, nn.Module] | None:
    if node.op != "call_module":
        return None
    path = _join(container, node.target)
    return path, tree_root.get_submodule(path)


# --- pass 1: BatchNorm folding


@dataclass
class ConvBNMatch:
    """A BatchNorm2d applied directly (and only) to a Conv2d's output; paths from the model's root."""

    conv: str
    bn: str


def find_conv_bn(model: nn.Module) -> list[ConvBNMatch]:
    """The foldable Conv2d -> BatchNorm2d pairs in `model`: in some container's forward the BN's input
    is the conv's output and nothing else uses that output; the BN is in eval mode and tracks running
    statistics; conv (nn.Conv2d or xkernels.nn.Conv2d, padding_mode 'zeros') and BN are each called once and
    sit at one place in the model."""
    gs = _graphs(model)
    out = []
    for container, g in gs.graphs.items():
        for n in g.nodes:
            bn = _node_module(model, container, n)
            if bn is None or not _foldable_batchnorm(bn[1]) or len(n.args) != 1 or n.kwargs:
                continue
            src = n.args[0]
            conv = _node_module(model, container, src) if isinstance(src, fx.Node) else None
            if (
                conv is None
                or type(conv[1]) not in (nn.Conv2d, Conv2d)
                or conv[1].padding_mode != "zeros"
                or len(src.users) != 1
                or not gs.called_once(conv[1])
                or not gs.called_once(bn[1])
                or bn[1].num_features != conv[1].out_channels
            ):
                continue
            out.append(ConvBNMatch(conv[0], bn[0]))
    return out


def _fold_batchnorm(tree: _Tree, log: list) -> None:
    for match in find_conv_bn(tree.root):
        conv, bn = tree.get(match.conv), tree.get(match.bn)
        tree.set(match.conv, FoldedConv2d.from_conv_bn(conv, bn, f"BatchNorm2d '{match.bn}'"))
        tree.set(match.bn, nn.Identity())
        log.append((match.conv, f"{type(conv).__name__}+BatchNorm2d", "xkernels.nn.FoldedConv2d"))


# --- pass 2: module swaps


def _replacement(child: nn.Module, conv2d: bool, layer_norm: bool) -> Callable[[], nn.Module] | None:
    if conv2d and type(child) is nn.Conv2d and child.padding_mode == "zeros":
        return lambda: Conv2d.from_conv2d(child)
    if layer_norm and type(child) is nn.LayerNorm:
        return lambda: LayerNorm.from_layer_norm(child)
    return None


def _swaps(
    module: nn.Module, prefix: str, linear_relu: bool, conv2d: bool, layer_norm: bool, pack_weights: bool, out: list
) -> None:
    """Collects (path, new module, log entry) for every replaceable slot below `module`."""
    names = list(module._modules)
    skip = set()
    for i, name in enumerate(names):
        child = module._modules[name]
        if child is None or name in skip:
            continue
        qual = _join(prefix, name)
        if (
            linear_relu
            and isinstance(module, nn.Sequential)
            and type(child) is nn.Linear
            and i + 1 < len(names)
            and type(module._modules[names[i + 1]]) is nn.ReLU
        ):
            new = FusedLinearReLU.from_linear(child)
            new.pack_weight = pack_weights
            out.append((qual, new, (qual, "Linear+ReLU", "FusedLinearReLU")))
            out.append((_join(prefix, names[i + 1]), nn.Identity(), None))
            skip.add(names[i + 1])
            continue
        make = _replacement(child, conv2d, layer_norm)
        if make is not None:
            new = make()
            if isinstance(new, Conv2d):
                new.pack_weight = pack_weights
            out.append((qual, new, (qual, type(child).__name__, f"xkernels.nn.{type(new).__name__}")))
            continue
        _swaps(child, qual, linear_relu, conv2d, layer_norm, pack_weights, out)


# --- pass 3: conv epilogues


def _is_relu(n: fx.Node, root: nn.Module, container: str) -> bool:
    if n.op == "call_module":
        return type(root.get_submodule(_join(container, n.target))) is nn.ReLU
    if n.op == "call_function":
        return n.target in (torch.relu, torch.relu_, F.relu, F.relu_) and set(n.kwargs) <= {"inplace"}
    return n.op == "call_method" and n.target in ("relu", "relu_") and not n.kwargs


def _residual_of(n: fx.Node, chain: fx.Node) -> fx.Node | None:
    """The other operand when `n` adds something to `chain` (and nothing else), else None."""
    if n.kwargs or len(n.args) != 2:
        return None
    a, b = n.args
    inplace = (n.op == "call_function" and n.target is operator.iadd) or (n.op == "call_method" and n.target == "add_")
    plain = (n.op == "call_function" and n.target in (operator.add, torch.add)) or (
        n.op == "call_method" and n.target == "add"
    )
    if not (inplace or plain):
        return None
    if a is chain and isinstance(b, fx.Node) and b is not chain:
        return b
    if b is chain and isinstance(a, fx.Node) and not inplace:  # x.add_(conv(...)) would write into x
        return a
    return None


@dataclass
class EpilogueMatch:
    """conv -> [Identity...] -> [add residual] -> [ReLU] in the forward of `container` (paths from the model's
    root; at least the add or the ReLU is present). `nodes` are the graph nodes of the chain, conv first."""

    container: str
    conv: str
    residual: str | None  # the residual operand's node name in the container's graph
    relu: bool
    nodes: list = field(repr=False, default_factory=list)


def find_conv_epilogues(model: nn.Module, graphs: _Graphs | None = None) -> list[EpilogueMatch]:
    """The conv epilogue chains in `model`: an xkernels.nn.Conv2d (FoldedConv2d included) called once whose
    output goes, through any Identity modules (folded BatchNorm slots), into an optional residual addition and an
    optional ReLU, every intermediate result used only by the next step. torch.nn.Conv2d layers (reflect
    padding, or optimize(conv2d=False)) are not matched. Matches do not overlap: where two convolutions meet in
    one residual add (conv2(...) + downsample(x)), the first in graph order takes the add and the ReLU, and a
    node that is one match's residual operand is never part of another match's chain."""
    gs = graphs or _graphs(model)
    out = []
    for container, g in gs.graphs.items():
        claimed: set[str] = set()  # nodes of earlier matches' chains, and their residual operands
        for n in g.nodes:
            conv = _node_module(model, container, n)
            if conv is None or type(conv[1]) not in (Conv2d, FoldedConv2d) or not gs.called_once(conv[1]):
                continue
            if len(n.args) != 1 or n.kwargs:
                continue
            chain, cur = [n], n
            while len(cur.users) == 1:  # skip Identity slots
                nxt = next(iter(cur.users))
                m = _node_module(model, container, nxt)
                if m is None or type(m[1]) is not nn.Identity or len(nxt.args) != 1:
                    break
                chain.append(nxt)
                cur = nxt
            residual = None
            if len(cur.users) == 1:
                nxt = next(iter(cur.users))
                residual = _residual_of(nxt, cur)
                if residual is not None:
                    chain.append(nxt)
                    cur = nxt
            relu = False
            if len(cur.users) == 1:
                nxt = next(iter(cur.users))
                if _is_relu(nxt, model, container) and len(nxt.args) == 1 and nxt.args[0] is cur:
                    chain.append(nxt)
                    relu = True
            if residual is None and not relu:
                continue
            names = {nd.name for nd in chain}
            if names & claimed or (residual is not None and residual.name in claimed):
                continue
            claimed |= names | ({residual.name} if residual is not None else set())
            out.append(EpilogueMatch(container, conv[0], residual.name if residual is not None else None, relu, chain))
    return out


def _sequential_rewrite(tree: _Tree, match: EpilogueMatch) -> bool:
    """conv, Identity..., ReLU as consecutive slots of a Sequential: replaced slot by slot (the Sequential keeps
    its type and indices). False when the chain is anything else."""
    container = tree.get(match.container)
    if not isinstance(container, nn.Sequential) or match.residual is not None:
        return False
    if any(nd.op != "call_module" or "." in nd.target for nd in match.nodes):
        return False
    names = list(container._modules)
    idx = [names.index(nd.target) for nd in match.nodes]
    if idx != list(range(idx[0], idx[0] + len(idx))):
        return False
    tree.set(match.conv, Conv2dEpilogue.from_conv2d(tree.get(match.conv), relu=match.relu))
    tree.set(_join(match.container, match.nodes[-1].target), nn.Identity())
    return True


def _graph_rewrite(tree: _Tree, container_path: str, graph: fx.Graph, matches: list[EpilogueMatch]) -> None:
    """Rewrites `container`'s forward graph: each matched chain becomes one call of its Conv2dEpilogue
    (residual as second argument); the container becomes a GraphModule with the same children."""
    for match in matches:
        tree.set(match.conv, Conv2dEpilogue.from_conv2d(tree.get(match.conv), relu=match.relu))
    container = tree._writable(container_path)
    for match in matches:
        conv_node, last = match.nodes[0], match.nodes[-1]
        args = (conv_node.args[0],)
        if match.residual is not None:  # may be computed after the conv (e.g. a downsample branch)
            args += (next(nd for nd in graph.nodes if nd.name == match.residual),)
        with graph.inserting_before(last):  # after every operand of the chain
            fused = graph.call_module(conv_node.target, args)
        last.replace_all_uses_with(fused)
        for nd in reversed(match.nodes):
            graph.erase_node(nd)
    graph.lint()
    gm = fx.GraphModule(container, graph, class_name=type(container).__name__)
    gm.training = container.training
    tree.set(container_path, gm)


def _conv_epilogues(tree: _Tree, log: list) -> None:
    gs = _graphs(tree.root)
    matches = find_conv_epilogues(tree.root, gs)
    by_container: dict[str, list[EpilogueMatch]] = {}
    for m in matches:
        kind = "conv2d" + ("+add" if m.residual is not None else "") + ("+ReLU" if m.relu else "")
        log.append((m.conv, kind, "xkernels.nn.Conv2dEpilogue"))
        if not _sequential_rewrite(tree, m):
            by_container.setdefault(m.container, []).append(m)
    # Deepest containers first: rewriting a container replaces its module object, and its path stays valid.
    for path in sorted(by_container, key=lambda p: -p.count(".") - (1 if p else 0)):
        _graph_rewrite(tree, path, gs.graphs[path], by_container[path])


# --- optimize


def optimize(
    model: nn.Module,
    inplace: bool = False,
    *,
    linear_relu: bool = True,
    conv2d: bool = True,
    layer_norm: bool = True,
    pack_weights: bool = False,
    fold_batchnorm: bool = True,
    epilogues: bool = True,
    report: list | None = None,
) -> nn.Module:
    """Returns `model` with xkernels modules swapped in:

    - ``nn.Linear`` directly followed by ``nn.ReLU`` among the consecutive children of an
      ``nn.Sequential`` -> ``FusedLinearReLU`` (the ReLU slot becomes ``nn.Identity``, so
      indices and state_dict keys stay the same);
    - ``nn.Conv2d`` with padding_mode='zeros' -> ``xkernels.nn.Conv2d``;
    - ``nn.LayerNorm`` -> ``xkernels.nn.LayerNorm``.

    For a model in **eval mode** (``model.training`` False; inference), two more passes run:

    - ``fold_batchnorm``: a ``Conv2d`` whose output goes only into an eval-mode ``BatchNorm2d`` (found by
      tracing each container's forward with torch.fx; ``find_conv_bn``) becomes a ``FoldedConv2d`` with new
      folded weight and bias (``requires_grad=False``), and the BatchNorm's slot an ``nn.Identity``. The
      optimized model is then inference only: ``train()`` on it raises a RuntimeError naming the folded
      BatchNorm (train the original model, or optimize a train-mode model, which folds nothing).
    - ``epilogues``: conv -> [residual add] -> ReLU chains (``find_conv_epilogues``) become one
      ``Conv2dEpilogue`` call, computed by ``conv2d_epilogue``: the fused op ``conv2d_relu`` (bias, residual
      add and ReLU in the convolution's store, rounded once). In an ``nn.Sequential`` the ReLU slot becomes
      ``nn.Identity``; other containers with a matched chain become ``torch.fx.GraphModule`` s with the same
      children (their class name kept; Python attributes and hooks of the container itself are not carried
      over).

    A model in train mode keeps exact module semantics: BatchNorm stays torch's (batch statistics,
    running statistics updated as torch does) and no forward is rewritten.

    Only those exact classes are replaced (subclasses may override forward). Replaced modules share the
    original Parameter objects (training one trains the other), except folded convolutions, which own new
    ones. With ``inplace=False`` (default) the original model is never modified: containers on the path to a
    replacement are shallow copies. Nested models are handled at any depth. If `report` is a list,
    (qualified name, old, new) tuples are appended to it. ``pack_weights=True`` turns on the pre-packed
    weight of the new ``FusedLinearReLU`` and convolution modules (for inference; read FusedLinearReLU's
    docstring for the one way a packed copy can go stale).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"xkernels.optimize: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")
    log = report if report is not None else []
    make = _replacement(model, conv2d, layer_norm)
    if make is not None:  # the model itself is one replaceable layer
        log.append(("", type(model).__name__, f"xkernels.nn.{type(model).__name__}"))
        new = make()
        if isinstance(new, Conv2d):
            new.pack_weight = pack_weights
        return new
    tree = _Tree(model, inplace)
    inference = not model.training
    if inference and fold_batchnorm:
        _fold_batchnorm(tree, log)
        for m in tree.root.modules():  # every FoldedConv2d is new (made by the fold above)
            if isinstance(m, FoldedConv2d):
                m.pack_weight = pack_weights
    swaps: list = []
    _swaps(tree.root, "", linear_relu, conv2d, layer_norm, pack_weights, swaps)
    for path, new, entry in swaps:
        tree.set(path, new)
        if entry is not None:
            log.append(entry)
    if inference and epilogues and conv2d:
        _conv_epilogues(tree, log)
    return tree.root
