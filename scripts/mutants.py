#!/usr/bin/env python3
"""Planted-bug (mutation) check of the test suite: would the tests notice a small bug?

Each entry of MUTANTS below is one small source change (a flipped comparison, an off-by-one, a
dropped or swapped term, a dropped cache-key field, a loosened tolerance), the tests that cover the
changed code, and a one-line description. The runner applies them one at a time to a scratch copy of
the checkout, rebuilds what the change needs, runs the mapped tests (pytest -x) and records

  killed        a test failed (or the test process crashed): the suite notices this bug
  survived      every mapped test passed: a hole in the suite (write a test that kills it)
  timed out     the tests ran past the mutant's time limit (an endless loop counts as noticed)
  build-failed  the change does not compile (the table entry is wrong: fix it)
  equivalent    not run: the entry says why the change cannot alter behaviour

The kill rate is (killed + timed out) / (mutants run - build-failed); equivalent entries are listed
but not counted. Results go to the terminal (a table) and to docs/mutants_results.md (date, commit,
CPU model and ISA, kill rate, one row per mutant); `--only` runs update their rows there.

Usage (from the repository root, in the environment the project builds in; see docs/testing.md):
  python scripts/mutants.py            # every mutant (15-60 minutes on a 2-core machine)
  python scripts/mutants.py --list     # the table, nothing run
  python scripts/mutants.py --only ID [--only ID ...]
  python scripts/mutants.py --check    # each snippet occurs exactly once (as tests/test_mutants_table.py)

Scratch copy: build/mutants/tree holds a copy of the checkout's files (`git ls-files -co
--exclude-standard`: tracked and untracked-but-not-ignored files, so uncommitted work is included)
with its own CMake build directory, kept between runs so that only what changed recompiles. Builds use
XKERNELS_ACPP=off (no AdaptiveCpp; the tests run on the reference and SYCL backends, both required).

Rebuilds: a C++ host file (csrc/**) rebuilds incrementally (`cmake --build`). The SYCL kernel files
(csrc/sycl/kernels/*.hpp) reach the SYCL backend only as the text cmake/EmbedKernels.cmake embeds
into generated/sycl_kernel_sources.cpp (compiled at run time by the SYCL runtime): a change there
re-runs that embedding, recompiles that one object and relinks, with the header's timestamp kept,
so the host files that include it for their launch tables (kernel_table.h) are not recompiled for a
change in a kernel body the host never runs. Python changes need no build.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "build" / "mutants"
TREE = SCRATCH / "tree"
BUILD = TREE / "build" / "dev"
RESULTS_JSON = SCRATCH / "results.json"
RESULTS_MD = ROOT / "docs" / "mutants_results.md"
KERNEL_DIR = "csrc/sycl/kernels/"
DEFAULT_TIMEOUT_S = 480


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str  # relative to the repository root
    original: str  # must occur exactly once in `file`
    replacement: str
    tests: str  # pytest arguments (files, node ids, -k expressions), run with -x -q
    description: str
    equivalent: str = ""  # non-empty: cannot change behaviour, with the reason (not run)
    timeout_s: int = DEFAULT_TIMEOUT_S
    env: dict = field(default_factory=dict)


M = Mutant
T_SIZE = "tests/test_conv2d_size_rules.py"
T_VAL = "tests/test_validation.py"
T_LIN = "tests/test_fused_linear_relu.py"
T_CONV = "tests/test_conv2d.py"
T_CRELU = "tests/test_conv2d_relu_grads.py tests/test_conv2d_relu.py"
T_LN = "tests/test_layer_norm.py"
T_CTRL = "tests/test_bound_controls.py"

MUTANTS: list[Mutant] = [
    # ------------------------------------------------------------------ validation: csrc/shapes.cpp
    M(
        "shapes-kernel-height-only",
        "csrc/shapes.cpp",
        "XK_CHECK_VALUE(eff_kh <= ph && eff_kw <= pw, op,",
        "XK_CHECK_VALUE(eff_kh <= ph, op,",
        T_SIZE,
        "conv2d: the dilated-kernel-vs-padded-input check on the height only (issue #30, bug 1)",
    ),
    M(
        "shapes-floor-div-truncates",
        "csrc/include/xkernels/shapes.h",
        "inline int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }",
        "inline int64_t floor_div(int64_t a, int64_t b) { return a / b; }",
        "tests/test_rules.py",
        "the conv2d output-size rule (C++, exported to the fakes) divides toward zero, not toward minus infinity",
    ),
    M(
        "shapes-kernel-width-dilation-index",
        "csrc/shapes.cpp",
        "eff_kw = p.dilation[1] * (p.KW - 1) + 1;",
        "eff_kw = p.dilation[0] * (p.KW - 1) + 1;",
        f"{T_SIZE} {T_CONV}",
        "conv2d: the effective kernel width uses dilation[0]",
    ),
    M(
        "shapes-padded-width-index",
        "csrc/shapes.cpp",
        "pw = p.W + 2 * p.padding[1];",
        "pw = p.W + 2 * p.padding[0];",
        f"{T_SIZE} {T_CONV}",
        "conv2d: the padded width uses padding[0]",
    ),
    M(
        "shapes-stride-zero-accepted",
        "csrc/shapes.cpp",
        "XK_CHECK_VALUE(stride[0] > 0 && stride[1] > 0, op,",
        "XK_CHECK_VALUE(stride[0] > 0 && stride[1] >= 0, op,",
        f"{T_SIZE} -k argument_rules",
        "conv2d: stride[1] == 0 accepted",
    ),
    M(
        "shapes-negative-padding-accepted",
        "csrc/shapes.cpp",
        "XK_CHECK_VALUE(padding[0] >= 0 && padding[1] >= 0, op,",
        "XK_CHECK_VALUE(padding[0] >= 0 && padding[1] >= -1, op,",
        f"{T_SIZE} -k argument_rules",
        "conv2d: padding[1] == -1 accepted",
    ),
    M(
        "shapes-output-width-off-by-one",
        "csrc/shapes.cpp",
        "p.OW = conv2d_out_size(p.W, p.KW, p.stride[1], p.padding[1], p.dilation[1]);",
        "p.OW = conv2d_out_size(p.W, p.KW, p.stride[1], p.padding[1], p.dilation[1]) - 1;",
        T_CONV,
        "conv2d: output width one short",
    ),
    M(
        "shapes-linear-bias-length",
        "csrc/shapes.cpp",
        "XK_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == p.N, op,",
        "XK_CHECK_VALUE(bias->dim() == 1 && bias->size(0) >= p.N, op,",
        T_VAL,
        "fused_linear_relu: a bias longer than N accepted",
    ),
    M(
        "shapes-residual-shape",
        "csrc/shapes.cpp",
        "XK_CHECK_VALUE(residual->sizes() == at::IntArrayRef(expect), op,",
        "XK_CHECK_VALUE(residual->numel() == c10::multiply_integers(expect), op,",
        "tests/test_shape_rules_same_numel.py",
        "conv2d_relu: a residual of another shape with as many elements accepted",
    ),
    M(
        "shapes-layer-norm-weight-shape",
        "csrc/shapes.cpp",
        "XK_CHECK_VALUE(weight->sizes() == normalized_shape, op,",
        "XK_CHECK_VALUE(weight->numel() == c10::multiply_integers(normalized_shape), op,",
        "tests/test_shape_rules_same_numel.py",
        "layer_norm: a weight of another shape with as many elements accepted",
    ),
    # ------------------------------------------------------------------ Python layer: ops.py
    M(
        "ops-conv2d-relu-any-mask",
        "python/xkernels/ops.py",
        "    if any(mask):\n",
        "    if mask[0]:\n",
        T_CRELU,
        "conv2d_relu backward: weight/bias grads only when the input needs grad (issue #30, bug 3)",
    ),
    M(
        "ops-conv2d-relu-nan-mask",
        "python/xkernels/ops.py",
        "grad = grad.masked_fill(output <= 0, 0)",
        "grad = grad.masked_fill(~(output > 0), 0)",
        T_CRELU,
        "conv2d_relu backward: the ReLU mask blocks NaN outputs (issue #30, bug 2)",
    ),
    M(
        "ops-conv2d-relu-residual-grad-index",
        "python/xkernels/ops.py",
        "gr = grad if ctx.has_residual and ctx.needs_input_grad[7] else None",
        "gr = grad if ctx.has_residual and ctx.needs_input_grad[0] else None",
        T_CRELU,
        "conv2d_relu backward: the residual's grad follows the input's requires_grad",
    ),
    M(
        "ops-linear-weight-mask",
        "python/xkernels/ops.py",
        "    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]\n"
        "    with _ForwardSelection(ctx.backend_selection):\n"
        "        gi, gw, gb = _ops.fused_linear_relu_backward",
        "    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[0], ctx.has_bias and ctx.needs_input_grad[2]]\n"
        "    with _ForwardSelection(ctx.backend_selection):\n"
        "        gi, gw, gb = _ops.fused_linear_relu_backward",
        f"{T_LIN} -k partial_grads",
        "fused_linear_relu backward: the weight grad follows the input's requires_grad",
    ),
    M(
        "ops-layer-norm-bias-mask",
        "python/xkernels/ops.py",
        "        ctx.has_bias and ctx.needs_input_grad[3],\n",
        "        ctx.has_bias and ctx.needs_input_grad[2],\n",
        f"{T_LN} tests/test_fuzz.py -k 'layer_norm and not out'",
        "layer_norm backward: the bias grad follows the weight's requires_grad",
    ),
    M(
        "ops-fake-output-width-stride",
        "python/xkernels/ops.py",
        "OW = _C.conv2d_out_size(W, KW, stride[1], padding[1], dilation[1])",
        "OW = _C.conv2d_out_size(W, KW, stride[0], padding[1], dilation[1])",
        f"{T_SIZE} -k fakes",
        "conv2d fake (meta shapes): the output width divides by stride[0]",
    ),
    M(
        "ops-fake-kernel-height-only",
        "python/xkernels/ops.py",
        "        OH > 0 and OW > 0,\n",
        "        OH > 0,\n",
        f"{T_SIZE} -k fakes",
        "conv2d fake: the kernel-size check on the height only",
    ),
    M(
        "registration-same-padding-swapped",
        "csrc/registration.cpp",
        "x = at::constant_pad_nd(input, {0, extra_w, 0, extra_h}, 0);",
        "x = at::constant_pad_nd(input, {0, extra_h, 0, extra_w}, 0);",
        "tests/test_conv2d.py tests/test_conv2d_relu.py -k padding",
        "conv2d padding='same': the odd extra row/column padded on the wrong side",
    ),
    # ------------------------------------------------------------------ nn.py: packed-weight cache key
    M(
        "nn-cache-key-version",
        "python/xkernels/nn.py",
        "key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, backend)",
        "key = (w.data_ptr(), tuple(w.shape), w.dtype, w.device, backend)",
        "tests/test_conv2d_packed.py tests/test_nn.py",
        "packed-weight cache: the version counter dropped from the key (in-place updates unseen)",
    ),
    M(
        "nn-cache-key-data-ptr",
        "python/xkernels/nn.py",
        "key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, backend)",
        "key = (w._version, tuple(w.shape), w.dtype, w.device, backend)",
        "tests/test_packed_cache_key.py tests/test_conv2d_packed.py tests/test_nn.py",
        "packed-weight cache: the data pointer dropped from the key (.data replaced unseen)",
    ),
    M(
        "nn-cache-key-shape",
        "python/xkernels/nn.py",
        "key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype, w.device, backend)",
        "key = (w.data_ptr(), w._version, w.dtype, w.device, backend)",
        "tests/test_packed_cache_key.py tests/test_conv2d_packed.py tests/test_nn.py",
        "packed-weight cache: the shape dropped from the key",
    ),
    M(
        "nn-epilogue-relu-flag",
        "python/xkernels/nn.py",
        "        m.relu = bool(relu)\n",
        "        m.relu = True\n",
        "tests/test_optimize.py",
        "Conv2dEpilogue.from_conv2d: always ReLU (conv + residual without ReLU gets one)",
    ),
    # ------------------------------------------------------------------ tolerances.py
    M(
        "tol-bound-safety",
        "python/xkernels/tolerances.py",
        "BOUND_SAFETY = 4.0",
        "BOUND_SAFETY = 400.0",
        f"{T_CTRL} -k checker_rejects",
        "rigorous bounds of the fuzz / hostile tests 100x looser (issue #30, bug 4)",
    ),
    M(
        "tol-elementwise-float32",
        "python/xkernels/tolerances.py",
        "    torch.float32: (1e-5, 1e-5),\n",
        "    torch.float32: (1e-3, 1e-3),\n",
        f"{T_CTRL} -k assert_close_rejects",
        "policy-1 float32 tolerance 100x looser",
    ),
    M(
        "tol-elementwise-float64",
        "python/xkernels/tolerances.py",
        "    torch.float64: (1e-10, 1e-10),\n",
        "    torch.float64: (1e-6, 1e-6),\n",
        f"{T_CTRL} -k assert_close_rejects",
        "policy-1 float64 tolerance 10^4x looser",
    ),
    M(
        "tol-rtol-torch",
        "python/xkernels/tolerances.py",
        "_RTOL_TORCH = {torch.float64: 4.0, torch.float32: 4.0,",
        "_RTOL_TORCH = {torch.float64: 4.0, torch.float32: 400.0,",
        f"{T_CTRL} -k within_budget",
        "policy-2 (relative to torch) float32 budget 100x looser",
    ),
    M(
        "tol-same-formula",
        "python/xkernels/tolerances.py",
        "\nFLOAT64_SAME_FORMULA = 1e-12\n",
        "\nFLOAT64_SAME_FORMULA = 1e-8\n",
        f"{T_CTRL} -k between_backends",
        "float64 between-backends tolerance 10^4x looser",
    ),
    # ------------------------------------------------------------------ reference kernels: csrc/cpu
    M(
        "ref-linear-bias-dropped",
        "csrc/cpu/fused_linear_relu.cpp",
        "if (B) sum += static_cast<acc>(B[j]);",
        "if (B) sum += acc(0);",
        f"{T_LIN} -k reference",
        "reference fused_linear_relu: the bias dropped",
    ),
    M(
        "ref-linear-relu-drops-nan",
        "csrc/cpu/fused_linear_relu.cpp",
        "Y[i * N + j] = static_cast<scalar_t>(sum < acc(0) ? acc(0) : sum);",
        "Y[i * N + j] = static_cast<scalar_t>(sum > acc(0) ? sum : acc(0));",
        f"{T_LIN} -k reference",
        "reference fused_linear_relu: ReLU as max(x, 0) that turns NaN into 0",
    ),
    M(
        "ref-linear-tail-column",
        "csrc/cpu/fused_linear_relu.cpp",
        "for (; j < N; ++j) {  // the remaining rows, one dot product each",
        "for (; j + 1 < N; ++j) {  // the remaining rows, one dot product each",
        f"{T_LIN} -k reference",
        "reference fused_linear_relu: the last column after the 4-column blocks skipped",
    ),
    M(
        "ref-linear-grad-mask",
        "csrc/cpu/fused_linear_relu.cpp",
        "G[i * N + j] = static_cast<acc>(Y[i * N + j]) <= acc(0) ? acc(0)",
        "G[i * N + j] = static_cast<acc>(Y[i * N + j]) < acc(0) ? acc(0)",
        f"{T_LIN} -k reference",
        "reference fused_linear_relu backward: gradient flows where the output is 0",
    ),
    M(
        "ref-linear-grad-bias-last-row",
        "csrc/cpu/fused_linear_relu.cpp",
        "            bsum += gij;\n",
        "            bsum = gij;\n",
        f"{T_LIN} -k reference",
        "reference fused_linear_relu backward: grad_bias keeps only the last row",
    ),
    M(
        "ref-conv-residual-row",
        "csrc/cpu/conv2d.cpp",
        "if (Res) sum += static_cast<acc>(Res[rs(n, o, oh, ow)]);",
        "if (Res) sum += static_cast<acc>(Res[rs(n, o, 0, ow)]);",
        f"{T_CRELU} -k reference",
        "reference conv2d_relu: the residual read from row 0",
    ),
    M(
        "ref-conv-right-padding",
        "csrc/cpu/conv2d.cpp",
        "const acc xv = row_in && iw >= 0 && iw < W ? static_cast<acc>(X[xs(n, c0 + c, ih, iw)]) : acc(0);",
        "const acc xv = row_in && iw >= 0 && iw <= W ? static_cast<acc>(X[xs(n, c0 + c, ih, iw)]) : acc(0);",
        f"{T_CONV} -k reference",
        "reference conv2d: the right padding column reads the next row",
    ),
    M(
        "ref-conv-grad-input-stride",
        "csrc/cpu/conv2d.cpp",
        "if (tw < 0 || tw % sw != 0 || tw / sw >= OW) continue;",
        "if (tw < 0 || tw / sw >= OW) continue;",
        f"{T_CONV} -k reference",
        "reference conv2d grad_input: taps between strided columns counted",
    ),
    M(
        "ref-conv-grad-weight-group",
        "csrc/cpu/conv2d.cpp",
        "const int64_t ci = (o / Og) * Cg + c;",
        "const int64_t ci = c;",
        f"{T_CONV} -k reference",
        "reference conv2d grad_weight: every group reads the first group's input channels",
    ),
    M(
        "ref-ln-mean-correction",
        "csrc/cpu/layer_norm.cpp",
        "const acc mu = mu0 + sd0 / static_cast<acc>(N);",
        "const acc mu = mu0;",
        "tests/test_layer_norm.py tests/test_hostile.py -k reference",
        "reference layer_norm: the mean's correction pass dropped (mean = sum / N rounded)",
    ),
    M(
        "ref-ln-eps-dropped",
        "csrc/cpu/layer_norm.cpp",
        "const acc rs = acc(1) / std::sqrt(var + static_cast<acc>(eps));",
        "const acc rs = acc(1) / std::sqrt(var);",
        f"{T_LN} -k reference",
        "reference layer_norm: eps dropped",
    ),
    M(
        "ref-ln-variance-correction",
        "csrc/cpu/layer_norm.cpp",
        "acc var = (sq - sd * (sd / static_cast<acc>(N))) / static_cast<acc>(N);",
        "acc var = sq / static_cast<acc>(N);",
        "tests/test_layer_norm_stats.py tests/test_layer_norm.py tests/test_hostile.py -k reference",
        "reference layer_norm: the variance's correction term dropped",
    ),
    M(
        "ref-ln-grad-input-term",
        "csrc/cpu/layer_norm.cpp",
        "DX[i * N + j] = static_cast<scalar_t>(RS[i] * (g - mg - xhat * mgx));",
        "DX[i * N + j] = static_cast<scalar_t>(RS[i] * (g - mg));",
        f"{T_LN} -k reference",
        "reference layer_norm grad_input: the xhat * mean(g * xhat) term dropped",
    ),
    M(
        "ref-ln-grad-bias-last-row",
        "csrc/cpu/layer_norm.cpp",
        "            sb += d;\n",
        "            sb = d;\n",
        f"{T_LN} -k reference",
        "reference layer_norm grad_bias: only the last row",
    ),
    # ------------------------------------------------------------------ SYCL kernels: fused_linear_relu.hpp
    M(
        "sycl-linear-panel-bias-index",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "if constexpr (BIAS) v = v + (bias_rows ? row_bias : ld(bias + n));",
        "if constexpr (BIAS) v = v + (bias_rows ? row_bias : ld(bias + lane));",
        f"{T_LIN} -k sycl",
        "SYCL linear panel GEMM: bias indexed by the lane, not the column",
    ),
    M(
        "sycl-linear-panel-relu-nan",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "if constexpr (RELU) v = v < acc(0) ? acc(0) : v;  // NaN propagates, as torch.relu\n      C[at(i, n)]",
        "if constexpr (RELU) v = v > acc(0) ? v : acc(0);  // NaN propagates, as torch.relu\n      C[at(i, n)]",
        f"tests/test_relu_nan_paths.py {T_LIN} -k sycl",
        "SYCL linear panel GEMM: ReLU turns NaN into 0",
    ),
    M(
        "sycl-linear-panel-column-tail",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "for (int j = 0; j < V; ++j) col_ok[j] = !MASK_N || (n0 + j * S + lane < N);",
        "for (int j = 0; j < V; ++j) col_ok[j] = !MASK_N || (n0 + j * S + lane + 1 < N);",
        f"{T_LIN} -k sycl",
        "SYCL linear panel GEMM: the last column of a partial panel dropped",
    ),
    M(
        "sycl-linear-panel-k-block-resume",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "if (!first && col_ok[j]) c[i][j] = partial[at(i, n0 + j * S + lane)];",
        "if (!first && col_ok[j] && k0 == 0) c[i][j] = partial[at(i, n0 + j * S + lane)];",
        "tests/test_sycl_fused_linear_relu.py tests/test_fused_linear_relu.py -k sycl",
        "SYCL linear panel GEMM: a later K block does not resume from the previous blocks' partial sums",
    ),
    M(
        "sycl-linear-panel-single-row-tail",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "else if (full_n && row_end - m0 == 1)  // one row left (uniform)",
        "else if (full_n && row_end - m0 <= 2)  // one row left (uniform)",
        f"{T_LIN} -k 'rows_do_not_depend and sycl'",
        "SYCL linear panel GEMM: a tile with two rows left runs the single-row tile (its second row never written)",
    ),
    M(
        "sycl-linear-amx-relu-nan",
        "csrc/sycl/kernels/amx_gemm.hpp",
        "if (p.relu) v = v < 0.0f ? 0.0f : v;  // NaN propagates, as torch.relu",
        "if (p.relu) v = v > 0.0f ? v : 0.0f;  // NaN propagates, as torch.relu",
        "tests/test_amx.py",
        "SYCL bf16 GEMM on AMX: ReLU turns NaN into 0 (killed only on a CPU with AMX; elsewhere the tests skip)",
    ),
    M(
        "sycl-linear-amx-row-block",
        "csrc/sycl/kernels/amx_gemm.hpp",
        "global(b_ptr + ((b0 / 16 + j) * (K / 2) + k0 / 2) * 32), 32);",
        "global(b_ptr + ((b0 / 16) * (K / 2) + k0 / 2) * 32), 32);",
        "tests/test_amx.py",
        "SYCL bf16 GEMM on AMX: the second 16-row tile reads the first's activations (killed only on a CPU with AMX)",
    ),
    M(
        "sycl-amx-a-fastest-set",
        "csrc/sycl/kernels/amx_gemm.hpp",
        "    set = g / a_groups;",
        "    set = g % b_sets;",
        "tests/test_amx.py",
        "SYCL bf16 GEMM on AMX, A blocks fastest: the B set taken from the wrong index (killed only on a CPU with AMX)",
    ),
    M(
        "sycl-amx-short-last-set",
        "csrc/sycl/kernels/amx_gemm.hpp",
        "const int64_t b_end = (set + 1) * p.b_per_group < p.b_groups ? (set + 1) * p.b_per_group : p.b_groups;",
        "const int64_t b_end = (set + 1) * p.b_per_group < p.b_groups ? (set + 1) * p.b_per_group : p.b_groups - 1;",
        "tests/test_amx.py",
        "SYCL bf16 GEMM on AMX: the last B block of a short last set skipped (killed only on a CPU with AMX)",
    ),
    M(
        "sycl-host-release-no-drain",
        "csrc/sycl/launch_checking.cpp",
        "  if (w.queued) {\n    w.queued = false;",
        "  if (!w.queued) {\n    w.queued = false;",
        "tests/test_launch_faults.py",
        "SYCL CPU tensors: a host block released during an error part way through an op no longer waits for the "
        "kernels still queued (they write into freed or reused memory)",
    ),
    M(
        "sycl-deferred-packed-conv-no-settle",
        "csrc/sycl/conv2d.cpp",
        "  if (w.defer == 0 || !packed_forward_defers(input, bias, residual, p)) {\n    settle_host_work();\n",
        "  if (w.defer == 0 || !packed_forward_defers(input, bias, residual, p)) {\n",
        "tests/test_deferred_waits.py",
        "Inside a deferred-wait region, conv2d_packed with a residual it must copy on the host no longer waits for "
        "the region's queued kernels first (the copy reads a tensor not yet written)",
    ),
    M(
        "deferred-region-ignores-hooks",
        "python/xkernels/_deferred.py",
        "            if parent._modules.get(name) is not child or any(getattr(child, t, None) for t in _TABLES):",
        "            if parent._modules.get(name) is not child:",
        "tests/test_deferred_waits.py",
        "A deferred-wait region opens although a module under its container has a hook (the hook sees a tensor "
        "whose kernel has not run)",
    ),
    M(
        "sycl-amx-window-tap-column",
        "csrc/sycl/kernels/amx_gemm.hpp",
        "(t / 3) * p.row_shift + (t % 3) * p.col_shift",
        "(t / 3) * p.row_shift + (t / 3) * p.col_shift",
        "tests/test_amx.py",
        "SYCL bf16 convolution window on AMX: a tap's column shift taken from its row (killed only on a CPU with AMX)",
    ),
    M(
        "sycl-amx-window-dilation",
        "csrc/sycl/conv2d.cpp",
        "win.row_shift = p.dilation[0] * Wp, win.col_shift = p.dilation[1];",
        "win.row_shift = p.dilation[0] * Wp, win.col_shift = 1;",
        "tests/test_amx.py",
        "SYCL bf16 convolution window on AMX: the column dilation ignored (killed only on a CPU with AMX)",
    ),
    M(
        "sycl-linear-dot-k-tail",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "const bool ok = k_full + lane < K;",
        "const bool ok = k_full + lane + 1 < K;",
        f"{T_LIN} -k sycl",
        "SYCL linear small-M kernel: the last element of the K tail dropped",
    ),
    M(
        "sycl-linear-dot-single-row-columns",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "linear_detail::dot_tile<T, S_, 1, G::kSingleRowCols, BIAS, RELU>(it, p, 0, g * G::kSingleRowCols);",
        "linear_detail::dot_tile<T, S_, 1, G::kSingleRowCols, BIAS, RELU>(it, p, 0, g * G::kCols);",
        f"{T_LIN} -k sycl",
        "SYCL linear, one row: work-groups step the multi-row tile's column count, not the single-row tile's",
    ),
    M(
        "sycl-linear-grad-mask-nan",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "const T g = !(linear_detail::ld(output + i) <= acc(0)) ? grad_output[i] : from_acc<T>(acc(0));",
        "const T g = linear_detail::ld(output + i) > acc(0) ? grad_output[i] : from_acc<T>(acc(0));",
        f"{T_LIN} tests/test_sycl_fused_linear_relu.py -k sycl",
        "SYCL linear backward: the ReLU mask blocks the gradient at NaN outputs",
    ),
    M(
        "sycl-linear-column-sum-last-chunk",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "for (int64_t r = 0; r < R; ++r) s = s + partial[r * N + n];",
        "for (int64_t r = 0; r + 1 < R; ++r) s = s + partial[r * N + n];",
        f"{T_LIN} tests/test_sycl_fused_linear_relu.py -k sycl",
        "SYCL linear grad_bias: the last row chunk's partial sum dropped",
    ),
    # ------------------------------------------------------------------ SYCL kernels: conv2d.hpp
    M(
        "sycl-conv-igemm-residual-dropped",
        "csrc/sycl/kernels/conv2d.hpp",
        "                if (res != nullptr) v += load<T>(res, o);\n",
        "                if (res != nullptr) v += A(0);\n",
        f"{T_CRELU} -k sycl",
        "SYCL conv2d (implicit GEMM): the residual dropped",
    ),
    M(
        "sycl-conv-igemm-bias-every-k-block",
        "csrc/sycl/kernels/conv2d.hpp",
        "              A v = acc[r][q];\n              if (last) {\n                v = v + b;\n",
        "              A v = acc[r][q];\n              v = v + (bias != nullptr ? load<T>(bias, ch) : A(0));\n"
        "              if (last) {\n",
        "tests/test_conv2d_tiling.py::test_tiling_does_not_change_bits",
        "SYCL conv2d (implicit GEMM): the bias added in every K block (twice or more when K is blocked)",
    ),
    M(
        "sycl-conv-igemm-row-run-edge",
        "csrc/sycl/kernels/conv2d.hpp",
        "const bool in = sy >= 0 && sy < Hs && sx >= 0 && sx + (KW - 1) < Ws;",
        "const bool in = sy >= 0 && sy < Hs && sx >= 0 && sx + (KW - 1) <= Ws;",
        "tests/test_conv2d_tiling.py -k 'sycl and row_run_edge'",
        "SYCL conv2d (implicit GEMM) row runs: a run ending one past the input row counted as inside",
    ),
    M(
        "sycl-conv-igemm-row-run-short",
        "csrc/sycl/kernels/conv2d.hpp",
        "const int64_t steps = KW * Csg;",
        "const int64_t steps = KW * Csg - 1;",
        "tests/test_conv2d_tiling.py -k 'sycl and stem'",
        "SYCL conv2d (implicit GEMM) row runs: the last (kw, i) step of each kernel row dropped",
    ),
    M(
        "sycl-conv-igemm-row-run-channel-stride",
        "csrc/sycl/kernels/conv2d.hpp",
        "const A a = load<T>(rp[r], kx * sW + i * sC);",
        "const A a = load<T>(rp[r], kx * sW + i);",
        "tests/test_conv2d_tiling.py -k 'sycl and stem'",
        "SYCL conv2d (implicit GEMM) row runs of NCHW input: the channel stride dropped (neighbouring pixels read)",
    ),
    M(
        "sycl-conv-igemm-relu-nan",
        "csrc/sycl/kernels/conv2d.hpp",
        "                if (relu) v = v < A(0) ? A(0) : v;  // NaN propagates, as torch.relu\n",
        "                if (relu) v = v > A(0) ? v : A(0);  // NaN propagates, as torch.relu\n",
        f"{T_CRELU} -k sycl",
        "SYCL conv2d (implicit GEMM): ReLU turns NaN into 0",
    ),
    M(
        "sycl-conv-winograd-input-coefficient",
        "csrc/sycl/kernels/conv2d.hpp",
        "    t[2][j] = d[2][j] - d[1][j];\n",
        "    t[2][j] = d[2][j] + d[1][j];\n",
        "tests/test_conv2d_winograd.py -k sycl",
        "SYCL conv2d Winograd: a wrong sign in the input transform B^T d",
    ),
    M(
        "sycl-conv-winograd-output-coefficient",
        "csrc/sycl/kernels/conv2d.hpp",
        "    y[i][1] = (s[i][1] - s[i][2]) - s[i][3];\n",
        "    y[i][1] = (s[i][1] - s[i][2]) + s[i][3];\n",
        "tests/test_conv2d_winograd.py -k sycl",
        "SYCL conv2d Winograd: a wrong sign in the output transform M A",
    ),
    M(
        "sycl-conv-winograd-weight-coefficient",
        "csrc/sycl/kernels/conv2d.hpp",
        "    t[2][j] = ((g[0][j] - g[1][j]) + g[2][j]) * A(0.5);\n",
        "    t[2][j] = ((g[0][j] - g[1][j]) + g[2][j]) * A(0.25);\n",
        "tests/test_conv2d_winograd.py -k sycl",
        "SYCL conv2d Winograd: a wrong coefficient in the weight transform G g",
    ),
    M(
        "sycl-conv-grouped-bias-dropped",
        "csrc/sycl/kernels/conv2d.hpp",
        "          A v = acc[r] + b;\n",
        "          A v = acc[r];\n",
        f"{T_CONV} {T_CRELU} -k sycl",
        "SYCL conv2d (lanes over groups, depthwise): the bias dropped",
    ),
    M(
        "sycl-conv-source-right-edge",
        "csrc/sycl/kernels/conv2d.hpp",
        "return sy >= 0 && sy < Hs && sx >= 0 && sx < Ws;",
        "return sy >= 0 && sy < Hs && sx >= 0 && sx <= Ws;",
        f"{T_CONV} -k sycl",
        "SYCL conv2d forward: the right padding column reads the next row",
    ),
    M(
        "sycl-conv-grad-input-stride-phase",
        "csrc/sycl/kernels/conv2d.hpp",
        "(sh == 1 || sy * sh == ty) && (sw == 1 || sx * sw == tx);",
        "(sh == 1 || sy * sh == ty);",
        f"{T_CONV} -k sycl",
        "SYCL conv2d grad_input: taps between strided columns counted",
    ),
    M(
        "sycl-conv-grad-bias-cl-one-channel",
        "csrc/sycl/kernels/conv2d.hpp",
        "    if (o0 + S <= O)\n      sum(go + (GO_CL ? o : o * sC));",
        "    if (o0 + S <= O)\n      sum(go + (GO_CL ? o0 : o * sC));",
        f"{T_CONV} -k 'sycl and lane_blocks'",
        "SYCL conv2d grad_bias, channels_last full lane blocks: every lane sums the block's first channel",
    ),
    M(
        "sycl-conv-winograd-input-variant-swapped",
        "csrc/sycl/conv2d.cpp",
        "  if (t.stride(1) == 1)\n    L.launch<K<true, S>, T>(range, params);",
        "  if (t.stride(1) != 1)\n    L.launch<K<true, S>, T>(range, params);",
        "tests/test_conv2d_winograd.py -k sycl",
        "SYCL conv2d: the channel-stride-1 variant (Winograd input transform, grad_bias) chosen for NCHW tensors "
        "(and the strided one for channels_last)",
    ),
    M(
        "sycl-conv-nchw-1x1-row-bias-first-row",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "const acc row_bias = BIAS && last && bias_rows ? ld(bias + row[i]) : acc(0);",
        "const acc row_bias = BIAS && last && bias_rows ? ld(bias + m0) : acc(0);",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and nchw_pointwise'",
        "SYCL conv2d NCHW 1x1 per-image GEMM: every row of a 6-row tile takes the tile's first row's bias",
    ),
    M(
        "sycl-conv-gw-pointwise-in-place-row-shift",
        "csrc/sycl/conv2d.cpp",
        "panel_gemm<T>(L, a, cptr<T>(x), p.C, P, P, KKC,",
        "panel_gemm<T>(L, a, cptr<T>(x) + p.C, p.C, P, P, KKC,",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and pointwise_grad_weight'",
        "SYCL conv2d 1x1 grad_weight read in place: every pixel paired with the next pixel's input row",
    ),
    M(
        "sycl-conv-gi-strided-pointwise-offset",
        "csrc/sycl/conv2d.cpp",
        "      .slice(1, 0, p.OH * p.stride[0], p.stride[0])",
        "      .slice(1, 1, p.OH * p.stride[0] + 1, p.stride[0])",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and strided_pointwise'",
        "SYCL conv2d strided 1x1 grad_input as a GEMM: the gradient placed one row below the sampled pixels",
    ),
    M(
        "sycl-linear-panel-block-width",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "const int64_t rg = g_in / block_width, panel = block * p.panel_block + g_in % block_width;",
        "const int64_t rg = g_in / p.panel_block, panel = block * p.panel_block + g_in % p.panel_block;",
        "tests/test_sycl_fused_linear_relu.py -k panel_blocks",
        "SYCL linear panel GEMM: the last, narrower block of panels walked as if it were full",
    ),
    M(
        "sycl-linear-split-k-order",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "for (int64_t r = 0; r < R; ++r) s = s + partial[r * N + n];",
        "for (int64_t r = R - 1; r >= 0; --r) s = s + partial[r * N + n];",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and k_ranges'",
        "SYCL split-K panel GEMM: the K ranges' sums added last range first",
    ),
    M(
        "sycl-linear-split-k-range-start",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "const bool first = k0 == k_begin && !accumulate, last = k1 == k_end;",
        "const bool first = k0 == 0 && !accumulate, last = k1 == k_end;",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and k_ranges'",
        "SYCL split-K panel GEMM: a later K range starts from whatever its scratch held instead of zero",
    ),
    M(
        "sycl-linear-split-k-last-range",
        "csrc/sycl/gemm.h",
        ".R = ranges - 1,",
        ".R = ranges - 2,",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and k_ranges'",
        "SYCL split-K panel GEMM: the last K range's sums never added",
    ),
    M(
        "sycl-conv-gw-transposed-chunk-rows",
        "csrc/sycl/conv2d.cpp",
        "go + m0 * p.O, p.O, P, P, p.O,",
        "go, p.O, P, P, p.O,",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and transposed_chunks'",
        "SYCL conv2d transposed grad_weight (the stem): every chunk of patches paired with the first chunk's gradient",
    ),
    M(
        "sycl-conv-gw-transposed-untransposed",
        "csrc/sycl/conv2d.cpp",
        "c.copy_(ct.t());",
        "c.copy_(ct.view({p.O, KKC}));",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and grad_weight_gemm_matches_oracle'",
        "SYCL conv2d transposed grad_weight (the stem): the [taps x C, O] result copied out without transposing",
    ),
    M(
        "sycl-conv-im2col-rows-right-edge",
        "csrc/sycl/kernels/conv2d.hpp",
        "if (ix >= 0 && ix < p.W) v = src[j];",
        "if (ix >= 0 && ix <= p.W) v = src[j];",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and (grad_weight_gemm_matches_oracle or transposed_chunks)'",
        "SYCL conv2d im2col as row runs: the pixel one past the input row's end read instead of the padding's zero",
    ),
    M(
        "sycl-conv-im2col-rows-inside",
        "csrc/sycl/kernels/conv2d.hpp",
        "const bool row_inside = ix0 >= 0 && ix0 + p.KW <= p.W;",
        "const bool row_inside = ix0 >= 0 && ix0 + p.KW <= p.W + 1;",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and (grad_weight_gemm_matches_oracle or transposed_chunks)'",
        "SYCL conv2d im2col as row runs: a run hanging one pixel past the row's end copied as if inside",
    ),
    M(
        "sycl-conv-strided-rows-image",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "return n * sn + oh * sh + (r - oh * ow) * rs;",
        "return oh * sh + (r - oh * ow) * rs;",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and strided_pointwise_forward'",
        "SYCL conv2d strided 1x1 forward: every image's rows read from the first image",
    ),
    M(
        "sycl-conv-col2im-first-tap",
        "csrc/sycl/kernels/conv2d.hpp",
        "const int64_t oy_lo = ty >= p.KH ? (ty - p.KH) / p.sh + 1 : 0;",
        "const int64_t oy_lo = ty >= p.KH ? (ty - p.KH) / p.sh + 2 : 0;",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and col2im'",
        "SYCL conv2d col2im (strided window grad_input): the first output row covering an input row skipped",
    ),
    M(
        "sycl-conv-col2im-row-tap",
        "csrc/sycl/kernels/conv2d.hpp",
        "sum += row[ox * KKC + (tx - ox * p.sw) * C];",
        "sum += row[ox * KKC + (tx - ox * p.sw - 1) * C];",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and col2im'",
        "SYCL conv2d col2im (strided window grad_input): each tap read from its left neighbour's column",
    ),
    M(
        "sycl-conv-gw-window-last-pixel",
        "csrc/sycl/conv2d.cpp",
        "const int64_t K = (p.N - 1) * img + (p.OH - 1) * Wp + p.OW;",
        "const int64_t K = (p.N - 1) * img + (p.OH - 1) * Wp + p.OW - 1;",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and padded_grid'",
        "SYCL conv2d grad_weight over the padded grid: the last output pixel's gradient left out of the sum",
    ),
    M(
        "sycl-conv-gw-window-no-fallback",
        "csrc/sycl/conv2d.cpp",
        "return std::all_of(v, v + c.numel(), [](T e) { return std::isfinite(e); });",
        "return v != nullptr;",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and padded_grid'",
        "SYCL conv2d grad_weight over the padded grid: a non-finite result kept (0 * inf in unseen taps)",
    ),
    M(
        "sycl-conv-dense-grad-output-grid-swapped",
        "csrc/sycl/conv2d.cpp",
        "pad_to_grid<T>(L, g, 0, 0, p.OH, p.OW)",
        "pad_to_grid<T>(L, g, 0, 0, p.OW, p.OH)",
        "tests/test_conv2d_gemm_paths.py -k 'sycl and non_dense'",
        "SYCL conv2d_backward's copy of a non-dense grad_output: the pixel grid's height and width swapped",
    ),
    M(
        "sycl-conv-grad-bias-last-pixel",
        "csrc/sycl/kernels/conv2d.hpp",
        "const int64_t me = (mb + chunk < M) ? mb + chunk : M;\n  A acc = A(0);",
        "const int64_t me = (mb + chunk < M) ? mb + chunk : M - 1;\n  A acc = A(0);",
        f"{T_CONV} -k sycl",
        "SYCL conv2d grad_bias: the last pixel of the last split dropped",
    ),
    M(
        "sycl-conv-gw-chunks-overwrite",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "const bool accumulate = split == 0 && p.accumulate != 0;",
        "const bool accumulate = false;",
        "tests/test_conv2d_gemm_paths.py -k sycl",
        "SYCL conv2d grad_weight as GEMMs: a later pixel chunk overwrites the earlier chunks' sum",
    ),
    M(
        "sycl-conv-im2col-vector-lane",
        "csrc/sycl/kernels/conv2d.hpp",
        "out[mm * P] = inside ? x[img * p.sN + iy * p.sH + ix * p.sW + c0 + lid] : zero;",
        "out[mm * P] = inside ? x[img * p.sN + iy * p.sH + ix * p.sW + c0] : zero;",
        "tests/test_conv2d_gemm_paths.py -k sycl",
        "SYCL conv2d grad_weight patches (vector path): every column of a panel reads its first channel",
    ),
    M(
        "sycl-conv-im2col-tap-column",
        "csrc/sycl/kernels/conv2d.hpp",
        "const int64_t ky = (tap / KW) * p.dh - p.ph, kx = (tap % KW) * p.dw - p.pw;",
        "const int64_t ky = (tap / KW) * p.dh - p.ph, kx = (tap / KW) * p.dw - p.pw;",
        "tests/test_conv2d_gemm_paths.py -k sycl",
        "SYCL conv2d grad_weight patches (gather path): a tap's column offset taken from its row",
    ),
    M(
        "sycl-conv-gi-winograd-padding",
        "csrc/sycl/conv2d.cpp",
        "t.padding = {2 - p.padding[0], 2 - p.padding[1]};",
        "t.padding = {2 - p.padding[0], 1 - p.padding[1]};",
        "tests/test_conv2d_gemm_paths.py -k sycl",
        "SYCL conv2d grad_input through Winograd: the transposed convolution's column padding off by one",
    ),
    M(
        "sycl-conv-winograd-rule-channels",
        "csrc/sycl/conv2d.cpp",
        "tiles * std::min(p.C, p.O) >= W::kMinTileChannels;",
        "tiles * std::max(p.C, p.O) >= W::kMinTileChannels;",
        "tests/test_conv2d_gemm_paths.py tests/test_conv2d_winograd.py -k sycl",
        "SYCL conv2d Winograd rule: the tile count weighed by the larger channel count, not the smaller",
    ),
    M(
        "sycl-conv-pixel-gemm-residual-row",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "if (res != nullptr) v = v + ld(res + at(i, n));",
        "if (res != nullptr) v = v + ld(res + n);",
        "tests/test_conv2d_gemm_paths.py -k sycl",
        "SYCL 1x1 conv2d_relu as a GEMM: every pixel adds the first pixel's residual",
    ),
    # ------------------------------------------------------------------ SYCL kernels: layer_norm.hpp
    M(
        "sycl-ln-mean-correction",
        "csrc/sycl/kernels/layer_norm.hpp",
        "const A mu = mu0 + sd / static_cast<A>(N);",
        "const A mu = mu0;",
        "tests/test_layer_norm.py tests/test_hostile.py -k sycl",
        "SYCL layer_norm: the mean's correction pass dropped",
    ),
    M(
        "sycl-ln-variance-correction",
        "csrc/sycl/kernels/layer_norm.hpp",
        "A var = (sq - sd * (sd / static_cast<A>(N))) / static_cast<A>(N);",
        "A var = sq / static_cast<A>(N);",
        "tests/test_layer_norm_stats.py tests/test_layer_norm.py -k sycl",
        "SYCL layer_norm: the variance's correction term dropped",
    ),
    M(
        "sycl-ln-eps-dropped",
        "csrc/sycl/kernels/layer_norm.hpp",
        "const A rs = A(1) / sycl::sqrt(var + eps);",
        "const A rs = A(1) / sycl::sqrt(var);",
        f"{T_LN} -k sycl",
        "SYCL layer_norm: eps dropped",
    ),
    M(
        "sycl-ln-output-tail",
        "csrc/sycl/kernels/layer_norm.hpp",
        "    if (tail) out(full + lane);\n",
        "    if (tail && lane > 0) out(full + lane);\n",
        f"{T_LN} -k sycl",
        "SYCL layer_norm: the first element of a row's partial last step not written",
    ),
    M(
        "sycl-ln-variance-tail",
        "csrc/sycl/kernels/layer_norm.hpp",
        "      sd1 += d;\n      sq1 += d * d;\n    }\n    const A sd",
        "      sd1 += d;\n    }\n    const A sd",
        f"{T_LN} -k sycl",
        "SYCL layer_norm: the partial last step's squares left out of the variance",
    ),
    M(
        "sycl-ln-grad-input-term",
        "csrc/sycl/kernels/layer_norm.hpp",
        "store(dxr, j, rs * (g - mg - xhat * mgx));",
        "store(dxr, j, rs * (g - mg));",
        f"{T_LN} -k sycl",
        "SYCL layer_norm grad_input: the xhat * mean(g * xhat) term dropped",
    ),
    M(
        "sycl-ln-grad-bias-partial",
        "csrc/sycl/kernels/layer_norm.hpp",
        "        if (pb) pb[j] += d;\n",
        "        if (pb) pb[j] = d;\n",
        f"{T_LN} -k sycl",
        "SYCL layer_norm grad_bias (with grad_weight): a block keeps only its last row",
    ),
    M(
        "sycl-ln-grad-weight-xhat",
        "csrc/sycl/kernels/layer_norm.hpp",
        "        if (pw) pw[j] += d * xhat;\n",
        "        if (pw) pw[j] += d;\n",
        f"{T_LN} -k sycl",
        "SYCL layer_norm grad_weight: the partial sums add dy, not dy * xhat",
    ),
    M(
        "sycl-ln-grad-input-sums-tail",
        "csrc/sycl/kernels/layer_norm.hpp",
        "        if (tail) sums(full + lane, sg1, sgx1);\n",
        "",
        f"{T_LN} -k sycl",
        "SYCL layer_norm grad_input: the row's partial last step left out of mean(g) and mean(g * xhat)",
    ),
    M(
        "sycl-ln-grad-final-last-block",
        "csrc/sycl/kernels/layer_norm.hpp",
        "for (int64_t k = 0; k < blocks; ++k) s += part_b[k * N + j];",
        "for (int64_t k = 0; k + 1 < blocks; ++k) s += part_b[k * N + j];",
        f"{T_LN} -k sycl",
        "SYCL layer_norm grad_bias: the last block's partial sum dropped",
    ),
    # ------------------------------------------------------------------ SYCL host: kernel caches
    M(
        "sycl-provider-slot-key-part",
        "csrc/sycl/kernel_provider.cpp",
        'ctx, dev, group.file + "|" + part,',
        'ctx, dev, group.file + "|",',
        "tests/test_sycl_runtime.py tests/test_fused_linear_relu.py tests/test_conv2d.py -k sycl",
        "SYCL kernel provider cache: the part (element type) dropped from a kernel group's build key",
    ),
    M(
        "sycl-table-kernels-index",
        "csrc/sycl/kernel_provider.cpp",
        "if (const Kernel* k = kernels_[index].load(std::memory_order_acquire)) return *k;",
        "if (const Kernel* k = kernels_[index / 2].load(std::memory_order_acquire)) return *k;",
        f"{T_LIN} {T_CONV} -k sycl",
        "SYCL per-device table kernels: a cached kernel looked up under another instantiation's index",
    ),
    M(
        "nn-conv-call-ignores-weight-version",
        "python/xkernels/nn.py",
        "            or w._version != self.version\n",
        "",
        "tests/test_conv2d_packed.py -k remembered",
        "Conv2d modules: the remembered packed route kept after an in-place weight update (stale packed copy)",
    ),
    M(
        "nn-conv-call-ignores-layout",
        "python/xkernels/nn.py",
        "            or (self.channels_last and not input.is_contiguous(memory_format=torch.channels_last))\n",
        "",
        "tests/test_conv2d_packed.py -k remembered",
        "Conv2d modules: the remembered route taken by an NCHW input to a channels_last module (no conversion)",
    ),
    M(
        "gemm-nchw-out-residual-dense-columns",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "if (res != nullptr) v = v + ld(res + at(i, n));",
        "if (res != nullptr) v = v + ld(res + c_row[i] + n);",
        "tests/test_conv2d_gemm_paths.py -k pixel_gemm",
        "panel GEMM into an NCHW output: the residual read with dense columns (the wrong channel's values)",
    ),
    M(
        "gemm-nchw-out-channel-stride",
        "csrc/sycl/gemm.h",
        "                                         .c_cs = c.ks};",
        "                                         .c_cs = c.rs};",
        "tests/test_conv2d_gemm_paths.py -k pixel_gemm",
        "panel GEMM into an NCHW output: channels written one element apart instead of OH * OW",
    ),
    M(
        "conv2d-nchw-grad-input-dense-rows",
        "csrc/sycl/conv2d.cpp",
        "at::Tensor gi_pixels = gi.permute({0, 2, 3, 1});",
        "at::Tensor gi_pixels = gi.view({p.N, p.H, p.W, p.C});",
        "tests/test_conv2d_gemm_paths.py -k pixel_gemm",
        "NCHW 1x1 grad_input as the pixel GEMM: written as [pixels, C] rows into the NCHW tensor",
    ),
    M(
        "conv2d-nchw-rows-copy-rule-flipped",
        "csrc/sycl/conv2d.cpp",
        "p.stride != std::array<int64_t, 2>{1, 1} && p.O >= 2 * p.C &&",
        "p.stride != std::array<int64_t, 2>{1, 1} && p.O < 2 * p.C &&",
        "tests/test_conv2d_gemm_paths.py -k pixel_gemm",
        "NCHW 1x1 pixel GEMM: the input copied to rows where the rule reads it in place, and the reverse",
    ),
    M(
        "ops-call-below-autograd-with-grad",
        "python/xkernels/ops.py",
        "        or (torch.is_grad_enabled() and torch._C._any_requires_grad(*args))\n",
        "",
        "tests/test_nn.py -k python_autograd_kernel",
        "ops._call: below autograd even where an argument requires grad (no graph, no gradients)",
    ),
    M(
        "ops-call-below-autograd-under-dispatch-mode",
        "python/xkernels/ops.py",
        "        or torch._C._len_torch_dispatch_stack() > 0\n",
        "",
        "tests/test_nn.py -k python_autograd_kernel",
        "ops._call: below autograd under a TorchDispatchMode (the mode no longer sees layer_norm_forward)",
    ),
    M(
        "nn-linear-small-m-rule-flipped",
        "python/xkernels/nn.py",
        "input.numel() <= _unpacked_max_rows() * input.shape[-1]",
        "input.numel() > _unpacked_max_rows() * input.shape[-1]",
        "tests/test_nn.py -k small_m",
        "FusedLinearReLU(pack_weight=True): the small-M rule flipped (unpacked for many rows, packed for few)",
    ),
]


# ---------------------------------------------------------------------------------------------- sources


class StaleTable(RuntimeError):
    """A table entry no longer matches the sources (its snippet is missing or ambiguous)."""


def check_table(root: Path = ROOT) -> list[str]:
    """Problems with the table against the sources under `root` (empty: all good)."""
    problems = []
    seen = set()
    for m in MUTANTS:
        if m.id in seen:
            problems.append(f"{m.id}: duplicate id")
        seen.add(m.id)
        if m.original == m.replacement:
            problems.append(f"{m.id}: replacement equals the original")
        path = root / m.file
        if not path.is_file():
            problems.append(f"{m.id}: {m.file} does not exist")
            continue
        n = path.read_text().count(m.original)
        if n != 1:
            problems.append(f"{m.id}: the original snippet occurs {n} times in {m.file} (must be exactly once)")
        for arg in shlex.split(m.tests):
            if arg.startswith("tests/") and not (root / arg.split("::")[0]).is_file():
                problems.append(f"{m.id}: test path {arg} does not exist")
    return problems


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def sync_tree() -> list[str]:
    """Copies the checkout's files into TREE where their content differs; returns the changed paths."""
    files = [f for f in _git("ls-files", "-co", "--exclude-standard", "-z").split("\0") if f]
    changed = []
    for f in files:
        src, dst = ROOT / f, TREE / f
        if not src.is_file():
            continue  # deleted but still tracked
        data = src.read_bytes()
        if dst.is_file() and dst.read_bytes() == data:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        shutil.copymode(src, dst)
        changed.append(f)
    listed = set(files)
    manifest = SCRATCH / "manifest.json"
    if manifest.is_file():  # files removed from the checkout since the last sync
        for f in json.loads(manifest.read_text()):
            if f not in listed and (TREE / f).is_file():
                (TREE / f).unlink()
                changed.append(f)
    manifest.write_text(json.dumps(sorted(listed)))
    return changed


# ---------------------------------------------------------------------------------------------- builds


def _run(cmd, cwd: Path, timeout: float | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, shell=isinstance(cmd, str)
    )


def _build_env() -> dict:
    env = dict(os.environ)
    env["XKERNELS_ACPP"] = "off"
    return env


def full_build() -> subprocess.CompletedProcess:
    """Configures (first time) and builds the scratch tree in place."""
    if not (BUILD / "build.ninja").is_file():
        return _run(["bash", "scripts/dev_build.sh"], TREE, env=_build_env())
    return _run(["cmake", "--build", str(BUILD), "-j", os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")], TREE)


_EMBED_CMDS: list[str] | None = None


def _embed_commands() -> list[str]:
    """The commands that regenerate the embedded kernel text, compile it, and link the extension."""
    global _EMBED_CMDS
    if _EMBED_CMDS is None:
        obj = "CMakeFiles/_C.dir/generated/sycl_kernel_sources.cpp.o"
        cmds = _run(["ninja", "-C", str(BUILD), "-t", "commands", obj], TREE).stdout.strip().splitlines()
        targets = _run(["ninja", "-C", str(BUILD), "-t", "targets", "all"], TREE).stdout.splitlines()
        so = [t.split(":")[0] for t in targets if re.search(r"_C\.[^/]*\.so: ", t) and t.startswith("/")]
        if len(cmds) < 2 or len(so) != 1:
            raise RuntimeError(f"cannot find the kernel-embedding commands in {BUILD} (got {cmds!r}, {so!r})")
        link = _run(["ninja", "-C", str(BUILD), "-t", "commands", so[0]], TREE).stdout.strip().splitlines()[-1]
        _EMBED_CMDS = [*cmds[-2:], link]
    return _EMBED_CMDS


def embed_build() -> subprocess.CompletedProcess:
    """Re-embeds csrc/sycl/kernels/*.hpp, recompiles that one object and relinks (see the module docstring)."""
    out = subprocess.CompletedProcess([], 0, "", "")
    for cmd in _embed_commands():
        r = _run(cmd, BUILD)
        out = subprocess.CompletedProcess(cmd, r.returncode, out.stdout + r.stdout, out.stderr + r.stderr)
        if r.returncode != 0:
            return out
    return out


def kind_of(path: str) -> str:
    if path.startswith(KERNEL_DIR):
        return "kernel"
    if path.startswith("csrc/"):
        return "cxx"
    return "python"


class Tree:
    """The scratch tree's pending rebuilds: a reverted C++ file (or kernel header) still compiled in."""

    def __init__(self):
        self.needs_build = False
        self.needs_embed = False

    def settle(self, kind: str) -> subprocess.CompletedProcess | None:
        """Builds what running tests after a change of `kind` needs; a failed build is returned."""
        if kind == "kernel" or self.needs_embed:
            r = embed_build()
            if r.returncode != 0:
                return r
            self.needs_embed = False
        if kind == "cxx" or self.needs_build:
            r = full_build()
            if r.returncode != 0:
                return r
            self.needs_build = False
        return None


def apply(m: Mutant) -> tuple[Path, str, os.stat_result]:
    path = TREE / m.file
    text = path.read_text()
    n = text.count(m.original)
    if n != 1:
        raise StaleTable(f"{m.id}: the original snippet occurs {n} times in {m.file} (must be exactly once)")
    st = path.stat()
    path.write_text(text.replace(m.original, m.replacement))
    if kind_of(m.file) == "kernel":  # keep ninja from recompiling the host files that include it
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return path, text, st


def revert(m: Mutant, path: Path, text: str, st: os.stat_result, tree: Tree) -> None:
    path.write_text(text)
    if kind_of(m.file) == "kernel":
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        tree.needs_embed = True
    elif kind_of(m.file) == "cxx":
        tree.needs_build = True
    for cache in path.parent.glob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- tests


def test_env(extra: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TREE / "python")
    env["XKERNELS_CACHE_DIR"] = str(SCRATCH / "kcache")
    env["XKERNELS_REQUIRE_BACKENDS"] = "reference,sycl"
    env["XKERNELS_FUZZ_EXAMPLES"] = env.get("XKERNELS_FUZZ_EXAMPLES", "40")
    env.pop("XKERNELS_BACKEND", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def _first_failure(output: str) -> str:
    for pat in (r"^(?:FAILED|ERROR) (\S+)", r"^_+ (\S.*\S) _+$", r"(Fatal Python error: .*)"):
        hit = re.search(pat, output, re.M)
        if hit:
            return hit.group(1)
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1][:160] if tail else "(no output)"


def run_tests(m: Mutant) -> tuple[str, str, str]:
    """(status, first failing test or note, output tail) for the mapped tests in the scratch tree."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *shlex.split(m.tests)]
    try:
        r = _run(cmd, TREE, timeout=m.timeout_s, env=test_env(m.env))
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timed out", f"> {m.timeout_s} s", out[-3000:]
    out = r.stdout + r.stderr
    if r.returncode == 0:
        return "survived", "", out[-3000:]
    if r.returncode == 5:
        return "error", "no tests collected (the table's test selection is wrong)", out[-3000:]
    if r.returncode < 0:
        return "killed", f"crashed (signal {-r.returncode})", out[-3000:]
    return "killed", _first_failure(out), out[-3000:]


# ---------------------------------------------------------------------------------------------- reporting


def machine() -> dict:
    model, flags = platform.processor() or "unknown", []
    try:
        info = Path("/proc/cpuinfo").read_text()
        hit = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
        model = hit.group(1).strip() if hit else model
        fl = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
        have = set(fl.group(1).split()) if fl else set()
        flags = [
            f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "amx_tile") if f in have
        ]
    except OSError:
        pass
    return {"cpu": model, "isa": " ".join(flags), "cores": os.cpu_count()}


def _meta(commit: str) -> dict:
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "command": "python scripts/mutants.py",
        **machine(),
    }


def load_results() -> dict:
    if RESULTS_JSON.is_file():
        return json.loads(RESULTS_JSON.read_text())
    return {"rows": {}}


DETECTED = ("killed", "timed out")


def totals(rows: dict) -> dict:
    counts = {}
    for m in MUTANTS:
        st = "equivalent" if m.equivalent else rows.get(m.id, {}).get("status", "not run")
        counts[st] = counts.get(st, 0) + 1
    ran = sum(v for k, v in counts.items() if k not in ("equivalent", "not run", "build-failed"))
    detected = sum(counts.get(k, 0) for k in DETECTED)
    counts["kill_rate"] = detected / ran if ran else 0.0
    counts["ran"] = ran
    return counts


def write_markdown(state: dict) -> None:
    ids = {m.id for m in MUTANTS}  # results of mutants since removed from the table are not reported
    rows, meta = {k: v for k, v in state["rows"].items() if k in ids}, state.get("meta", {})
    t = totals(rows)
    lines = [
        "# Planted-bug (mutation) check: last result",
        "",
        "Written by `python scripts/mutants.py` (docs/testing.md says how and when to run it). Each row is one",
        "small source change from the table in scripts/mutants.py, applied alone to a scratch copy of the",
        "checkout; `killed` names the first test that failed.",
        "",
        f"- date: {meta.get('date', '?')}"
        + ("" if t.get("not run", 0) == 0 else f" (**partial**: {t['not run']} of {len(MUTANTS)} mutants not run yet)"),
        f"- commit: {meta.get('commit', '?')}",
        f"- CPU: {meta.get('cpu', '?')} ({meta.get('cores', '?')} logical CPUs; ISA: {meta.get('isa', '?')})",
        f"- run time: {sum(r.get('seconds', 0) for r in rows.values()) / 60:.1f} min for {len(rows)} mutants "
        "(sum of the per-mutant times, rebuilds included; the first build of the scratch tree not counted)",
        f"- **kill rate: {100 * t['kill_rate']:.1f} %** ({sum(t.get(k, 0) for k in DETECTED)} of {t['ran']} run; "
        + ", ".join(
            f"{k}: {t[k]}"
            for k in ("killed", "timed out", "survived", "build-failed", "error", "equivalent", "not run")
            if t.get(k)
        )
        + ")",
        "",
        "| id | file | status | first failing test / note | s | description |",
        "|---|---|---|---|---|---|",
    ]
    for m in MUTANTS:
        r = rows.get(m.id, {})
        st = "equivalent" if m.equivalent else r.get("status", "not run")
        note = m.equivalent or r.get("detail", "")
        if r.get("commit") and r.get("commit") != meta.get("commit"):
            note += f" (at {r['commit']})"
        note = note.replace("|", "\\|")
        lines.append(
            f"| {m.id} | {m.file} | {st} | {note} | {r.get('seconds', '') and round(r['seconds'])} | {m.description} |"
        )
    RESULTS_MD.write_text("\n".join(lines) + "\n")


def print_table(rows: dict, ids: list[str]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text without rich
        for m in MUTANTS:
            if m.id in ids:
                r = rows.get(m.id, {})
                print(f"{m.id:42s} {r.get('status', ''):12s} {r.get('detail', '')}")
        return
    table = Table(title="planted bugs")
    for col in ("id", "status", "first failing test / note", "s"):
        table.add_column(col)
    style = {"killed": "green", "timed out": "green", "survived": "bold red", "equivalent": "dim"}
    for m in MUTANTS:
        if m.id not in ids:
            continue
        r = rows.get(m.id, {})
        st = "equivalent" if m.equivalent else r.get("status", "")
        table.add_row(
            m.id,
            f"[{style.get(st, 'yellow')}]{st}[/]",
            m.equivalent or r.get("detail", ""),
            str(round(r.get("seconds", 0))),
        )
    Console().print(table)


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", action="append", metavar="ID", help="run only this mutant (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the table and exit")
    ap.add_argument("--check", action="store_true", help="check every snippet occurs exactly once and exit")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/mutants_results.md")
    ap.add_argument("--resume", action="store_true", help="run only the mutants without a stored result")
    ap.add_argument("--report", action="store_true", help="rewrite docs/mutants_results.md from the stored results")
    args = ap.parse_args(argv)

    if args.list:
        for m in MUTANTS:
            tag = " [equivalent]" if m.equivalent else ""
            print(f"{m.id:42s} {m.file:40s} {m.description}{tag}\n{'':42s} tests: {m.tests}")
        print(f"{len(MUTANTS)} mutants")
        return 0
    problems = check_table()
    if problems:
        print("the mutant table is stale:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    if args.check:
        print(f"{len(MUTANTS)} mutants, every snippet found exactly once")
        return 0
    if args.report:
        state = load_results()
        if "meta" not in state:
            commits = [r.get("commit", "?") for r in state["rows"].values()]
            state["meta"] = _meta(max(set(commits), key=commits.count) if commits else "?")
        write_markdown(state)
        print_table(state["rows"], [m.id for m in MUTANTS])
        print(f"wrote {RESULTS_MD.relative_to(ROOT)}")
        return 0
    known = {m.id for m in MUTANTS}
    for i in args.only or []:
        if i not in known:
            print(f"unknown mutant id {i!r} (see --list)", file=sys.stderr)
            return 2
    todo = [m for m in MUTANTS if (not args.only or m.id in args.only) and not m.equivalent]
    if args.resume:
        done = load_results()["rows"]
        todo = [m for m in todo if m.id not in done]

    def _interrupted(signum, frame):  # SIGTERM: still revert the applied mutant (the finally below)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupted)
    t_start = time.time()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    TREE.mkdir(parents=True, exist_ok=True)
    changed = sync_tree()
    print(f"scratch tree {TREE}: {len(changed)} files updated; building ...", flush=True)
    r = full_build()
    if r.returncode != 0:
        print(r.stdout[-4000:] + r.stderr[-4000:], file=sys.stderr)
        print("the unmodified scratch tree does not build", file=sys.stderr)
        return 2
    state = load_results()
    commit = _git("rev-parse", "--short", "HEAD").strip() + ("+dirty" if _git("status", "--porcelain").strip() else "")
    if not args.only and not args.resume:
        state = {"rows": {}}
    if not args.only or "meta" not in state:
        state["meta"] = _meta(commit)
    tree = Tree()
    # Python first (no build), then kernel headers (re-embed only), then C++ (recompiles)
    order = {"python": 0, "kernel": 1, "cxx": 2}
    todo.sort(key=lambda m: (order[kind_of(m.file)], m.file))
    for i, m in enumerate(todo, 1):
        t0 = time.time()
        path, text, st = apply(m)
        try:
            failed = tree.settle(kind_of(m.file))
            if failed is not None:
                status, detail, out = "build-failed", _first_failure(failed.stdout + failed.stderr), failed.stderr
            else:
                status, detail, out = run_tests(m)
        finally:
            revert(m, path, text, st, tree)
        secs = time.time() - t0
        state["rows"][m.id] = {"status": status, "detail": detail, "seconds": secs, "commit": commit}
        print(f"[{i}/{len(todo)}] {m.id}: {status} {detail} ({secs:.0f} s)", flush=True)
        if status in ("survived", "error", "build-failed"):
            (SCRATCH / "logs").mkdir(exist_ok=True)
            (SCRATCH / "logs" / f"{m.id}.log").write_text(out)
        RESULTS_JSON.write_text(json.dumps(state, indent=1))
    settle = tree.settle("python")  # leave the scratch build matching the sources
    if settle is not None:
        print("warning: rebuilding the unmodified scratch tree failed", file=sys.stderr)
    seconds = time.time() - t_start
    RESULTS_JSON.write_text(json.dumps(state, indent=1))
    print_table(state["rows"], [m.id for m in MUTANTS if not args.only or m.id in args.only])
    t = totals(state["rows"])
    print(
        f"kill rate {100 * t['kill_rate']:.1f} % ({sum(t.get(k, 0) for k in DETECTED)} of {t['ran']}); "
        f"survived {t.get('survived', 0)}, equivalent {t.get('equivalent', 0)}, not run {t.get('not run', 0)}; "
        f"{seconds / 60:.1f} min"
    )
    if not args.no_write:
        write_markdown(state)
        print(f"wrote {RESULTS_MD.relative_to(ROOT)}")
    return 0 if t.get("survived", 0) == 0 and t.get("build-failed", 0) == 0 and t.get("error", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
