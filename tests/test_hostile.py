"""Hostile inputs: NaN, +-Inf, denormals, huge magnitudes, all-equal rows, eps 0 or negative, and
sizes above 2^31 elements. Every op (forward and backward) on every available backend must give
PyTorch's result -- the same NaN and Inf positions (and Inf signs) as PyTorch in the same dtype,
finite values within the float64 error bound -- or raise a clear xkernels error. Never a crash:
the cases run in child processes, so a crash (signal, abort) fails the case it happened in and
the remaining cases continue in a fresh child.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import xkernels
from xkernels.tolerances import DTYPES

import _backends
from _hostile_cases import CASES, ClearError
from _reliability import child_env, describe_result, mem_available_bytes, run_python, supports

pytestmark = pytest.mark.explicit_device  # cases run in child processes, on the backend's device

# The cases (inputs, checkers, bounds) live in _hostile_cases.py, shared with test_cuda_sim_hostile.py.


# ============================================================================ child process runner


def child_main(backend: str, names: list[str]) -> None:
    """Runs the named cases for every dtype in this process, one JSON line per result."""
    dev = _backends.device_of(backend)
    with xkernels.use_backend(backend):
        for name in names:
            for dt in DTYPES:
                key = f"{name}/{str(dt).removeprefix('torch.')}"
                print(json.dumps({"start": key}), flush=True)
                if not supports(backend, dt):
                    res = {"case": key, "status": "unsupported"}
                else:
                    try:
                        CASES[name](dev, dt)
                        res = {"case": key, "status": "ok"}
                    except ClearError as e:
                        res = {"case": key, "status": "clear_error", "msg": str(e)}
                    except BaseException as e:  # noqa: BLE001 - report everything to the parent
                        res = {"case": key, "status": "fail", "msg": f"{type(e).__name__}: {e}"}
                print(json.dumps(res), flush=True)


_results: dict[str, dict] = {}


def results_for(backend: str) -> dict:
    """All cases x dtypes for `backend`, run in children; a crashed child is recorded against the
    case that was running and the rest continue in a new child."""
    if backend in _results:
        return _results[backend]
    out: dict[str, dict] = {}
    todo = list(CASES)
    while todo:
        r = run_python(
            f"import test_hostile as h; h.child_main({str(backend)!r}, {todo!r})", timeout=900, env=child_env()
        )
        running = None
        for line in r.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                running = msg["start"]
            else:
                out[msg["case"]] = msg
                running = None
        crashed = None
        if running is not None or r.returncode != 0:
            crashed = running or "?"
            out[crashed] = {"case": crashed, "status": "crash", "msg": describe_result(r)}
        if crashed is None or crashed == "?":
            break  # finished, or the child died before any case started (recorded as '?'): no progress possible
        # go on after the case that crashed (its other dtypes are skipped: one crash report is enough)
        done = {k.split("/")[0] for k in out}
        todo = [n for n in todo if n not in done]
    _results[backend] = out
    return out


# Every (case, dtype) must give PyTorch's result ("ok") on every backend, except the ones listed here, which
# must raise exactly this xkernels error (its first line). A dtype the backend's device cannot compute in
# (_reliability.supports) must be refused as "unsupported" there.
REFUSED: dict[tuple[str, str], str] = {}


def expected_outcome(backend: str, case: str, dt: torch.dtype) -> tuple[str, str | None]:
    """(status, message) the child must report for `case` in `dt` on `backend`."""
    if not supports(backend, dt):
        return "unsupported", None
    key = (case, str(dt).removeprefix("torch."))
    if key in REFUSED:
        return "clear_error", REFUSED[key]
    return "ok", None


@pytest.mark.parametrize("case", list(CASES))
def test_hostile(backend, case):
    res = results_for(backend.name)
    problems = [f"a child died before any case started: {res['?']['msg']}"] if "?" in res else []
    for dt in DTYPES:
        key = f"{case}/{str(dt).removeprefix('torch.')}"
        got = res.get(key)
        if got is None:
            problems.append(f"{key}: no result (the child died before it ran)")
            continue
        status, msg = expected_outcome(backend.name, case, dt)
        if got["status"] != status or (msg is not None and got.get("msg") != msg):
            want = status if msg is None else f"{status}: {msg}"
            problems.append(f"{key}: expected {want}; got {got['status']}: {got.get('msg', '')}")
    assert not problems, "\n".join(problems)


# ============================================================================ > 2^31 elements


BIG_CHILD = r"""
import sys, torch, xkernels
backend, dev, op = sys.argv[1], torch.device(sys.argv[2]), sys.argv[3]
dt = torch.bfloat16
with xkernels.use_backend(backend):
    if op == "fused_linear_relu":
        # output [M, N] with M*N > 2^31; K = 1, small integers: every product is exact in bfloat16
        M, N = 65537, 32769
        x = ((torch.arange(M) % 7) - 3).to(dt).view(M, 1).to(dev)
        w = ((torch.arange(N) % 5) - 2).to(dt).view(N, 1).to(dev)
        y = xkernels.fused_linear_relu(x, w, None)
        assert y.shape == (M, N)
        # rows at the start, around the 2^31st element, and at the end
        r0 = (2**31) // N
        for r in (0, 1, r0 - 1, r0, r0 + 1, M - 2, M - 1):
            ref = torch.relu(x[r].cpu().float() * w.cpu().float().view(-1)).to(dt)
            assert torch.equal(y[r].cpu(), ref), f"row {r} wrong"
    elif op == "layer_norm":
        # one tensor of M*N > 2^31 elements; rows of small integers
        M, N = 2**20 + 3, 2049
        x = ((torch.arange(N) % 9) - 4).to(dt).view(1, N).expand(M, N).contiguous().to(dev)
        x[M - 1, 0] = 7
        y = xkernels.layer_norm(x, [N])
        # both sides rounded to bfloat16, |y| < 2: at most 1 ulp (2^-7) apart; the between-backends atol is 2
        from xkernels.tolerances import between_backends
        atol = between_backends(dt)[1]
        for r in (0, (2**31) // N, M - 2, M - 1):
            ref = torch.nn.functional.layer_norm(x[r].cpu().double(), [N]).to(dt)
            assert (y[r].cpu().double() - ref.double()).abs().max() <= atol, f"row {r} wrong"
    elif op == "conv2d":
        # input and output [1, 1, H, W] with H*W > 2^31; a 1x1 kernel of weight 2
        H, W = 65537, 32769
        x = ((torch.arange(W) % 5) - 2).to(dt).view(1, 1, 1, W).expand(1, 1, H, W).contiguous().to(dev)
        x[0, 0, H - 1, W - 1] = 3
        w = torch.full((1, 1, 1, 1), 2.0, dtype=dt, device=dev)
        y = xkernels.conv2d(x, w)
        for r in (0, (2**31) // W, H - 1):
            assert torch.equal(y[0, 0, r].cpu(), (2 * x[0, 0, r].cpu().float()).to(dt)), f"row {r} wrong"
print("OK")
"""

# Bytes of the big tensors each case holds at once (bfloat16): the output, plus the input for layer_norm
# and conv2d. Measured peak RSS of the child (/usr/bin/time): 8.8 GB for layer_norm and conv2d on both CPU
# backends, 12-27 s each on 2 cores.
BIG_NEED = {
    "fused_linear_relu": 2 * 65537 * 32769,
    "layer_norm": 2 * 2 * (2**20 + 3) * 2049,
    "conv2d": 2 * 2 * 65537 * 32769,
}
BIG_HEADROOM = 2**31  # torch, the SYCL runtime, the small reference rows


@pytest.mark.parametrize("op", ["fused_linear_relu", "layer_norm", "conv2d"])
def test_more_than_2_31_elements(backend, op):
    """int64 indexing: a result with more than 2^31 elements (bfloat16) is right at the start, around
    element 2^31 and at the end. Runs in a child; skipped when the machine lacks the memory."""
    _backends.skip_if_slow(backend, "a > 2^31-element problem takes too long there (int64 indexing is the same code)")
    need = BIG_NEED[op]
    if backend.device.type == "cuda":
        free = torch.cuda.mem_get_info()[0]
        if free < 2 * need:
            pytest.skip(f"needs {2 * need / 2**30:.1f} GiB free GPU memory, {free / 2**30:.1f} GiB free")
    avail = mem_available_bytes()
    if avail < need + BIG_HEADROOM:
        pytest.skip(
            f"needs ~{(need + BIG_HEADROOM) / 2**30:.1f} GiB available memory, {avail / 2**30:.1f} GiB available"
        )
    r = subprocess.run(
        [sys.executable, "-c", BIG_CHILD, backend.name, backend.device.type, op],
        capture_output=True,
        text=True,
        timeout=1200,
        env=child_env(),
    )
    assert r.returncode == 0 and "OK" in r.stdout, describe_result(r)
