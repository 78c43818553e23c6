"""User-written SYCL kernels (xkernels.sycl): source text -> run-time compiled kernel -> torch op.

Element-type templates (float32/float64/float16/bfloat16), autograd (gradcheck in float64),
torch.compile(fullgraph=True), opcheck, the parity harness, compile errors citing the user's
own lines, the on-disk cache across processes, launch validation, threads.

Without a SYCL CPU device these tests skip, unless XKERNELS_REQUIRE_SYCL=1: then they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import xkernels
from xkernels import _C
from xkernels import sycl as xsycl
from xkernels.tolerances import DTYPES, assert_close
from xkernels.tolerances import elementwise as tolerance

REQUIRE = os.environ.get("XKERNELS_REQUIRE_SYCL", "") not in ("", "0")
PYTHON_DIR = str(Path(xkernels.__file__).resolve().parent.parent)


@pytest.fixture(scope="module", autouse=True)
def sycl_cpu():
    why = "xkernels was built without the SYCL backend" if not _C.with_sycl else _C.sycl.cpu_status("float32")[1]
    if why:
        if REQUIRE:
            pytest.fail(f"XKERNELS_REQUIRE_SYCL=1 but the SYCL CPU device is unavailable: {why}")
        pytest.skip(f"SYCL CPU device unavailable: {why}")


SCALE_ADD = """\
// out = x + alpha * y, one work-item per element
template <typename T>
void scale_add(xk::item_arg<1> ia, const T* x, const T* y, T* out, xk::acc_t<T> alpha, int64_t n) {
  const int64_t i = xk::item(ia).get_global_id(0);
  if (i < n) xk::store(out, i, xk::load(x, i) + alpha * xk::load(y, i));
}
"""

LOCAL = 64


def _lib():
    return xsycl.load_inline("test_scale_add", SCALE_ADD)


def _define_op():
    lib = _lib()

    @xsycl.custom_op("xk_test::scale_add(Tensor x, Tensor y, float alpha) -> Tensor")
    def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        torch._check(x.shape == y.shape, lambda: f"xk_test::scale_add: shapes {tuple(x.shape)} and {tuple(y.shape)}")
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        lib.scale_add[xsycl.round_up(n, LOCAL), LOCAL](x, y, out, alpha, n)
        return out

    @scale_add.register_fake
    def _(x, y, alpha):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[2]

    def backward(ctx, g):
        return g, g * ctx.alpha, None

    scale_add.register_autograd(backward, setup_context=setup_context)
    return scale_add


_OP = None


def scale_add_op():
    global _OP
    if _OP is None:
        _OP = _define_op()
    return torch.ops.xk_test.scale_add


def _reference(x, y, alpha):
    return x + alpha * y


# ------------------------------------------------------------------ numbers, dtypes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 63, 64, 1000])
def test_dtype_templates(dtype, n):
    op = scale_add_op()
    g = torch.Generator().manual_seed(n)
    x64, y64 = torch.randn(n, generator=g, dtype=torch.float64), torch.randn(n, generator=g, dtype=torch.float64)
    x, y = x64.to(dtype), y64.to(dtype)
    out = op(x, y, 0.75)
    assert out.dtype == dtype and out.shape == x.shape
    assert_close(out, _reference(x.double(), y.double(), 0.75), dtype, f"scale_add {dtype}")


def test_strided_input_made_contiguous_and_empty():
    op = scale_add_op()
    x = torch.randn(6, 10)[:, ::2]
    y = torch.randn(6, 5)
    assert not x.is_contiguous()
    torch.testing.assert_close(
        op(x, y, 2.0), x + 2.0 * y, rtol=tolerance(torch.float32)[0], atol=tolerance(torch.float32)[1]
    )
    e = torch.empty(0, 3)
    assert op(e, e, 1.0).shape == (0, 3)


def test_exact_on_small_integers():
    op = scale_add_op()
    x = torch.arange(-50, 50, dtype=torch.float32)
    y = torch.arange(100, dtype=torch.float32)
    assert torch.equal(op(x, y, 3.0), x + 3.0 * y)


def test_translation_unit_and_options():
    lib = _lib()
    tu = lib.translation_unit(torch.float16)
    assert '#include "test_scale_add.sycl"' in tu  # the user's text, as an include file
    assert lib.source_file.name == "test_scale_add.sycl" and lib.source_file.read_text() == SCALE_ADD
    assert f"-I{lib.source_file.parent}" in lib.build_options
    assert (
        "void xku_scale_add__float16(const xk::half* x, const xk::half* y, xk::half* out, float alpha, int64_t n)" in tu
    )
    assert "scale_add<xk::half>(xk::item_arg<1>{}, x, y, out, alpha, n);" in tu
    assert "-ffp-contract=off" in lib.build_options and "-DXK_RTC=1" in lib.build_options
    assert xsycl.load_inline("test_scale_add", SCALE_ADD) is lib  # loaded once per (name, source, options)


# ------------------------------------------------------------------ autograd, compile, opcheck, parity


def test_gradcheck_float64():
    op = scale_add_op()
    x = torch.randn(17, dtype=torch.float64, requires_grad=True)
    y = torch.randn(17, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, -1.5), (x, y))
    assert torch.autograd.gradgradcheck(lambda a, b: op(a, b, -1.5), (x, y))


def test_torch_compile_fullgraph():
    op = scale_add_op()

    def f(x, y):
        return torch.relu(op(x * 2, y, 0.5)) + 1

    x, y = torch.randn(33), torch.randn(33)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, y), f(x, y))
    compiled_inductor = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(
        compiled_inductor(x, y),
        torch.relu(2 * x + 0.5 * y) + 1,
        rtol=tolerance(torch.float32)[0],
        atol=tolerance(torch.float32)[1],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_opcheck(dtype):
    op = scale_add_op()
    x = torch.randn(5, 3, dtype=dtype, requires_grad=True)
    y = torch.randn(5, 3, dtype=dtype, requires_grad=True)
    torch.library.opcheck(op, (x, y, 0.25))
    torch.library.opcheck(op, (x.detach(), y.detach(), 2.0))


def test_parity_check_op():
    op = scale_add_op()
    for dtype in (torch.float32, torch.bfloat16):
        x, y = torch.randn(300).to(dtype), torch.randn(300).to(dtype)
        rep = xkernels.parity.check_op(op, x, y, 0.5, reference_fn=_reference)
        assert rep.passed, rep.to_json() if hasattr(rep, "to_json") else rep
        assert [r.backend for r in rep.results] == ["xk_test::scale_add"]
        assert {t.name for t in rep.results[0].tensors} == {"output", "grad_x", "grad_y"}
    # a wrong reference is caught
    x, y = torch.randn(300), torch.randn(300)
    bad = xkernels.parity.check_op(op, x, y, 0.5, reference_fn=lambda x, y, alpha: x + alpha * y * 1.001)
    assert not bad.passed
    with pytest.raises(ValueError, match="reference_fn"):
        xkernels.parity.check_op(op, x, y, 0.5)


# ------------------------------------------------------------------ compile errors


def test_compile_error_cites_user_lines():
    src = textwrap.dedent("""\
        // line 1
        template <typename T>
        void broken_kernel(xk::item_arg<1> ia, const T* x, T* y, int64_t n) {
          const int64_t i = xk::item(ia).get_global_id(0);
          y[i] = xk_no_such_function(x[i]);
        }
    """)
    lib = xsycl.load_inline("broken_src", src)
    x = torch.zeros(8)
    with pytest.raises(xsycl.CompileError) as err:
        lib.broken_kernel[8, 8](x, x, 8)
    msg = str(err.value)
    assert "'broken_src'" in msg and "broken_kernel" in msg
    assert "broken_src.sycl:5:" in msg, msg  # the user's own line 5
    assert "xk_no_such_function" in msg and "error" in msg
    assert "broken_src.sycl:5:" in err.value.diagnostics
    assert isinstance(err.value, RuntimeError)
    # a syntax error in the very first line
    lib2 = xsycl.load_inline("broken_src2", "template <typename T> void k2(xk::item_arg<1> ia, T* y) { y[0] = }\n")
    with pytest.raises(xsycl.CompileError, match=r"broken_src2\.sycl:1:"):
        lib2.k2[1, 1](x)


def test_source_including_common_hpp_keeps_its_line_numbers():
    src = textwrap.dedent("""\
        #include "common.hpp"
        template <typename T>
        void with_include(xk::item_arg<1> ia, T* y, int64_t n) {
          y[0] = xk_nope_again(n);
        }
    """)
    lib = xsycl.load_inline("with_include", src)
    assert lib.source_file.read_text().splitlines()[0].startswith('// #include "common.hpp"')
    with pytest.raises(
        xsycl.CompileError,
        match=r"with_include\.sycl:4:\d+: error: use of undeclared identifier "
        r"'xk_nope_again'",
    ):
        lib.build()


def test_source_errors_found_before_compiling():
    with pytest.raises(ValueError, match="no kernel body"):
        xsycl.load_inline("nothing", "int f(int a) { return a; }")
    with pytest.raises(ValueError, match="no kernel body named 'missing'"):
        xsycl.load_inline("some", SCALE_ADD, functions=["missing"])
    with pytest.raises(ValueError, match="parameter 'const T& x' is not supported"):
        xsycl.load_inline("refs", "template <typename T> void k(xk::item_arg<1> ia, const T& x, T* y) {}")
    with pytest.raises(ValueError, match="type 'std::string' is not supported"):
        xsycl.load_inline("strs", "template <typename T> void k(xk::item_arg<1> ia, T* y, std::string s) {}")
    with pytest.raises(ValueError, match="no T\\* parameter"):
        xsycl.load_inline("not", "template <typename T> void k(xk::item_arg<1> ia, float* y) {}")
    with pytest.raises(ValueError, match="'name' must be a C identifier"):
        xsycl.load_inline("bad name", SCALE_ADD)
    with pytest.raises(ValueError, match="schema"):
        xsycl.custom_op("no_namespace(Tensor x) -> Tensor")


# ------------------------------------------------------------------ bad launches


def test_bad_launches_raise_clear_errors():
    k = _lib().scale_add
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    k[64, 64](x, y, out, 1.0, 64)  # a good launch
    # argument count
    with pytest.raises(TypeError, match=r"kernel 'scale_add' takes 5 arguments \(x, y, out, alpha, n\), got 4"):
        k[64, 64](x, y, out, 1.0)
    # argument types
    with pytest.raises(TypeError, match=r"argument 'y' \(const T\* y\) must be a Tensor, got float"):
        k[64, 64](x, 2.0, out, 1.0, 64)
    with pytest.raises(TypeError, match=r"argument 'n' \(int64_t n\) must be an int, got float 64.0"):
        k[64, 64](x, y, out, 1.0, 64.0)
    with pytest.raises(TypeError, match=r"argument 'alpha' .* is a scalar: pass a Python number"):
        k[64, 64](x, y, out, torch.tensor(1.0), 64)
    # dtype: T comes from x; y must match; T must be a floating type
    with pytest.raises(
        TypeError,
        match=r"argument 'y' \(const T\* y\) must be torch.float32 \(T = torch.float32\), "
        r"got torch.float64",
    ):
        k[64, 64](x, y.double(), out, 1.0, 64)
    with pytest.raises(
        TypeError,
        match=r"argument 'x' .* must be torch.float32, torch.float64, torch.float16 or "
        r"torch.bfloat16, got torch.int32",
    ):
        k[64, 64](x.int(), y, out, 1.0, 64)
    # contiguity
    strided = torch.randn(128)[::2]
    with pytest.raises(
        ValueError,
        match=r"argument 'y' \(const T\* y\) must be contiguous, got shape \[64\] "
        r"strides \[2\]",
    ):
        k[64, 64](x, strided, out, 1.0, 64)
    with pytest.raises(ValueError, match="argument 'out' is written by the kernel but has overlapping elements"):
        k[64, 64](x, y, torch.zeros(1).expand(64), 1.0, 64)
    # device
    with pytest.raises(ValueError, match="argument 'out' is on meta, but the first tensor argument is on cpu"):
        k[64, 64](x, y, torch.empty(64, device="meta"), 1.0, 64)
    with pytest.raises(RuntimeError, match="cannot run on tensors on device meta"):
        k[64, 64](*(torch.empty(64, device="meta") for _ in range(3)), 1.0, 64)
    # geometry
    with pytest.raises(ValueError, match=r"global size \[100\] is not a multiple of the local size \[64\]"):
        k[100, 64](x, y, out, 1.0, 64)
    with pytest.raises(ValueError, match=r"local size \[0\] must be >= 1"):
        k[64, 0](x, y, out, 1.0, 64)
    with pytest.raises(ValueError, match="is 1-dimensional .*global_size must have 1 entries"):
        k[(8, 8), 8](x, y, out, 1.0, 64)
    with pytest.raises(TypeError, match="global_size must be an int or a tuple"):
        k[64.0, 64](x, y, out, 1.0, 64)
    with pytest.raises(
        ValueError,
        match=r"kernel 'scale_add' \(test_scale_add.sycl\): work-group size 1048576 "
        r"\(local size \[1048576\]\) exceeds the limit",
    ):
        k[1 << 20, 1 << 20](x, y, out, 1.0, 64)
    with pytest.raises(TypeError, match=r"launch kernel 'scale_add' as kernel\[global_size, local_size\]"):
        k[64](x, y, out, 1.0, 64)
    # an int parameter out of its C type's range
    lib = xsycl.load_inline("int32_param", "template <typename T>\nvoid k32(xk::item_arg<1> ia, T* y, int n) {}\n")
    with pytest.raises(ValueError, match=r"argument 'n' \(int32_t\) is out of range: 4294967296"):
        lib.k32[1, 1](out, 1 << 32)
    with pytest.raises(AttributeError, match="has no kernel 'nope'"):
        _ = _lib().nope
    # a zero-size launch runs nothing
    k[0, 64](x, y, out, 1.0, 0)
    # and the process is still fine
    k[64, 64](x, y, out, 2.0, 64)
    assert torch.allclose(out, x + 2.0 * y)


def test_op_errors_from_torch_op():
    op = scale_add_op()
    with pytest.raises(RuntimeError, match="shapes"):
        op(torch.randn(3), torch.randn(4), 1.0)
    with pytest.raises(TypeError, match="must be torch.float32"):
        op(torch.randn(3), torch.randn(3, dtype=torch.float64), 1.0)


def test_untemplated_kernel_2d_and_extra_cflags():
    src = textwrap.dedent("""\
        void fill_index(xk::item_arg<2> ia, float* out, int64_t cols) {
          const auto it = xk::item(ia);
          const int64_t r = it.get_global_id(0), c = it.get_global_id(1);
          out[r * cols + c] = static_cast<float>(r * SCALE + c);
        }
    """)
    lib = xsycl.load_inline("fill_index", src, extra_cflags=["-DSCALE=100"])
    out = torch.empty(4, 8)
    lib.fill_index[(4, 8), (2, 4)](out, 8)
    r, c = torch.meshgrid(torch.arange(4), torch.arange(8), indexing="ij")
    assert torch.equal(out, (r * 100 + c).float())
    with pytest.raises(TypeError, match=r"argument 'out' \(float\* out\) must be torch.float32, got torch.float64"):
        lib.fill_index[(4, 8), (2, 4)](out.double(), 8)


# ------------------------------------------------------------------ threads


def test_threads_first_use_compiles_once():
    src = SCALE_ADD.replace("scale_add", "scale_add_threads")
    lib = xsycl.load_inline("threads_src", src)
    x = torch.randn(1000)
    errors, results = [], []

    def work(i):
        try:
            out = torch.empty_like(x)
            for _ in range(20):
                lib.scale_add_threads[1024, 64](x, x, out, float(i), 1000)
            results.append((i, out))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 6
    for i, out in results:
        assert torch.allclose(out, x + i * x)
    assert len(lib.builds()) == 1, lib.builds()  # one build for float32 on the CPU device


# ------------------------------------------------------------------ processes: the on-disk cache

_CHILD = """
    import json, sys, time, torch
    from xkernels import sycl
    SRC = {src!r}
    t0 = time.perf_counter()
    lib = sycl.load_inline("cache_probe", SRC)
    x = torch.arange(256, dtype=torch.float32)
    out = torch.empty_like(x)
    lib.scale_add[256, 64](x, x, out, 2.0, 256)
    seconds = time.perf_counter() - t0
    print(json.dumps({{"seconds": seconds, "ok": bool(torch.equal(out, 3 * x)), "builds": lib.builds()}}))
"""


def _child(cache: Path) -> tuple[dict, str]:
    env = dict(os.environ)
    env["XKERNELS_CACHE_DIR"] = str(cache)
    env["SYCL_CACHE_PERSISTENT"] = "1"
    env["SYCL_CACHE_DIR"] = str(cache / "sycl")
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    prog = textwrap.dedent(_CHILD.format(src=SCALE_ADD))
    r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"child failed (rc={r.returncode}):\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _cache_files(cache: Path) -> dict:
    return {
        str(p.relative_to(cache)): p.stat().st_mtime_ns
        for p in cache.rglob("*")
        if p.is_file() and not p.name.endswith("_access_time.txt")
    }


def test_second_process_does_not_recompile(tmp_path):
    cold, cold_err = _child(tmp_path)
    files = _cache_files(tmp_path)
    assert any(f.endswith(".bin") for f in files), files
    assert "xkernels-manifest.txt" in {Path(f).name for f in files}  # the project's integrity manifest
    warm, warm_err = _child(tmp_path)
    assert cold["ok"] and warm["ok"]
    # the cold process compiled (and said so: it took more than a second), the warm one did not
    ((label, cold_s),) = cold["builds"]
    ((_, warm_s),) = warm["builds"]
    assert label.endswith("cache_probe.sycl [float32]")
    if cold_s > 1.5:
        assert "xkernels.sycl: compiling 'cache_probe.sycl' [float32] for cpu" in cold_err, cold_err
    assert "compiling" not in warm_err, warm_err
    assert _cache_files(tmp_path) == files  # the runtime wrote nothing new: nothing was compiled
    assert warm_s < 0.5 * cold_s, (cold, warm)


def test_custom_op_writing_an_argument():
    """A schema with Tensor(a!) makes an op that writes into its argument (mutates_args from the schema)."""
    lib = _lib()

    @xsycl.custom_op("xk_test::scale_add_(Tensor(a!) x, Tensor y, float alpha) -> ()")
    def scale_add_(x: torch.Tensor, y: torch.Tensor, alpha: float) -> None:
        torch._check(x.is_contiguous(), lambda: "xk_test::scale_add_: x must be contiguous (it is written)")
        n = x.numel()
        lib.scale_add[xsycl.round_up(n, LOCAL), LOCAL](x, y.contiguous(), x, alpha, n)

    @scale_add_.register_fake
    def _(x, y, alpha):
        return None

    x, y = torch.randn(100), torch.randn(100)
    expected = x + 0.5 * y
    torch.ops.xk_test.scale_add_(x, y, 0.5)
    torch.testing.assert_close(x, expected, rtol=tolerance(torch.float32)[0], atol=tolerance(torch.float32)[1])
    assert torch.ops.xk_test.scale_add_.default._schema.arguments[0].alias_info.is_write
    torch.library.opcheck(torch.ops.xk_test.scale_add_, (torch.randn(10), torch.randn(10), 2.0))

    def f(a, b):
        a = a * 1
        torch.ops.xk_test.scale_add_(a, b, 2.0)
        return a

    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(a, b), a + 2.0 * b)
