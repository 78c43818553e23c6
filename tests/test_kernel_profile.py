"""The SYCL kernel profiler (_C.sycl.set_kernel_profiling / kernel_profile, csrc/sycl/launch.h) and
scripts/kernel_profile.py: rows appear only while it is on, name the kernels that ran with their launch counts,
reset clears them, and the results computed under it are still right (it waits for each kernel, nothing else).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from xkernels import _C
from xkernels.tolerances import assert_close

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sycl_cpu(backend):
    if backend.name not in ("sycl", "acpp") or backend.device.type != "cpu":
        pytest.skip(f"the kernel profiler counts SYCL launches; this is '{backend.name}'")
    return backend


@pytest.fixture
def profiler():
    sycl = _C.sycl
    sycl.set_kernel_profiling(False)
    sycl.kernel_profile(reset=True)
    yield sycl
    sycl.set_kernel_profiling(False)
    sycl.kernel_profile(reset=True)


def _linear(x, w, b):
    return torch.ops.xkernels.fused_linear_relu(x, w, b)


def test_rows_only_while_on_and_results_unchanged(sycl_cpu, profiler):
    x, w, b = torch.randn(40, 96), torch.randn(72, 96), torch.randn(72)
    _linear(x, w, b)  # compiled before profiling
    assert profiler.kernel_profile() == {}, "profiling is off: no rows"

    profiler.set_kernel_profiling(True)
    out = _linear(x, w, b)
    out = _linear(x, w, b)
    ln = torch.ops.xkernels.layer_norm(x, [96], None, None, 1e-5)
    profiler.set_kernel_profiling(False)

    assert_close(out, torch.relu(x.double() @ w.double().T + b.double()), torch.float32, "fused_linear_relu", terms=96)
    assert_close(ln, torch.nn.functional.layer_norm(x.double(), [96]), torch.float32, "layer_norm", terms=96)
    rows = profiler.kernel_profile()
    linear = {k: v for k, v in rows.items() if k.startswith("linear_") and k.endswith("<float>")}
    assert linear, f"no fused_linear_relu kernel row: {sorted(rows)}"
    assert all(n % 2 == 0 and n >= 2 for n, _ in linear.values()), f"two calls, same kernels each time: {linear}"
    assert all(s > 0 for _, s in rows.values()), rows
    assert any(k.startswith("layer_norm") for k in rows), f"no layer_norm row: {sorted(rows)}"

    _linear(x, w, b)  # off again: counts stay
    assert profiler.kernel_profile(reset=True) == rows
    assert profiler.kernel_profile() == {}, "reset=True clears the rows"


def test_script_prints_a_row_per_kernel(capsys):
    if not (_C.with_sycl and _C.sycl.cpu_status("float32")[0]):
        pytest.skip("scripts/kernel_profile.py runs the sycl backend's CPU device, which is unavailable")
    spec = importlib.util.spec_from_file_location("kernel_profile", ROOT / "scripts" / "kernel_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--model", "mlp", "--mode", "infer", "--batch", "8", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "ms in SYCL kernels" in out and "linear_" in out, out
    assert not _C.sycl.kernel_profile(), "the script turns profiling off and clears its rows"
