"""The hostile battery (tests/_hostile_cases.py: NaN, +-Inf, denormals, huge magnitudes, all-equal rows, eps 0
or negative) through the native CUDA kernels, executed on the CPU by the simulator of
csrc/cuda/compile_check/cpu_sim.h (tests/_cuda_sim.py): the kernels must give PyTorch's special values and
bounds, forward and backward, in every dtype, exactly as test_hostile.py demands of every backend on its
device. Needs no GPU, only the host C++ compiler and CUDA's headers (skipped with the reason without them).

The simulated device is an H200 (132 SMs, sm_90: half / bfloat16 GEMMs on the WMMA kernel), and a device
without tensor cores (the SIMT GEMM for every dtype). The cases run in a child process, so a simulator abort
fails the case that was running and the rest continue in a new child.
"""

from __future__ import annotations

import json

import pytest

from xkernels.tolerances import DTYPES

import _cuda_sim
from _hostile_cases import CASES, ClearError, use_ops
from _reliability import child_env, describe_result, run_python

DEVICES = {"h200": (132, True), "no_tensor_cores": (132, False)}


def child_main(device: str, names: list[str]) -> None:
    """Runs the named cases for every dtype on the simulated `device`, one JSON line per result."""
    _cuda_sim.configure(*DEVICES[device])
    with use_ops(_cuda_sim.SimulatedCuda):
        for name in names:
            for dt in DTYPES:
                key = f"{name}/{str(dt).removeprefix('torch.')}"
                print(json.dumps({"start": key}), flush=True)
                try:
                    CASES[name]("cpu", dt)
                    res = {"case": key, "status": "ok"}
                except ClearError as e:
                    res = {"case": key, "status": "clear_error", "msg": str(e)}
                except BaseException as e:  # noqa: BLE001 - report everything to the parent
                    res = {"case": key, "status": "fail", "msg": f"{type(e).__name__}: {e}"}
                print(json.dumps(res), flush=True)


_results: dict[str, dict] = {}


@pytest.fixture(scope="module")
def simulator():
    if _cuda_sim.cuda_include_dir() is None:
        pytest.skip("CUDA headers (cuda_runtime.h) not found (CUDA_HOME, nvcc, /usr/local/cuda): simulator not built")
    _cuda_sim.build()  # once, here, so a compile error is reported as such


def results_for(device: str) -> dict:
    if device in _results:
        return _results[device]
    out: dict[str, dict] = {}
    todo = list(CASES)
    while todo:
        r = run_python(
            f"import test_cuda_sim_hostile as t; t.child_main({device!r}, {todo!r})", timeout=900, env=child_env()
        )
        running = None
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                msg = json.loads(line)
                if "start" in msg:
                    running = msg["start"]
                else:
                    out[msg["case"]] = msg
                    running = None
        if running is None and r.returncode == 0:
            break
        crashed = running or "?"
        out[crashed] = {"case": crashed, "status": "crash", "msg": describe_result(r)}
        if crashed == "?":
            break
        done = {k.split("/")[0] for k in out}
        todo = [n for n in todo if n not in done]
    _results[device] = out
    return out


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("case", list(CASES))
def test_simulated_cuda_hostile(simulator, device, case):
    res = results_for(device)
    problems = [f"the child died before any case started: {res['?']['msg']}"] if "?" in res else []
    for dt in DTYPES:
        key = f"{case}/{str(dt).removeprefix('torch.')}"
        got = res.get(key)
        if got is None:
            problems.append(f"{key}: no result (the child died before it ran)")
        elif got["status"] != "ok":
            problems.append(f"{key}: {got['status']}: {got.get('msg', '')}")
    assert not problems, "\n".join(problems)
