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

from . import _deferred
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

    def owns(self, module: nn.Module) -> bool:
        """Was `module` made (or copied) by this rewrite, i.e. not the user's object?"""
        return id(module) in self._own

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


# --- hooks
#
# A module's hooks live in per-module tables (torch.nn.Module attributes). A replacement that computes the
# same output from the same input as the module it replaces takes over the module's tables (the very same
# objects, as the containers optimize() copies share theirs: a hook registered or removed, through a handle or
# otherwise, on either module is so on both). A fused replacement in which the module's own input, output or
# state no longer exist cannot run the hooks that see them: that module and the fusion are left as they are,
# and the report says why (`_hook_blocker`).

_HOOK_TABLES = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)

# Which hooks see what: the module's input (forward pre-hooks), its output or gradients (forward hooks,
# backward hooks), its parameters and buffers (state_dict hooks).
_SEES_INPUT = (("_forward_pre_hooks", "a forward pre-hook"),)
_SEES_OUTPUT = (
    ("_forward_hooks", "a forward hook"),
    ("_backward_hooks", "a backward hook"),
    ("_backward_pre_hooks", "a backward pre-hook"),
)
_SEES_STATE = (
    ("_state_dict_hooks", "a state_dict hook"),
    ("_state_dict_pre_hooks", "a state_dict pre-hook"),
    ("_load_state_dict_pre_hooks", "a load_state_dict pre-hook"),
    ("_load_state_dict_post_hooks", "a load_state_dict post-hook"),
)


def _hook_blocker(m: nn.Module, name: str, input: bool, output: bool, state: bool) -> str | None:
    """Why module `m` (at path `name`) cannot be replaced by a rewrite in which its input (`input`), its output
    (`output`) or its parameters and buffers (`state`) are not what its hooks would see; None when it can.
    Backward hooks of the old kind (register_backward_hook) see the inputs of the autograd node that computed
    the output, which is another node in every replacement: they block any rewrite."""
    if getattr(m, "_backward_hooks", None) and m._is_full_backward_hook is False:
        return f"{type(m).__name__} '{name}' has a non-full backward hook (register_backward_hook)"
    kinds = (_SEES_INPUT if input else ()) + (_SEES_OUTPUT if output else ()) + (_SEES_STATE if state else ())
    found = [what for table, what in kinds if getattr(m, table, None)]
    if not found:
        return None
    return f"{type(m).__name__} '{name}' has {' and '.join(found)}"


def _carry_hooks(old: nn.Module, new: nn.Module) -> nn.Module:
    """`new` takes over `old`'s hook tables (the same objects); returns `new`."""
    for table in _HOOK_TABLES:
        if hasattr(old, table):
            setattr(new, table, getattr(old, table))
    new._is_full_backward_hook = getattr(old, "_is_full_backward_hook", None)
    return new


def _unchanged(reason: str, because: str) -> str:
    """The report's third field for a rewrite left undone: what was not done, and the hook that prevents it."""
    return f"unchanged: {reason}: {because}"


# --- pass 1: BatchNorm folding


@dataclass
class ConvBNMatch:
    """A BatchNorm2d applied directly (and only) to a Conv2d's output; paths from the model's root."""

    conv: str
    bn: str


def find_conv_bn(model: nn.Module, skipped: list | None = None) -> list[ConvBNMatch]:
    """The foldable Conv2d -> BatchNorm2d pairs in `model`: in some container's forward the BN's input
    is the conv's output and nothing else uses that output; the BN is in eval mode and tracks running
    statistics; conv (nn.Conv2d or xkernels.nn.Conv2d, padding_mode 'zeros') and BN are each called once and
    sit at one place in the model; and no hook sees what folding removes: the conv may have forward pre-hooks
    (its input stays), but no forward or backward hooks (its own output is gone) or state_dict hooks (its
    weight and bias change), and the BN no hook at all. Pairs left out for a hook are appended to `skipped`
    (if a list) as (match, reason)."""
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
            match = ConvBNMatch(conv[0], bn[0])
            blocker = _hook_blocker(*conv[::-1], input=False, output=True, state=True) or _hook_blocker(
                *bn[::-1], input=True, output=True, state=True
            )
            if blocker is not None:
                if skipped is not None:
                    skipped.append((match, blocker))
                continue
            out.append(match)
    return out


def _fold_batchnorm(tree: _Tree, log: list) -> None:
    skipped: list = []
    for match in find_conv_bn(tree.root, skipped):
        conv, bn = tree.get(match.conv), tree.get(match.bn)
        folded = FoldedConv2d.from_conv_bn(conv, bn, f"BatchNorm2d '{match.bn}'")
        tree.set(match.conv, _carry_hooks(conv, folded))  # forward pre-hooks only (find_conv_bn)
        tree.set(match.bn, nn.Identity())
        log.append((match.conv, f"{type(conv).__name__}+BatchNorm2d", "xkernels.nn.FoldedConv2d"))
    for match, blocker in skipped:
        conv = tree.get(match.conv)
        log.append((match.conv, f"{type(conv).__name__}+BatchNorm2d", _unchanged("BatchNorm2d not folded", blocker)))


# --- pass 2: module swaps


def _replacement(child: nn.Module, conv2d: bool, layer_norm: bool) -> Callable[[], nn.Module] | None:
    """How to make the xkernels module that replaces `child` (taking over its hooks), or None."""
    if conv2d and type(child) is nn.Conv2d and child.padding_mode == "zeros":
        return lambda: _carry_hooks(child, Conv2d.from_conv2d(child))
    if layer_norm and type(child) is nn.LayerNorm:
        return lambda: _carry_hooks(child, LayerNorm.from_layer_norm(child))
    return None


def _swaps(
    module: nn.Module,
    prefix: str,
    linear_relu: bool,
    conv2d: bool,
    layer_norm: bool,
    pack_weights: bool,
    out: list,
    made: dict | None = None,
) -> None:
    """Collects (path, new module, log entry) for every replaceable slot below `module`. A module at several
    paths gets one replacement object (`made`: id of the original -> its replacement), so that it stays shared."""
    made = {} if made is None else made
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
            relu_path = _join(prefix, names[i + 1])
            relu = module._modules[names[i + 1]]
            # The Linear's own output (before the ReLU) and the ReLU's input no longer exist in the fused module.
            blocker = _hook_blocker(child, qual, input=False, output=True, state=False) or _hook_blocker(
                relu, relu_path, input=True, output=True, state=False
            )
            if blocker is not None:
                out.append((qual, None, (qual, "Linear+ReLU", _unchanged("not fused", blocker))))
                skip.add(names[i + 1])
                continue
            key = ("linear_relu", id(child), id(relu))
            if key not in made:
                new = _carry_hooks(child, FusedLinearReLU.from_linear(child))
                new.pack_weight = pack_weights
                made[key] = (new, _carry_hooks(relu, nn.Identity()))  # the ReLU's state_dict hooks, if any
            new, identity = made[key]
            out.append((qual, new, (qual, "Linear+ReLU", "FusedLinearReLU")))
            out.append((relu_path, identity, None))
            skip.add(names[i + 1])
            continue
        make = _replacement(child, conv2d, layer_norm)
        if make is not None:
            blocker = _hook_blocker(child, qual, input=False, output=False, state=False)
            if blocker is not None:
                out.append((qual, None, (qual, type(child).__name__, _unchanged("not replaced", blocker))))
                continue
            if id(child) not in made:
                made[id(child)] = make()
                if isinstance(made[id(child)], Conv2d):
                    made[id(child)].pack_weight = pack_weights
            new = made[id(child)]
            out.append((qual, new, (qual, type(child).__name__, f"xkernels.nn.{type(new).__name__}")))
            continue
        _swaps(child, qual, linear_relu, conv2d, layer_norm, pack_weights, out, made)


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


def find_conv_epilogues(
    model: nn.Module, graphs: _Graphs | None = None, skipped: list | None = None
) -> list[EpilogueMatch]:
    """The conv epilogue chains in `model`: an xkernels.nn.Conv2d (FoldedConv2d included) called once whose
    output goes, through any Identity modules (folded BatchNorm slots), into an optional residual addition and an
    optional ReLU, every intermediate result used only by the next step. torch.nn.Conv2d layers (reflect
    padding, or optimize(conv2d=False)) are not matched. Matches do not overlap: where two convolutions meet in
    one residual add (conv2(...) + downsample(x)), the first in graph order takes the add and the ReLU, and a
    node that is one match's residual operand is never part of another match's chain. A chain is not matched
    when a hook would see what the fused call removes: forward or backward hooks of the conv (its own output is
    gone), forward pre-hooks of the conv when there is a residual (the fused call's input is (input,
    residual)), or any forward or backward hook of an Identity or ReLU module in the chain; such chains are
    appended to `skipped` (if a list) as (match, reason)."""
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
            match = EpilogueMatch(container, conv[0], residual.name if residual is not None else None, relu, chain)
            blocker = _epilogue_hook_blocker(model, match)
            if blocker is not None:
                if skipped is not None:
                    skipped.append((match, blocker))
                continue
            names = {nd.name for nd in chain}
            if names & claimed or (residual is not None and residual.name in claimed):
                continue
            claimed |= names | ({residual.name} if residual is not None else set())
            out.append(match)
    return out


def _epilogue_hook_blocker(model: nn.Module, match: EpilogueMatch) -> str | None:
    conv = model.get_submodule(match.conv)
    blocker = _hook_blocker(conv, match.conv, input=match.residual is not None, output=True, state=False)
    for nd in match.nodes[1:]:
        inner = _node_module(model, match.container, nd)  # Identity or ReLU modules (add / functional relu: None)
        if blocker is None and inner is not None:
            blocker = _hook_blocker(inner[1], inner[0], input=True, output=True, state=False)
    return blocker


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
    conv = tree.get(match.conv)
    tree.set(match.conv, _carry_hooks(conv, Conv2dEpilogue.from_conv2d(conv, relu=match.relu)))
    relu_path = _join(match.container, match.nodes[-1].target)
    tree.set(relu_path, _carry_hooks(tree.get(relu_path), nn.Identity()))  # its state_dict hooks, if any
    return True


def _graph_rewrite(tree: _Tree, container_path: str, graph: fx.Graph, matches: list[EpilogueMatch]) -> None:
    """Rewrites `container`'s forward graph: each matched chain becomes one call of its Conv2dEpilogue
    (residual as second argument); the container becomes a GraphModule with the same children."""
    for match in matches:
        conv = tree.get(match.conv)
        tree.set(match.conv, _carry_hooks(conv, Conv2dEpilogue.from_conv2d(conv, relu=match.relu)))
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
    gm = _carry_hooks(container, fx.GraphModule(container, graph, class_name=type(container).__name__))
    gm.training = container.training
    tree.set(container_path, gm)


def _epilogue_kind(m: EpilogueMatch) -> str:
    return "conv2d" + ("+add" if m.residual is not None else "") + ("+ReLU" if m.relu else "")


def _conv_epilogues(tree: _Tree, log: list) -> None:
    gs = _graphs(tree.root)
    skipped: list = []
    matches = find_conv_epilogues(tree.root, gs, skipped)
    by_container: dict[str, list[EpilogueMatch]] = {}
    for m in matches:
        if not _sequential_rewrite(tree, m):
            by_container.setdefault(m.container, []).append(m)
    # A rewritten container becomes a GraphModule that takes over its hooks (same input, same output), but not
    # hooks of the old kind (register_backward_hook), which see the autograd node of the forward's last operation.
    blocked = {}
    for path in by_container:
        blocker = _hook_blocker(tree.get(path), path or "<model>", input=False, output=False, state=False)
        if blocker is not None:
            blocked[path] = blocker
    for m in matches:
        if m.container in blocked and any(m is g for g in by_container[m.container]):
            skipped.append((m, blocked[m.container]))
        else:
            log.append((m.conv, _epilogue_kind(m), "xkernels.nn.Conv2dEpilogue"))
    for m, blocker in skipped:
        log.append((m.conv, _epilogue_kind(m), _unchanged("not fused", blocker)))
    # Deepest containers first: rewriting a container replaces its module object, and its path stays valid.
    for path in sorted(by_container, key=lambda p: -p.count(".") - (1 if p else 0)):
        if path not in blocked:
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
    memory_format: str | torch.memory_format = "auto",
    defer_waits: bool = True,
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
      children (their class name kept, and the container's hooks; its other Python attributes are not carried
      over).

    ``memory_format`` (models with convolutions): ``"channels_last"`` (or ``torch.channels_last``) runs them
    channels_last end to end: every convolution xkernels put in gets ``channels_last=True``, so a 4-D input
    arriving in another format is converted once, at the first convolution, and from there each convolution's
    output, its fused epilogue, and the pooling, BatchNorm, ReLU and additions between them (torch's ops keep
    the format) stay NHWC; float64 stays as it is (ATen's float64 convolutions are contiguous). The weights
    are not converted: xkernels' convolution kernels read them through a packed panel layout built per call
    (or once, with ``pack_weights``), whatever their format. A 4-D output of the model comes back channels_last
    (same values, other strides). ``"preserve"`` (or ``torch.preserve_format``) leaves every tensor in the
    format it comes in. ``"auto"`` (default): channels_last for a network (two or more convolutions; for one
    layer the conversion would be a copy per call) whose parameters are all on the CPU, where it measured
    faster (docs/performance.md, "Memory format through optimize()"); preserve elsewhere (on CUDA the two
    formats measured within 10 % of each other, either way, on an H200).

    ``defer_waits`` (eval-mode models with ``pack_weights=True``): the outermost containers (``nn.Sequential`` or
    rewritten ones) whose forward only chains xkernels convolutions, two or more (a ResNet bottleneck, a stage
    of them), wait once for their kernels, when they return, instead of once per convolution (``_deferred.py``;
    docs/performance.md, "One wait per bottleneck"). Such a container gets a forward pre-hook and a forward hook of its
    own (and its own hook tables). The results are the same bits; the region is skipped for a call where any
    module under the container has a hook, was replaced or had its forward set on the instance, where a global
    module hook exists, or under torch.compile. ``False`` leaves every convolution waiting for its own kernels.

    A model in train mode keeps exact module semantics: BatchNorm stays torch's (batch statistics,
    running statistics updated as torch does) and no forward is rewritten.

    Only those exact classes are replaced (subclasses may override forward). Replaced modules share the
    original Parameter objects (training one trains the other), except folded convolutions, which own new
    ones. With ``inplace=False`` (default) the original model is never modified: containers on the path to a
    replacement are shallow copies; a module that sits at several places gets one replacement. Nested models
    are handled at any depth. If `report` is a list, (qualified name, old, new) tuples are appended to it.
    ``pack_weights=True`` turns on the pre-packed weight of the new ``FusedLinearReLU`` and convolution modules
    (for inference; read FusedLinearReLU's docstring for the one way a packed copy can go stale).

    Hooks: a replacement takes over the hook tables of the module it replaces (the same objects, so handles
    keep working): forward pre-hooks, forward hooks (with_kwargs, always_call), full backward hooks and
    backward pre-hooks, state_dict and load_state_dict hooks; they run as often and with the same tensors as on
    the original module. A fusion that would remove what a hook sees is not done: a Conv2d with a forward or
    backward hook (or a state_dict hook) keeps its BatchNorm2d unfolded, a BatchNorm2d with any hook is not
    folded, a Linear with a forward or backward hook or a ReLU with a forward, pre- or backward hook is not
    fused into FusedLinearReLU, and a conv epilogue is not fused when the conv has a forward or backward hook
    (or a forward pre-hook and a residual) or its ReLU / Identity modules have hooks; a module with a backward
    hook of the old kind (``register_backward_hook``) is not replaced at all. Each such case is reported as
    (qualified name, old, "unchanged: <what was not done>: <the module and its hook>")."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"xkernels.optimize: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")
    log = report if report is not None else []
    channels_last = _channels_last_wanted(memory_format, model)
    make = _replacement(model, conv2d, layer_norm)
    if make is not None:  # the model itself is one replaceable layer
        blocker = _hook_blocker(model, "<model>", input=False, output=False, state=False)
        if blocker is not None:
            log.append(("", type(model).__name__, _unchanged("not replaced", blocker)))
            return model
        log.append(("", type(model).__name__, f"xkernels.nn.{type(model).__name__}"))
        new = make()
        if isinstance(new, Conv2d):
            new.pack_weight = pack_weights
            new.channels_last = channels_last
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
        if new is not None:
            tree.set(path, new)
        if entry is not None:
            log.append(entry)
    if inference and epilogues and conv2d:
        _conv_epilogues(tree, log)
    if channels_last:
        for m in tree.root.modules():
            if isinstance(m, Conv2d) and tree.owns(m):  # only modules optimize() made: the user's stay as they are
                m.channels_last = True
    if inference and pack_weights and conv2d and defer_waits:
        _deferred.attach(tree.root, lambda m: tree.inplace or tree.owns(m))  # never a container of the user's copy
    return tree.root


_MEMORY_FORMATS = ("auto", "channels_last", "preserve")


def _channels_last_wanted(memory_format, model: nn.Module) -> bool:
    """optimize()'s memory_format argument, checked, as: run the new convolutions channels_last?"""
    if memory_format is torch.channels_last:
        memory_format = "channels_last"
    elif memory_format is torch.preserve_format:
        memory_format = "preserve"
    if not isinstance(memory_format, str) or memory_format not in _MEMORY_FORMATS:
        raise ValueError(
            "xkernels.optimize: argument 'memory_format' must be one of 'auto', 'channels_last', 'preserve' "
            f"(or torch.channels_last / torch.preserve_format), got {memory_format!r}"
        )
    if memory_format != "auto":
        return memory_format == "channels_last"
    devices = {p.device.type for p in model.parameters()}
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    return devices == {"cpu"} and convs >= 2
