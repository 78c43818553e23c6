"""Numerical parity harness: every backend against a float64 oracle, with an error budget
relative to PyTorch's own error in the same dtype.

Op level::

    rep = xkernels.parity.check_op("conv2d", x, w, b, padding=1)
    rep.print(); rep.passed; rep.to_json()

runs the op forward and backward on every available backend for the inputs' device (or the
given list), and measures each output and gradient against the float64 oracle
(``xkernels.reference``, i.e. F.linear+relu / F.conv2d / F.layer_norm on float64 CPU copies
of the same inputs): max abs error, max rel error, error in ULPs of the dtype, and the ratio to
PyTorch's own error (the same op run by PyTorch in the inputs' dtype and device, measured
against the same oracle).

Model level::

    rep = xkernels.parity.check_model(model, inputs)

runs the model forward and backward under each backend with hooks on every submodule and
reports, module by module in execution order, where the outputs, the gradients reaching the
module outputs, and the parameter gradients first leave the budget, against a float64 copy of
the model run with the reference backend. A "torch" row (every xkernels op replaced by
PyTorch's own, see ``reference.torch_ops``) gives the same-dtype baseline.

The error budget (``BUDGETS``, one entry per dtype: the relative-to-torch policy of
``xkernels.tolerances``, re-exported here) for a tensor with oracle ``r`` is::

    max|x - r| <= rtol_torch * max|t - r| + atol_rel * max|r|

where ``t`` is PyTorch's same-dtype result: a backend may be a small multiple of PyTorch's
own error, plus a floor of a few ULPs of the tensor's magnitude (PyTorch's error can be
accidentally tiny, and float64's is zero by construction, since the oracle is PyTorch).

Comparing configurations (any model, xkernels or not)::

    rep = xkernels.parity.compare(model, inputs, configs=["cpu", "cuda"])

runs the model under each configuration (a device, a dtype or autocast setting, torch.compile
or eager, an xkernels backend, xkernels.optimize(); combinable, e.g. "cuda+bf16-autocast+compile")
and measures every module output and gradient of every side against the same float64 CPU oracle
with the same per-module budgets, so that the report says which side diverges and where.

The package: ``metrics`` (error of one tensor, the budget), ``dispatch`` (backend resolution and
the dispatch record), ``ops`` (op level), ``model`` (model level across backends), ``compare``
(model level across configurations), ``report`` (printing).
"""

from __future__ import annotations

from .compare import CompareReport, Config, ConfigError, SideResult, compare, parse_config, plot
from .dispatch import BackendSpec, backends_for_device, ran_elsewhere
from .metrics import BUDGETS, Budget, TensorError, budget_for, mantissa_bits, min_exponent, tensor_error
from .model import ModelBackendResult, ModelReport, ModuleEntry, check_model
from .ops import BackendResult, OpReport, check_op
from .report import dispatch_table, make_console, print_reports, summary_table

__all__ = [
    "Budget",
    "BUDGETS",
    "budget_for",
    "tensor_error",
    "TensorError",
    "mantissa_bits",
    "min_exponent",
    "BackendResult",
    "OpReport",
    "check_op",
    "ModuleEntry",
    "ModelBackendResult",
    "ModelReport",
    "check_model",
    "BackendSpec",
    "backends_for_device",
    "ran_elsewhere",
    "summary_table",
    "dispatch_table",
    "print_reports",
    "make_console",
    "compare",
    "Config",
    "ConfigError",
    "parse_config",
    "CompareReport",
    "SideResult",
    "plot",
]
