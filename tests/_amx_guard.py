"""The AMX guard, checked in a child process before the suite touches SYCL (tests/conftest.py).

Building a bf16 joint_matrix kernel for a compiler target without AMX aborts the process (SIGABRT, not an
exception; ../shared/SYCL_RUNTIME.md). xkernels builds one only where its guard (amx_status) says the target is in
force. If that guard were wrong, the first bf16 fused_linear_relu in the test process would kill the whole
suite; so on a CPU with AMX, conftest runs the AMX path once in a child first. If the child fails, the AMX
path is turned off for this test process (XKERNELS_SYCL_AMX=0) and
test_amx.py::test_the_amx_path_runs_in_a_child_process fails with the child's output.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import os
import torch
import xkernels
from xkernels import _C

on, why = _C.sycl.amx_status()
print("AMX-STATUS", on, why, flush=True)
if on:
    os.environ["XKERNELS_SYCL_GEMM_VARIANT"] = "amx"
    torch.manual_seed(0)
    x = torch.randn(20, 64).bfloat16()
    w = torch.randn(32, 64).bfloat16()
    b = torch.randn(32).bfloat16()
    with xkernels.use_backend("sycl"):
        y = xkernels.fused_linear_relu(x, w, b)
    ref = torch.relu(x.double() @ w.double().t() + b.double())
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 8e-3, f"AMX result off by {err}"
print("AMX-CHILD-OK", flush=True)
"""

# Set by check(): None (not run: the CPU has no AMX), or (ok, output of the child).
result: tuple[bool, str] | None = None


def cpu_has_amx() -> bool:
    from xkernels import _env

    return {"amx_bf16", "amx_tile"} <= _env.cpu_flags()


def run_child(env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str]:
    """Runs CHILD with `env` added to this process's environment; (exit code, stdout + stderr)."""
    full = dict(os.environ)
    full.update(env or {})
    try:
        r = subprocess.run([sys.executable, "-c", CHILD], env=full, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return -1, f"timed out after {timeout} s: {e.stdout or ''}{e.stderr or ''}"
    return r.returncode, r.stdout + r.stderr


def check() -> None:
    """conftest's pytest_configure: on a CPU with AMX, run the AMX path in a child; off for the suite if it fails."""
    global result
    if not cpu_has_amx() or os.environ.get("XKERNELS_SYCL_AMX") == "0":
        return
    code, out = run_child()
    ok = code == 0 and "AMX-CHILD-OK" in out
    result = (ok, f"exit code {code}\n{out[-3000:]}")
    if not ok:
        os.environ["XKERNELS_SYCL_AMX"] = "0"
