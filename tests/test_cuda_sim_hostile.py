"""The hostile battery (tests/_hostile_cases.py: NaN, +-Inf, denormals, huge magnitudes, all-equal rows, eps 0
or negative) through the native CUDA kernels, executed on the CPU by the simulator of
csrc/cuda/compile_check/cpu_sim.h (tests/_cuda_sim.py): the kernels must give PyTorch's special values and
bounds, forward and backward, in every dtype, exactly as test_hostile.py demands of every backend on its
device. Needs no GPU, only the host C++ compiler and CUDA's headers (skipped with the reason without them).

conv2d_relu, which the shared battery does not exercise, gets a hostile case here (conv_relu_hostile: NaN /
Inf in input, weight, bias, residual and grad_output against torch.relu(F.conv2d(...) + residual)).

The simulated device is an H200 (132 SMs, sm_90: half / bfloat16 GEMMs on the WMMA kernel), and for half /
bfloat16 also a device without tensor cores (their SIMT GEMM). The cases run in a child process, so a simulator abort
fails the case that was running and the rest continue in a new child.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from xkernels.tolerances import DTYPES

import _cuda_sim
from _hostile_cases import (
    BOUND_SAFETY,
    CASES,
    INF,
    NAN,
    ClearError,
    _randn,
    _tiny,
    call,
    check_like_torch,
    ops,
    u_acc,
    u_out,
    use_ops,
)
from _reliability import child_env, describe_result, run_python

# name: (SM count, tensor cores). Without tensor cores only half / bfloat16 take another path (the SIMT GEMM).
DEVICES = {"h200": (132, True), "no_tensor_cores": (132, False)}


def dtypes_for(device: str) -> list[torch.dtype]:
    return list(DTYPES) if DEVICES[device][1] else [dt for dt in DTYPES if dt in (torch.float16, torch.bfloat16)]


def conv_relu_hostile(dev, dt):
    """conv2d_relu forward and backward (input, weight, bias, residual) vs torch.relu(F.conv2d + residual)."""
    x, w, b = _randn(2, 4, 5, 5), _randn(4, 2, 3, 3, seed=1), _randn(4, seed=2)
    r, dy = _randn(2, 4, 5, 5, seed=4), _randn(2, 4, 5, 5, seed=3)
    x[0, 1, 2, 3] = NAN
    w[1, 0, 0, 0] = NAN
    w[3, 1, 2, 2] = INF
    b[2] = -INF
    r[1, 0, 1, 1], r[0, 3, 4, 4], r[1, 1, 0, 0] = -INF, NAN, INF
    dy[1, 3, 2, 2], dy[0, 0, 0, 0] = NAN, NAN
    args = dict(padding=1, groups=2)
    cdt = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt

    def leaves(dtype):
        return [t.to(dt).to(dtype).requires_grad_(True) for t in (x, w, b, r)]

    ours = [t.to(dt).to(dev).requires_grad_(True) for t in (x, w, b, r)]
    out = call(ops().conv2d_relu, ours[0], ours[1], ours[2], ours[3], **args)
    ts_in, e_in = leaves(cdt), leaves(torch.float64)
    ts = torch.relu(F.conv2d(*ts_in[:3], **args) + ts_in[3])
    e = torch.relu(F.conv2d(*e_in[:3], **args) + e_in[3])
    a_in = [t.detach().abs().nan_to_num(0, 0, 0).requires_grad_(True) for t in e_in]
    absb = F.conv2d(*a_in[:3], **args) + a_in[3]
    n_red = w.shape[1] * w.shape[2] * w.shape[3]
    bound = 2 * u_out(dt) * e.detach().abs() + BOUND_SAFETY * (n_red + 3) * u_acc(dt) * absb.detach() + _tiny(dt)
    check_like_torch("conv2d_relu output", out, ts.to(dt), e, bound)
    dyt = dy.to(dt)
    grads = torch.autograd.grad(out, ours, dyt.to(dev))
    tgr = torch.autograd.grad(ts, ts_in, dyt.to(cdt))
    egr = torch.autograd.grad(e, e_in, dyt.double())
    agr = torch.autograd.grad(absb, a_in, dyt.double().abs().nan_to_num(0))
    n = max(n_red, e.numel())
    for i, (got, tg, eg, ag) in enumerate(zip(grads, tgr, egr, agr)):
        bnd = 2 * u_out(dt) * eg.abs() + BOUND_SAFETY * (n + 2) * u_acc(dt) * ag + _tiny(dt)
        check_like_torch(f"conv2d_relu grad[{i}]", got, tg.to(dt), eg, bnd)


SIM_CASES = {**CASES, "conv_relu_hostile": conv_relu_hostile}


def child_main(device: str, names: list[str]) -> None:
    """Runs the named cases for every dtype on the simulated `device`, one JSON line per result."""
    _cuda_sim.configure(*DEVICES[device])
    with use_ops(_cuda_sim.SimulatedCuda):
        for name in names:
            for dt in dtypes_for(device):
                key = f"{name}/{str(dt).removeprefix('torch.')}"
                print(json.dumps({"start": key}), flush=True)
                try:
                    SIM_CASES[name]("cpu", dt)
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
    todo = list(SIM_CASES)
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
@pytest.mark.parametrize("case", list(SIM_CASES))
def test_simulated_cuda_hostile(simulator, device, case):
    res = results_for(device)
    problems = [f"the child died before any case started: {res['?']['msg']}"] if "?" in res else []
    for dt in dtypes_for(device):
        key = f"{case}/{str(dt).removeprefix('torch.')}"
        got = res.get(key)
        if got is None:
            problems.append(f"{key}: no result (the child died before it ran)")
        elif got["status"] != "ok":
            problems.append(f"{key}: {got['status']}: {got.get('msg', '')}")
    assert not problems, "\n".join(problems)
