"""``xkernels.optimize(model)``: swaps the ``xkernels.nn`` modules into a model, with its torch.fx passes.

Public names are re-exported by ``xkernels.nn`` (``optimize``, ``call_graph``, ``find_conv_bn``,
``find_conv_epilogues``, ``ConvBNMatch``, ``EpilogueMatch``) and ``xkernels.optimize`` is this module's
``optimize``. The modules it builds (``FusedLinearReLU``, ``Conv2d``, ``FoldedConv2d``, ``Conv2dEpilogue``,
``LayerNorm``) and their packed-weight cache are in ``xkernels.nn``.
"""

from __future__ import annotations

import copy
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from .nn import Conv2d, Conv2dEpilogue, FoldedConv2d, FusedLinearReLU, LayerNorm, _foldable_batchnorm

__all__ = ["optimize", "call_graph", "find_conv_bn", "find_conv_epilogues", "ConvBNMatch", "EpilogueMatch"]


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
