"""`python -m xkernels ...` as a user runs it: one subprocess per command, checking the
output and the exit status, including failing cases."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import xkernels
from xkernels.__main__ import main

PKG_ROOT = str(Path(xkernels.__file__).resolve().parent.parent)  # the directory holding the package


def run(*args, cwd=None, env_extra=None, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("FORCE_COLOR", None)
    env["COLUMNS"] = "200"
    env.update(env_extra or {})
    p = subprocess.run(
        [sys.executable, "-m", "xkernels", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )
    return p.returncode, p.stdout + p.stderr


def test_check_passes_and_prints_environment_backends_and_table(tmp_path):
    out_json = tmp_path / "check.json"
    rc, out = run("check", "--quick", "--dtypes", "float32,bfloat16", "--json", str(out_json))
    assert rc == 0, out
    _assert_environment(out)
    backends = xkernels.parity.backends_for_device("cpu")
    ops = ("fused_linear_relu", "conv2d", "layer_norm")
    for op in ops:  # plain progress lines, one per op (not a bar)
        assert re.search(rf"^  {op}: 2 done in [\d.]+ s \[\d/6\]$", out, re.M), out
    for dtype in ("float32", "bfloat16"):  # one summary row per op, dtype and backend, each within budget
        for b in backends:
            rows = re.findall(rf"^│ .*│ {dtype}\s+│ {b}\s+│.*│ (\S+)\s+│$", out, re.M)
            assert rows == ["ok"] * len(ops), (dtype, b, rows, out)
    n = len(ops) * 2 * len(backends)
    assert re.search(rf"^OK: {n} backend checks within the error budget \([\d.]+ s\)$", out, re.M), out
    calls = 2 * len(ops) * 2  # forward and backward, two dtypes
    record = "; ".join(f"under {b}: {calls} op calls ran on {b}" for b in backends)
    assert re.search(rf"^dispatch record: {record}$", out, re.M), out
    assert re.search(r"^fallbacks: none$", out, re.M), out
    assert "\x1b[" not in out  # no terminal escape codes in logs
    doc = json.loads(out_json.read_text())
    assert doc["passed"] is True and len(doc["reports"]) == 3 * 2
    assert {r["dtype"] for r in doc["reports"]} == {"float32", "bfloat16"}
    assert doc["environment"]["xkernels"] == xkernels.__version__
    assert set(doc["budgets"]) == {"float64", "float32", "float16", "bfloat16"}


def test_default_command_is_check_and_failure_exits_nonzero():
    # A zero budget demands bit-exact agreement with float64: float16 cannot, so it must fail.
    rc, out = run("--quick", "--ops", "layer_norm", "--dtypes", "float16", "--budget-scale", "0")
    assert rc == 1, out
    backends = xkernels.parity.backends_for_device("cpu")
    assert re.search(r"^op parity on cpu vs float64 oracle \(budget scale 0\)", out, re.M), out
    for b in backends:
        assert re.search(
            rf"^│   6x40, affine │ float16 │ {b}\s+│.*│ FAIL output,grad_input,grad_weight,grad_bias │$", out, re.M
        ), out
    n = len(backends)
    assert re.search(rf"^FAILED: {n} of {n} backend checks outside the error budget", out, re.M), out


# Usage errors are decided before any work starts: checked in process (fast), through main().


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["check", "--budget-scale", "-1"], "must be >= 0"),
        (["bogus-command"], "invalid choice"),
        (["cache", "wipe"], "invalid choice"),
    ],
)
def test_argument_errors_exit_2(capsys, argv, msg):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert msg in capsys.readouterr().err


def test_info_text_and_json():
    rc, out = run("info")
    assert rc == 0, out
    _assert_environment(out)
    if xkernels._C.with_sycl and any(d.get("usable") for d in xkernels._C.sycl.devices()):
        assert "SYCL kernel provider (per device)" in out  # where each device's kernels come from
    rc, out = run("info", "--json")
    assert rc == 0, out
    doc = json.loads(out)
    assert doc["xkernels"] == xkernels.__version__
    assert set(doc["backends"]) == set(xkernels.backends())
    assert doc["backends"]["reference"]["available"] is True
    assert {"dir", "bytes"} <= set(doc["cache"]) and "build_config" in doc and "python" in doc


def _assert_environment(out: str) -> None:
    """The environment header of check / info: versions, build line, cache directory, and one row per backend
    saying whether it is built and available."""
    assert re.search(
        rf"^xkernels\s+{re.escape(xkernels.__version__)}\s+torch {re.escape(torch.__version__)}\s", out, re.M
    ), out
    assert re.search(rf"^build\s+torch={re.escape(torch.__version__.split('+')[0])} sycl=", out, re.M), out
    assert re.search(rf"^cache\s+{re.escape(str(xkernels.info()['cache']['dir']))} ", out, re.M), out
    if xkernels._C.with_sycl:
        assert re.search(r"^SYCL runtime\s+\S+\s+kernel provider: ", out, re.M), out
    yes = {True: "yes", False: "no"}
    for name, st in xkernels.backends().items():
        assert re.search(rf"^│ {name}\s+│ {yes[st.built]}\s+│ {yes[st.available]}\s+│", out, re.M), (name, out)


FACTORY = textwrap.dedent('''
    import torch
    from torch import nn
    import xkernels

    class Misbehaving(nn.Module):
        """Doubles its input, slightly wrongly under the reference backend in float32 only."""
        def forward(self, x):
            y = x * 2
            if xkernels.current_backend() == "reference" and y.dtype == torch.float32:
                y = y + 1e-2
            return y

    def _base():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 4))

    def good():
        return _base(), torch.randn(5, 8)

    def bad():
        m = _base()
        m.insert(2, Misbehaving())
        return m, torch.randn(5, 8)

    def not_a_pair():
        return 42
''')


@pytest.fixture
def factory_file(tmp_path):
    p = tmp_path / "factories.py"
    p.write_text(FACTORY)
    return p


def test_parity_good_factory_with_optimize(factory_file, tmp_path):
    rc, out = run("parity", f"{factory_file}:good", "--optimize", "--json", str(tmp_path / "p.json"))
    assert rc == 0, out
    assert "optimize(): 2 replacement(s)" in out and "Linear+ReLU -> FusedLinearReLU" in out
    assert "model parity" in out and "reference" in out and "OK:" in out
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["passed"] is True
    ref = next(r for r in doc["results"] if r["backend"] == "reference")
    assert {e["op"] for e in ref["dispatch"]} >= {"fused_linear_relu", "layer_norm"}


def test_parity_bad_factory_points_at_the_module(factory_file):
    # Imported as a module from the working directory, the other accepted form of MODULE:FACTORY.
    rc, out = run("parity", "factories:bad", "--optimize", "--details", "all", cwd=factory_file.parent)
    assert rc == 1, out
    assert "FAILED" in out and "first divergence at 2 (Misbehaving) (forward)" in out
    assert "<- first" in out  # the module table marks it
    assert "dispatch record: reference" in out


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("no_colon_here", "expected MODULE:FACTORY"),
        ("/nonexistent/dir/f.py:make", "factory file not found"),
        ("xkernels_no_such_module:make", "could not import 'xkernels_no_such_module'"),
        ("FILE:missing", "has no callable 'missing'"),
        ("FILE:not_a_pair", "must return (model, inputs)"),
    ],
)
def test_parity_usage_errors(capsys, factory_file, spec, msg):
    rc = main(["parity", spec.replace("FILE", str(factory_file))])
    out = capsys.readouterr().out
    assert rc == 2, out
    assert msg in " ".join(out.split())


def test_warmup():
    rc, out = run("warmup", timeout=600)
    assert rc == 0, out
    if xkernels.backends()["sycl"].available:
        assert "compiled kernels" in out
    else:
        assert "nothing to compile" in out


def test_cache_info_and_clear(tmp_path):
    cache = tmp_path / "cache"
    (cache / "sycl" / "a").mkdir(parents=True)
    (cache / "sycl" / "a" / "k.bin").write_bytes(b"x" * 2048)
    (cache / "top.txt").write_text("y")
    env = {"XKERNELS_CACHE_DIR": str(cache)}
    rc, out = run("cache", "info", env_extra=env)
    assert rc == 0 and str(cache) in out and "2 files" in out
    rc, out = run("cache", "clear", env_extra=env)
    assert rc == 0 and "removed 2 files" in out
    assert cache.exists() and not any(cache.iterdir())
    rc, out = run("cache", "clear", env_extra={"XKERNELS_CACHE_DIR": str(tmp_path / "never")})
    assert rc == 0 and "already empty" in out
