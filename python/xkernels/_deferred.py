"""Deferred-wait regions: one wait per container of packed convolutions instead of one per convolution.

On CPU tensors every xkernels op waits for its SYCL kernels before it returns, since any torch op may read its
output next. Inside a container whose forward only chains xkernels convolutions (a ResNet bottleneck after
``optimize()``: three or four packed convolutions with their epilogues, nothing of torch's between them), no host
code reads those outputs, so the waits in between only cost: the host thread sleeps through each kernel, and the
next convolution's Python and submission start only once it is woken. ``optimize(pack_weights=True)`` therefore
wraps the outermost such containers in a *deferred-wait region* (``_C.sycl.defer_waits``): a forward pre-hook opens
it, a forward hook (``always_call``: also when the forward raises) closes it, and closing waits for the kernels
and raises their errors. The container's output is complete when it returns.

What keeps it exact (csrc/sycl/launch.h ``PendingHostWork``): inside a region, ``conv2d_packed``'s SYCL route
returns with its kernels queued only where it runs nothing but kernels (float32 / float64, input, residual and
bias dense as read in place); every other op entry, and an xkernels convolution module that does not take its
remembered packed route, first waits for the queued kernels (``settle_host_work``); memory released meanwhile
(the SYCL backend's blocks and torch's CPU allocator's) is kept until the region's wait. At each call the region
opens only if every module under the container is still the one seen at ``optimize()`` time and none of them (nor
the container beyond its own two hooks) has a hook or a forward set on the instance, no global module hook is
registered, and torch.compile is not tracing: such code could read a tensor whose kernel has not run.
"""

from __future__ import annotations

import threading

import torch
from torch import fx, nn

from . import _C

_SYCL = getattr(_C, "sycl", None)

# Hook tables a module may carry (torch.nn.Module attributes); a module with any entry blocks a region.
_TABLES = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)
_GLOBAL_TABLES = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_opened = threading.local()  # per thread: a stack of "did this container's pre-hook open a region"


def settle() -> None:
    """Inside a region: waits for this thread's queued kernels (the caller is about to run host code on tensors)."""
    if _SYCL is not None:
        _SYCL.settle_host_work()


def _stack() -> list:
    s = getattr(_opened, "stack", None)
    if s is None:
        s = _opened.stack = []
    return s


class _Region:
    """The pre-hook and forward hook pair of one container (picklable: a module-level class)."""

    def __init__(self, container: nn.Module):
        parents = list(container.modules())
        self.counts = [(p, len(p._modules)) for p in parents]
        self.links = [(p, name, child) for p in parents for name, child in p._modules.items()]

    def _unchanged(self, container: nn.Module) -> bool:
        g = nn.modules.module
        if any(getattr(g, t, None) for t in _GLOBAL_TABLES):
            return False
        if len(container._forward_pre_hooks) != 1 or len(container._forward_hooks) != 1:
            return False
        if container._backward_hooks or container._backward_pre_hooks:
            return False
        for parent, n in self.counts:
            if len(parent._modules) != n:
                return False
        for parent, name, child in self.links:
            if parent._modules.get(name) is not child or any(getattr(child, t, None) for t in _TABLES):
                return False
            if "forward" in child.__dict__:  # a forward set on the instance: any code
                return False
        return True

    def pre(self, container: nn.Module, args) -> None:
        if torch.compiler.is_compiling():
            return
        _stack().append(self._unchanged(container) and _SYCL.defer_waits(True))

    def post(self, container: nn.Module, args, output) -> None:
        if torch.compiler.is_compiling():
            return
        stack = _stack()
        if stack and stack.pop():
            _SYCL.defer_waits(False)


def _deferrable(m: nn.Module) -> bool:
    """Does m's forward run only xkernels convolutions (and Identity slots), nothing that reads a tensor on the host?"""
    from .nn import Conv2d, Conv2dEpilogue

    if isinstance(m, Conv2d):
        return type(m).forward in (Conv2d.forward, Conv2dEpilogue.forward)
    if type(m) is nn.Identity:
        return True
    if type(m) is nn.Sequential:
        return len(m) > 0 and all(_deferrable(c) for c in m)
    if isinstance(m, fx.GraphModule):
        for node in m.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op != "call_module" or not _deferrable(m.get_submodule(node.target)):
                return False
        return True
    return False


def _convolutions(m: nn.Module) -> int:
    from .nn import Conv2d

    return sum(isinstance(c, Conv2d) for c in m.modules())


def attach(root: nn.Module, owned) -> list[str]:
    """Wraps the outermost deferrable containers under `root` (those `owned(module)` says optimize() made, with two
    or more convolutions and no hooks) in deferred-wait regions; returns their qualified names."""
    if _SYCL is None or not hasattr(_SYCL, "defer_waits"):
        return []
    done: list[str] = []

    def visit(m: nn.Module, path: str) -> None:
        container = type(m) is nn.Sequential or isinstance(m, fx.GraphModule)
        if container and owned(m) and _convolutions(m) >= 2 and _deferrable(m) and not _has_hooks(m):
            for t in ("_forward_pre_hooks", "_forward_hooks"):  # its own tables (a copy shares the original's)
                setattr(m, t, type(getattr(m, t))())
            for t in ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
                if hasattr(m, t):
                    setattr(m, t, type(getattr(m, t))())
            region = _Region(m)
            m.register_forward_pre_hook(region.pre)
            m.register_forward_hook(region.post, always_call=True)
            done.append(path)
            return
        for name, child in m._modules.items():
            if child is not None:
                visit(child, f"{path}.{name}" if path else name)

    visit(root, "")
    return done


def _has_hooks(m: nn.Module) -> bool:
    return any(getattr(m, t, None) for t in _TABLES)
