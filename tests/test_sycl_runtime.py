"""SYCL runtime glue and the SYCL layer_norm.

Devices, the kernel provider (compile errors, launch validation, floating-point options),
the persistent on-disk cache (second process, corrupted entries), warmup, thread safety,
and layer_norm on the SYCL CPU device against float64 PyTorch and the reference backend.

Without a SYCL CPU device these tests skip, unless sycl is a required backend (XKERNELS_REQUIRE_BACKENDS,
tests/_backends.py): then they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels import _C
from xkernels import sycl as xsycl
from xkernels.tolerances import DTYPES, elementwise, max_error, statistics, within_budget

import _backends

PYTHON_DIR = str(Path(xkernels.__file__).resolve().parent.parent)


def _sycl_cpu_reason() -> str:
    if not _C.with_sycl:
        return "xkernels was built without the SYCL backend"
    ok, why = _C.sycl.cpu_status("float32")
    return "" if ok else why


@pytest.fixture(scope="module")
def sycl_cpu():
    why = _sycl_cpu_reason()
    if why:
        if _backends.is_required("sycl"):
            pytest.fail(f"backend 'sycl' is required but the SYCL CPU device is unavailable: {why}")
        pytest.skip(f"SYCL CPU device unavailable: {why}")
    return _C.sycl


# ------------------------------------------------------------------ devices


def test_devices_listed(sycl_cpu):
    devs = sycl_cpu.devices()
    assert devs, sycl_cpu.discovery_error()
    keys = {
        "name",
        "vendor",
        "platform",
        "backend",
        "type",
        "driver",
        "fp16",
        "fp64",
        "compute_units",
        "max_work_group_size",
        "local_mem",
        "sub_group_sizes",
        "usable",
    }
    for d in devs:
        assert keys <= set(d), d
        assert isinstance(d["usable"], bool)
        assert d["usable"] or d.get("reason"), d
    cpus = [d for d in devs if d["type"] == "cpu" and d["usable"]]
    assert cpus, devs
    assert all(d["compute_units"] >= 1 and d["max_work_group_size"] >= 1 and d["sub_group_sizes"] for d in cpus)
    assert sycl_cpu.cpu_status("float32") == (True, "")
    assert sycl_cpu.cpu_status("bfloat16")[0]
    assert sycl_cpu.cpu_status("float64")[0] == any(d["fp64"] for d in cpus)
    with pytest.raises(ValueError, match="dtype_name"):
        sycl_cpu.cpu_status("int8")


def _aot_build() -> bool:
    return xkernels.info()["build_config"].get("sycl_aot", "off") != "off"


def test_runtime_facts(sycl_cpu):
    if _aot_build():
        assert sycl_cpu.provider_kind().startswith("ahead of time (icpx ")
    else:
        assert sycl_cpu.provider_kind() == "compiled at run time (kernel_compiler)"
    version = sycl_cpu.runtime_version()
    assert version[:4].isdigit() and int(version[:4]) >= 2025, version
    opts = sycl_cpu.build_options()
    assert "-ffp-contract=off" in opts and "-fno-fast-math" in opts
    # 2025.x needs -fno-sycl-device-lib=all, 2026.x rejects it.
    assert ("-fno-sycl-device-lib=all" in opts) == (int(version[:4]) < 2026)
    names = sycl_cpu.kernel_names()
    assert "xk_layer_norm_fwd__float" in names and "xk_layer_norm_bwd__bf16" in names
    assert "layer_norm.hpp" in sycl_cpu.kernel_groups()
    info = xkernels.info()
    assert info["sycl"]["runtime"] == version and info["backends"]["sycl"]["available"]


# ------------------------------------------------------------------ provider


def test_provider_says_per_device_where_kernels_come_from(sycl_cpu):
    """Every usable device has a choice (provider_choice.h) and, per kernel group built, what it got;
    without ahead-of-time kernels that is run-time compilation, with the reason."""
    usable = [d["name"] for d in sycl_cpu.devices() if d["usable"]]
    provs = sycl_cpu.provider_devices()
    assert [p["device"] for p in provs] == usable
    x = torch.randn(3, 8, dtype=torch.float32)
    with xkernels.use_backend("sycl"):
        xkernels.layer_norm(x, 8)  # builds (or has built) layer_norm.hpp for the CPU device
    cpu_name = next(d["name"] for d in sycl_cpu.devices() if d["usable"] and d["type"] == "cpu")
    cpu = next(p for p in sycl_cpu.provider_devices() if p["device"] == cpu_name)
    assert cpu["backend"] == "opencl" and cpu["choice"].startswith(cpu["source"] + ":")
    got = cpu["groups"]["layer_norm.hpp"]
    if _aot_build():
        # spir64 is always among the images: the CPU gets SPIR-V (or x86-64 code) unless the runtime refuses
        assert cpu["source"] in ("aot-portable", "aot-native") and cpu["image"], cpu
        assert got == cpu["choice"] or got.startswith("run-time-compile: "), got
    else:
        assert cpu["source"] == "run-time-compile" and cpu["image"] == ""
        assert "this build has no ahead-of-time kernels" in cpu["choice"], cpu["choice"]
        assert got == cpu["choice"]
        # the OpenCL CPU device needs no environment for the run-time compiler
        assert sycl_cpu.runtime_compile_env() == []
    info = xkernels.info()["sycl"]
    assert info["provider_devices"] == sycl_cpu.provider_devices()
    assert info["runtime_compile_env"] == sycl_cpu.runtime_compile_env()


def test_group_kernel_names_follow_the_device_traits(sycl_cpu):
    """The generated run-time entry points of a kernel table (kernel_table.h) per dtype and sub-group sizes: a
    device compiles the element types it has, the kernels whose required sub-group size it has, and of the
    lane-variant conv2d kernels only the width the host launches (16 / 8 for double, else 32)."""
    ln = sycl_cpu.group_kernel_names("layer_norm.hpp", False, False, [16])
    kernels = ("layer_norm_fwd", "layer_norm_bwd", "layer_norm_bwd_wb_final")
    assert ln == [f"xk_{k}__{t}" for k in kernels for t in ("float", "bf16")]
    assert "xk_layer_norm_fwd__double" in sycl_cpu.group_kernel_names("layer_norm.hpp", False, True, [16])
    assert "xk_layer_norm_fwd__half" in sycl_cpu.group_kernel_names("layer_norm.hpp", True, False, [16])
    lin16 = sycl_cpu.group_kernel_names("fused_linear_relu.hpp", True, True, [8, 16, 32])
    lin32 = sycl_cpu.group_kernel_names("fused_linear_relu.hpp", True, True, [32])
    assert "xk_linear_gemm_panel_true_true__float" in lin16 and set(lin32) < set(lin16)
    assert not any("panel" in n for n in lin32)  # needs sub-groups of 16
    # CPUs build the register tiles of their register file: 8 lanes on AVX2 (native float width 8), 16 on AVX-512.
    widths = [4, 8, 16, 32, 64]
    avx2 = sycl_cpu.group_kernel_names("fused_linear_relu.hpp", True, True, widths, 8)
    avx512 = sycl_cpu.group_kernel_names("fused_linear_relu.hpp", True, True, widths, 16)
    assert "xk_linear_gemm_panel_true_true_8__float" in avx2 and "xk_linear_gemm_dot_true_true_8__float" in avx2
    # (16 lanes is the descriptors' default template argument, so its names carry no width)
    assert not any(n.startswith(("xk_linear_gemm_panel_true_true__", "xk_linear_gemm_dot_true_true__")) for n in avx2)
    assert "xk_linear_gemm_panel_true_true__float" in avx512 and not any("_true_8__" in n for n in avx512)
    # the few-row kernel of whole packed rows (AVX2 only: the AVX-512 panel tile already spans a packed row)
    assert "xk_linear_gemm_row_true_true__float" in avx2 and "xk_linear_gemm_row_false_true__bf16" in avx2
    assert not any("linear_gemm_row" in n for n in avx512 + lin16)
    conv_avx2 = sycl_cpu.group_kernel_names("conv2d.hpp", True, True, widths, 8)
    assert "xk_conv2d_igemm_false_8_6_2__float" in conv_avx2 and "xk_conv2d_igemm_false_8_6_2__double" in conv_avx2
    assert not any("_6_4__" in n or "_16_" in n for n in conv_avx2), "AVX2: no 16-lane or 6x4 (AVX-512) tiles"
    conv_avx512 = sycl_cpu.group_kernel_names("conv2d.hpp", True, True, widths, 16)
    assert "xk_conv2d_igemm_false_16_6_4__float" in conv_avx512 and not any("_6_2__" in n for n in conv_avx512)
    conv = sycl_cpu.group_kernel_names("conv2d.hpp", False, True, [32])
    # grad_bias: a channels_last (true) and a strided (false) variant per width
    assert {f"xk_conv2d_grad_bias_{v}_32__{t}" for v in ("true", "false") for t in ("float", "double")} <= set(conv)
    cpu = sycl_cpu.group_kernel_names("conv2d.hpp", True, True, [4, 8, 16, 32, 64])
    assert {f"xk_conv2d_grad_bias_{v}_16__float" for v in ("true", "false")} <= set(cpu)
    assert {f"xk_conv2d_grad_bias_{v}_8__double" for v in ("true", "false")} <= set(cpu)
    assert not any("_32__" in n for n in cpu), "a device with widths 16 and 8 must not build the 32-wide variants"
    with pytest.raises(ValueError, match="argument 'file' must name a kernel group .*got 'nope.hpp'"):
        sycl_cpu.group_kernel_names("nope.hpp", True, True, [16])


# The probes below go through the public user-kernel API (xkernels.sycl, tests/test_custom_kernels.py),
# which builds through the same path as the kernel groups (build_source -> build_bundle).


def test_compile_error_raises_with_log(sycl_cpu):
    bogus = textwrap.dedent("""\
        void broken(xk::item_arg<1> ia, float* x, int64_t n) {
          x[0] = xk_no_such_function(n);
        }
    """)
    lib = xsycl.load_inline("runtime_broken", bogus)
    with pytest.raises(xsycl.CompileError) as err:
        lib.build()
    msg = str(err.value)
    assert "compiling kernel source 'runtime_broken' (kernels: broken)" in msg
    assert "runtime_broken.sycl:2:" in msg  # the compiler's own diagnostic, at the source's line
    assert "xk_no_such_function" in msg and "error" in msg
    assert "-ffp-contract=off" in msg  # the options used


def test_good_source_builds(sycl_cpu):
    lib = xsycl.load_inline("runtime_fine", "void fine(xk::item_arg<1> ia, float* x, int64_t n) {}\n")
    lib.build()
    assert [label.split(": ", 1)[1] for label, _s in lib.builds()] == ["runtime_fine.sycl"]


_FP_PROBE = textwrap.dedent("""\
    void fp_probe(xk::item_arg<1> ia, const float* a, const float* b, const float* c,
                  float* axpy, float* quot, float* root, int64_t n) {
      const int64_t i = xk::item(ia).get_global_id(0);
      if (i >= n) return;
      axpy[i] = a[i] * b[i] + c[i];
      quot[i] = a[i] / b[i];
      root[i] = sycl::sqrt(sycl::fabs(c[i]));
    }
""")


def _run_fp_probe(n, extra_cflags=()):
    g = torch.Generator().manual_seed(1234)
    a, b, c = (torch.randn(n, generator=g) for _ in range(3))
    outs = [torch.empty(n) for _ in range(3)]
    lib = xsycl.load_inline("fp_probe", _FP_PROBE, extra_cflags=list(extra_cflags))
    lib.fp_probe[n, 64](a, b, c, *outs, n)
    # Correctly rounded single roundings, computed exactly in float64 (a*b is exact there).
    exact = [
        ((a.double() * b.double()).float().double() + c.double()).float(),
        (a.double() / b.double()).float(),
        c.abs().double().sqrt().float(),
    ]
    return [(o == e).double().mean().item() for o, e in zip(outs, exact)]


def test_fp_options_take_effect(sycl_cpu):
    n = 1 << 14
    axpy, quot, root = _run_fp_probe(n)
    # Pinned options: a*b+c is two roundings (no contraction); division and sqrt correctly rounded.
    assert (axpy, quot, root) == (1.0, 1.0, 1.0)
    # Allowing contraction (as the kernel compiler does by default) fuses a*b+c into an FMA: the
    # pinned option is what prevents it.
    axpy_contracted, _, _ = _run_fp_probe(n, extra_cflags=["-ffp-contract=fast"])
    assert axpy_contracted < 0.99


def test_launch_validation(sycl_cpu):
    lib = xsycl.load_inline("runtime_two", "void two(xk::item_arg<1> ia, float* x, int64_t n) { if (n < 0) x[0] = 1; }")
    x = torch.zeros(64)
    with pytest.raises(ValueError, match="not a multiple of the local size"):
        lib.two[100, 64](x, 64)
    with pytest.raises(ValueError, match="must be >= 1"):
        lib.two[64, 0](x, 64)
    with pytest.raises(ValueError, match="exceeds the limit"):  # the device's limit
        lib.two[1 << 20, 1 << 20](x, 64)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        lib.two[64, 64](64)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        lib.two[64, 64](x, x, 64)
    lib.two[64, 64](x, 64)  # and a good launch runs


# ------------------------------------------------------------------ layer_norm

# Error budget per dtype: the relative-to-torch policy of xkernels.tolerances, scope "cpu_layer_norm"
# (torch's own same-dtype error sets the scale; rounding the output to the dtype dominates for
# float16/bfloat16).


def _check_close(got, ours_dtype_torch, exact, dtype, what):
    ok, err, bound = within_budget(got, ours_dtype_torch, exact.double(), dtype, scope="cpu_layer_norm")
    assert ok, (
        f"{what} ({dtype}): max error {err:.3e} > bound {bound:.3e} "
        f"(torch's own {max_error(ours_dtype_torch, exact.double()):.3e})"
    )


def _ln_case(shape, nshape, affine, dtype, seed, noncontig=False):
    g = torch.Generator().manual_seed(seed)
    full = list(shape)
    if noncontig:
        full[-1] *= 2
    x = torch.randn(full, generator=g, dtype=torch.float64) * 3 + 0.5
    if noncontig:
        x = x[..., ::2]
    n = torch.Size(nshape)
    w = (torch.rand(n, generator=g, dtype=torch.float64) + 0.5) if affine else None
    b = torch.randn(n, generator=g, dtype=torch.float64) if affine else None
    dy = torch.randn(shape, generator=g, dtype=torch.float64)
    cast = lambda t: None if t is None else t.to(dtype)
    return x.to(dtype), cast(w), cast(b), dy.to(dtype), (x, w, b, dy)


def _grads(fn, x, w, b, dy):
    leaves = [t.detach().clone().requires_grad_(True) if t is not None else None for t in (x, w, b)]
    out = fn(*leaves)
    inputs = [t for t in leaves if t is not None]
    grads = torch.autograd.grad(out, inputs, dy)
    it = iter(grads)
    return out.detach(), [next(it) if t is not None else None for t in leaves]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,nshape,affine,noncontig",
    [
        ((1, 1), (1,), True, False),
        ((7, 33), (33,), True, False),
        ((3, 5, 129), (129,), False, False),
        ((4, 6, 10), (6, 10), True, True),
        ((130, 64), (64,), True, False),
        ((2, 1000), (1000,), True, True),
    ],
    ids=["1x1", "7x33", "3x5x129-noaffine", "4x6x10-2d-strided", "130x64", "2x1000-strided"],
)
def test_layer_norm_matches_float64_and_reference(sycl_cpu, dtype, shape, nshape, affine, noncontig):
    if dtype == torch.float64 and not sycl_cpu.cpu_status("float64")[0]:
        pytest.skip("the SYCL CPU device has no fp64")
    x, w, b, dy, (x64, w64, b64, dy64) = _ln_case(shape, nshape, affine, dtype, seed=hash((shape, affine)) % 1000)
    eps = 1e-5

    def ours(x_, w_, b_):
        return xkernels.layer_norm(x_, list(nshape), w_, b_, eps)

    def aten(x_, w_, b_):
        return F.layer_norm(x_, list(nshape), w_, b_, eps)

    with xkernels.use_backend("sycl"), xkernels.dispatch_record() as rec:
        y, (gx, gw, gb) = _grads(ours, x, w, b, dy)
        y2, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, list(nshape), w, b, eps)
    ran = {(op, backend) for (op, backend, _dev) in rec.counts()}
    assert ("layer_norm", "sycl") in ran or ("layer_norm_forward", "sycl") in ran, rec.summary()
    assert ("layer_norm_backward", "sycl") in ran, rec.summary()
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    assert torch.equal(y, y2)

    y_exact, (gx_exact, gw_exact, gb_exact) = _grads(aten, x64, w64, b64, dy64)
    y_torch, (gx_torch, gw_torch, gb_torch) = _grads(aten, x, w, b, dy)
    _check_close(y, y_torch, y_exact, dtype, "output")
    _check_close(gx, gx_torch, gx_exact, dtype, "grad_input")
    if affine:
        _check_close(gw, gw_torch, gw_exact, dtype, "grad_weight")
        _check_close(gb, gb_torch, gb_exact, dtype, "grad_bias")

    # Saved statistics, in the accumulation dtype.
    red = tuple(range(x.dim() - len(nshape), x.dim()))
    mean64 = x64.mean(red, keepdim=True)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert mean.dtype == stat_dtype and rstd.dtype == stat_dtype
    stat_tol = statistics(stat_dtype)
    x_rounded = x.double()  # statistics are of the dtype-rounded input
    mean_r = x_rounded.mean(red, keepdim=True)
    rstd_r = (x_rounded.var(red, unbiased=False, keepdim=True) + eps).rsqrt()
    torch.testing.assert_close(mean.double(), mean_r, rtol=stat_tol, atol=stat_tol * max(1, mean64.abs().max()))
    torch.testing.assert_close(rstd.double(), rstd_r, rtol=stat_tol, atol=0)

    # And the reference backend (the oracle) agrees within the same budget.
    with xkernels.use_backend("reference"):
        y_ref, (gx_ref, _, _) = _grads(ours, x, w, b, dy)
    _check_close(y, y_ref, y_exact, dtype, "output vs reference")
    _check_close(gx, gx_ref, gx_exact, dtype, "grad_input vs reference")


def test_layer_norm_exact_on_small_integers(sycl_cpu):
    # Rows with mean 0 and variance 1 exactly (values ±1): out = x * w + b exactly, eps = 0.
    x = torch.tensor([[1.0, -1.0, 1.0, -1.0], [-1.0, -1.0, 1.0, 1.0]])
    w = torch.tensor([2.0, 3.0, 4.0, 5.0])
    b = torch.tensor([1.0, 0.0, -1.0, 0.5])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        with xkernels.use_backend("sycl"):
            y = xkernels.layer_norm(x.to(dtype), [4], w.to(dtype), b.to(dtype), eps=0.0)
        assert torch.equal(y.float(), x * w + b), dtype


def test_layer_norm_many_rows_grid_stride(sycl_cpu):
    # More rows than one launch has sub-groups (65536 work-groups x 4): rows are grid-strided.
    M, N = 300_001, 3
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(7))
    dy = torch.randn(M, N, generator=torch.Generator().manual_seed(8))
    w = torch.tensor([0.5, 2.0, -1.0])
    with xkernels.use_backend("sycl"):
        y, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [N], w, None, 1e-5)
        gx, gw, _ = torch.ops.xkernels.layer_norm_backward(dy, x, [N], mean, rstd, w, None, [True, True, False])
    aten = lambda x_, w_, b_: F.layer_norm(x_, [N], w_, b_, 1e-5)  # noqa: E731
    y64, (gx64, gw64, _) = _grads(aten, x.double(), w.double(), None, dy.double())
    y32, (gx32, gw32, _) = _grads(aten, x, w, None, dy)
    _check_close(y, y32, y64, torch.float32, "output")
    _check_close(gx, gx32, gx64, torch.float32, "grad_input")
    _check_close(gw, gw32, gw64, torch.float32, "grad_weight")


def test_layer_norm_backward_mask(sycl_cpu):
    x = torch.randn(5, 16)
    w = torch.rand(16) + 0.5
    b = torch.randn(16)
    dy = torch.randn(5, 16)
    with xkernels.use_backend("sycl"):
        _, mean, rstd = torch.ops.xkernels.layer_norm_forward(x, [16], w, b, 1e-5)
        full = torch.ops.xkernels.layer_norm_backward(dy, x, [16], mean, rstd, w, b, [True, True, True])
        only_w = torch.ops.xkernels.layer_norm_backward(dy, x, [16], mean, rstd, w, b, [False, True, False])
        no_w = torch.ops.xkernels.layer_norm_backward(dy, x, [16], mean, rstd, None, None, [True, True, True])
    assert only_w[0].numel() == 0 and only_w[2].numel() == 0
    assert torch.equal(only_w[1], full[1])
    assert no_w[1].numel() == 0 and no_w[2].numel() == 0 and no_w[0].shape == x.shape


# ------------------------------------------------------------------ processes: cache, warmup, threads


def _child(code: str, cache: Path, timeout=300) -> dict:
    """Runs `code` in a fresh interpreter with its own kernel cache; it prints one JSON line."""
    env = dict(os.environ)
    env["XKERNELS_CACHE_DIR"] = str(cache)
    env["SYCL_CACHE_PERSISTENT"] = "1"
    env["SYCL_CACHE_DIR"] = str(cache / "sycl")  # this process's _env.prepare() set the parent's
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    prog = "import json, time, torch, xkernels\nfrom xkernels import _C\n" + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"child failed (rc={r.returncode}):\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


_RUN_LAYER_NORM = """
    t0 = time.perf_counter()
    x = torch.randn(9, 70, generator=torch.Generator().manual_seed(0))
    w = torch.rand(70) + 0.5
    with xkernels.use_backend("sycl"):
        y = xkernels.layer_norm(x, [70], w, None)
    seconds = time.perf_counter() - t0
    err = (y.double() - torch.nn.functional.layer_norm(x.double(), [70], w.double())).abs().max().item()
    print(json.dumps({"seconds": seconds, "err": err, "builds": _C.sycl.build_log(),
                      "purged": _C.sycl.cache_purged()}))
"""


def _cache_files(cache: Path) -> dict:
    return {
        str(p.relative_to(cache)): p.stat().st_mtime_ns
        for p in cache.rglob("*")
        if p.is_file() and not p.name.endswith("_access_time.txt")
    }


# The children's layer_norm (float32, rows of 70) against float64: max abs error within the elementwise
# float32 atol.
_ERR_LIMIT = elementwise(torch.float32)[1]


def test_second_process_hits_cache(sycl_cpu, tmp_path):
    cold = _child(_RUN_LAYER_NORM, tmp_path)
    files = _cache_files(tmp_path)
    assert any(f.endswith(".bin") for f in files), files
    warm = _child(_RUN_LAYER_NORM, tmp_path)
    assert cold["err"] < _ERR_LIMIT and warm["err"] < _ERR_LIMIT
    # The warm process compiled nothing: the runtime wrote no new cache files ...
    assert _cache_files(tmp_path) == files
    # ... and was clearly faster (generous: compiles take seconds, cache hits a fraction).
    assert warm["seconds"] < 0.75 * cold["seconds"], (cold, warm)


def test_corrupted_cache_entry_rebuilt(sycl_cpu, tmp_path):
    _child(_RUN_LAYER_NORM, tmp_path)
    bins = sorted(p for p in (tmp_path / "sycl").rglob("*.bin"))
    assert bins
    for i, p in enumerate(bins):
        data = bytearray(p.read_bytes())
        if i % 2 == 0:  # flipped bytes: the runtime would load this and crash (SIGSEGV)
            for k in range(len(data) // 4, len(data), 97):
                data[k] ^= 0xFF
            p.write_bytes(bytes(data))
        else:  # truncated: the runtime would recompile in every process, never rewriting it
            p.write_bytes(b"")
    healed = _child(_RUN_LAYER_NORM, tmp_path)
    assert healed["err"] < _ERR_LIMIT
    assert healed["purged"], "corrupted entries were not detected"
    files = _cache_files(tmp_path)
    again = _child(_RUN_LAYER_NORM, tmp_path)
    assert again["err"] < _ERR_LIMIT and again["purged"] == []
    assert _cache_files(tmp_path) == files  # the rebuilt entries are used, not rebuilt again


def test_warmup_compiles_all_groups(sycl_cpu, tmp_path):
    out = _child(
        """
        calls = []
        res = _C.sycl.warmup(lambda done, total, label: calls.append((done, total, label)))
        print(json.dumps({"res": res, "calls": calls, "groups": _C.sycl.kernel_groups(),
                          "usable": sum(d["usable"] for d in _C.sycl.devices()), "builds": _C.sycl.build_log(),
                          "py": xkernels.warmup()}))
    """,
        tmp_path,
    )
    # one build per (device, group, element type): "<device>: layer_norm.hpp [float]". The AMX group (bf16 only) is
    # built only where the AMX path is on: a joint_matrix build for any other target aborts the process.
    amx_on = bool(_C.sycl.amx_status()[0])
    parts = {g: ("bf16",) if amx_on else () for g in out["groups"] if g == "amx_gemm.hpp"}
    expected = len(out["res"])
    assert expected >= out["usable"] * (len(out["groups"]) - len(parts)) * 2 >= 2  # float and bfloat16 at least
    labels = [label for label, _s in out["res"]]
    assert len(set(labels)) == len(labels)
    for g in out["groups"]:
        for part in parts.get(g, ("float", "bf16")):  # the kernel tables' element type labels (kernels/tables.hpp)
            assert any(label.endswith(f": {g} [{part}]") for label in labels), (g, part, labels)
        if g in parts and not amx_on:
            assert not any(f": {g} [" in label for label in labels), labels
    assert all(s >= 0 for _l, s in out["res"])
    assert [c[0] for c in out["calls"]] == list(range(expected + 1)) and out["calls"][-1][2] == "done"
    assert len(out["builds"]) == expected  # compiled once each
    assert len(out["py"]) == expected  # a second warmup reuses them (and xkernels.warmup works)


def test_concurrent_first_use_compiles_once(sycl_cpu, tmp_path):
    out = _child(
        """
        import threading
        from xkernels.tolerances import against_torch
        x = torch.randn(33, 40)
        results, errors = [], []
        def work():
            try:
                with xkernels.use_backend("sycl"):
                    results.append(xkernels.layer_norm(x, [40]))
            except Exception as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads: t.start()
        for t in threads: t.join()
        ref = torch.nn.functional.layer_norm(x, [40])
        limit = against_torch(torch.float32)[1]  # max abs difference within the float32 atol
        ok = len(results) == 6 and all((r - ref).abs().max().item() < limit for r in results)
        print(json.dumps({"ok": ok, "errors": errors, "builds": _C.sycl.build_log()}))
    """,
        tmp_path,
    )
    assert out["errors"] == [] and out["ok"]
    assert [label for label, _s in out["builds"]].count(out["builds"][0][0]) == 1, out["builds"]
