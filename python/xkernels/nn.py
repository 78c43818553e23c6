"""Drop-in modules on the xkernels ops, and ``optimize(model)``.

- ``FusedLinearReLU``: relu(linear(x)) in one op. Constructor, parameters, initialization and
  state_dict keys are those of ``torch.nn.Linear`` (a checkpoint of ``Linear`` loads into it
  and back); the ReLU is part of the module. Opt-in (``pack_weight=True``): on the SYCL CPU
  backend, calls that need no gradient reuse a pre-packed copy of the weight (see the class docstring).
- ``Conv2d`` / ``LayerNorm``: subclasses of ``torch.nn.Conv2d`` / ``torch.nn.LayerNorm`` (same
  constructor, parameters, state_dict, repr; ``isinstance(m, torch.nn.Conv2d)`` holds) whose
  forward runs the xkernels op. Conv2d supports padding_mode='zeros' only (every padding form:
  int, pair, 'same', 'valid').

``optimize(model)`` swaps these in for ``nn.Linear`` + ``nn.ReLU`` pairs, ``nn.Conv2d`` and
``nn.LayerNorm`` anywhere in a model, sharing the original Parameter objects.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import _C, ops
from .backends import current_backend

__all__ = ["FusedLinearReLU", "Conv2d", "LayerNorm", "optimize"]


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
        w, b = self.weight, self.bias
        if not self.pack_weight or torch.compiler.is_compiling():
            return None
        if torch.is_grad_enabled() and (w.requires_grad or input.requires_grad or (b is not None and b.requires_grad)):
            return None
        if w.device.type != "cpu" or input.device != w.device or input.dtype != w.dtype or w.dim() != 2:
            return None
        backend = _cpu_backend(w.dtype)
        if backend != "sycl":
            return None
        key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, backend)
        cached = self.__dict__.get("_packed_cache")
        if cached is not None and cached[0]() is w and cached[1] == key:
            return cached[2]
        with torch.no_grad():
            packed = ops.pack_linear_weight(w)
        self.__dict__["_packed_cache"] = (weakref.ref(w), key, packed)
        return packed

    def invalidate_packed_weight(self) -> None:
        """Drops the packed copy of the weight (rebuilt at the next call that uses it). Needed only after the
        weight's values changed in a way autograd's version counter does not see (see the class docstring)."""
        self.__dict__.pop("_packed_cache", None)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}" + (
            ", pack_weight=True" if self.pack_weight else ""
        )


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
    """``torch.nn.Conv2d`` running the xkernels conv2d op (padding_mode='zeros' only)."""

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
        if padding_mode != "zeros":
            raise _unsupported_padding_mode(padding_mode)
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        )

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d) -> Conv2d:
        """A Conv2d sharing `conv`'s Parameter objects (padding_mode must be 'zeros')."""
        if conv.padding_mode != "zeros":
            raise _unsupported_padding_mode(conv.padding_mode)
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

    def _get_name(self) -> str:  # repr says which Conv2d this is
        return "xkernels.nn.Conv2d"

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if self.padding_mode != "zeros":
            raise _unsupported_padding_mode(self.padding_mode)
        return ops.conv2d(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)


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


def _shallow_copy(module: nn.Module) -> nn.Module:
    """A new module object with the same parameters/buffers (the same objects) and its own
    child table, so replacing children does not touch the original."""
    new = copy.copy(module)
    new._modules = dict(module._modules)
    new._parameters = dict(module._parameters)
    new._buffers = dict(module._buffers)
    return new


def optimize(
    model: nn.Module,
    inplace: bool = False,
    *,
    linear_relu: bool = True,
    conv2d: bool = True,
    layer_norm: bool = True,
    pack_weights: bool = False,
    report: list[tuple[str, str, str]] | None = None,
) -> nn.Module:
    """Returns `model` with xkernels modules swapped in:

    - ``nn.Linear`` directly followed by ``nn.ReLU`` among the consecutive children of an
      ``nn.Sequential`` -> ``FusedLinearReLU`` (the ReLU slot becomes ``nn.Identity``, so
      indices and state_dict keys stay the same);
    - ``nn.Conv2d`` with padding_mode='zeros' -> ``xkernels.nn.Conv2d``;
    - ``nn.LayerNorm`` -> ``xkernels.nn.LayerNorm``.

    Only those exact classes are replaced (subclasses may override forward). The new modules
    share the original Parameter objects (training one trains the other). With
    ``inplace=False`` (default) the original model's structure is left untouched: containers
    on the path to a replacement are shallow copies. Nested models are handled at any depth.
    If `report` is a list, (qualified name, old class name, new class name) tuples are appended to it.
    ``pack_weights=True`` turns on the pre-packed weight of the new ``FusedLinearReLU`` modules (for
    inference; read its docstring for the one way a packed copy can go stale).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"xkernels.optimize: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")
    log = report if report is not None else []
    make = _replacement(model, conv2d, layer_norm)
    if make is not None:  # the model itself is one replaceable layer
        log.append(("", type(model).__name__, f"xkernels.nn.{type(model).__name__}"))
        return make()
    return _optimize(model, "", inplace, linear_relu, conv2d, layer_norm, log, pack_weights)


def _replacement(child: nn.Module, conv2d: bool, layer_norm: bool) -> Callable[[], nn.Module] | None:
    if conv2d and type(child) is nn.Conv2d and child.padding_mode == "zeros":
        return lambda: Conv2d.from_conv2d(child)
    if layer_norm and type(child) is nn.LayerNorm:
        return lambda: LayerNorm.from_layer_norm(child)
    return None


def _optimize(
    module: nn.Module,
    prefix: str,
    inplace: bool,
    linear_relu: bool,
    conv2d: bool,
    layer_norm: bool,
    log: list,
    pack_weights: bool = False,
) -> nn.Module:
    new_children: dict[str, nn.Module] = {}
    names = list(module._modules)
    skip = set()
    for i, name in enumerate(names):
        child = module._modules[name]
        if child is None or name in skip:
            continue
        qual = f"{prefix}.{name}" if prefix else name
        if (
            linear_relu
            and isinstance(module, nn.Sequential)
            and type(child) is nn.Linear
            and i + 1 < len(names)
            and type(module._modules[names[i + 1]]) is nn.ReLU
        ):
            new_children[name] = FusedLinearReLU.from_linear(child)
            new_children[name].pack_weight = pack_weights
            relu_name = names[i + 1]
            new_children[relu_name] = nn.Identity()
            skip.add(relu_name)
            log.append((qual, "Linear+ReLU", "FusedLinearReLU"))
            continue
        make = _replacement(child, conv2d, layer_norm)
        if make is not None:
            new = make()
            new_children[name] = new
            log.append((qual, type(child).__name__, f"xkernels.nn.{type(new).__name__}"))
            continue
        sub = _optimize(child, qual, inplace, linear_relu, conv2d, layer_norm, log, pack_weights)
        if sub is not child:
            new_children[name] = sub
    if not new_children:
        return module
    target = module if inplace else _shallow_copy(module)
    for name, child in new_children.items():
        target._modules[name] = child
    return target
