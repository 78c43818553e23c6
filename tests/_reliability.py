"""Shared helpers of the reliability tests (test_fuzz, test_hostile, test_threads, test_memory,
test_cache_robustness): dtype support per backend, tensors with arbitrary layouts, an
elementwise error-bound check, and subprocess runners that turn a crash into a test failure.
The backends come from the `backend` fixture (tests/conftest.py, tests/_backends.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import xkernels

ROOT = Path(__file__).resolve().parents[1]
# The directory holding the xkernels package this process uses: the source tree's python/ after an
# in-place build, site-packages after `pip install .` (CI). Children must import the same one.
PACKAGE_PARENT = Path(xkernels.__file__).resolve().parent.parent


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def supports(backend: str, dtype: torch.dtype) -> bool:
    """Can `backend` run ops in `dtype` on this machine (e.g. a SYCL device without fp64 cannot)?"""
    if backend == "sycl":
        return bool(xkernels._C.sycl.cpu_status(dtype_name(dtype))[0])
    return True


# ---------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """How a tensor of a given logical shape sits in memory.

    perm: storage order of the logical dims (outermost first); identity = contiguous,
          (0, 2, 3, 1) for a 4-D tensor = channels_last.
    steps: per logical dim, the element step inside the padded storage (2 = every other element).
    offset: storage offset in elements.
    expand_dim: a logical dim stored with stride 0 (values repeat along it), or None.
    """

    perm: tuple = ()
    steps: tuple = ()
    offset: int = 0
    expand_dim: int | None = None

    def describe(self) -> str:
        return f"Layout(perm={self.perm}, steps={self.steps}, offset={self.offset}, expand_dim={self.expand_dim})"


def effective_values(values: torch.Tensor, layout: Layout | None) -> torch.Tensor:
    """The values a tensor placed with `layout` holds: with an expanded (stride-0) dim, the first
    slice repeated along it. Use these as the truth when checking results."""
    if layout is None or layout.expand_dim is None or values.dim() == 0 or values.shape[layout.expand_dim] <= 1:
        return values
    return values.narrow(layout.expand_dim, 0, 1).expand(values.shape).contiguous()


def place(values: torch.Tensor, layout: Layout | None, device) -> torch.Tensor:
    """A tensor equal to `values` (any device/layout) laid out on `device` as `layout` says."""
    if layout is None:
        return values.to(device).contiguous()
    nd = values.dim()
    perm = layout.perm or tuple(range(nd))
    steps = layout.steps or (1,) * nd
    shape = tuple(values.shape)
    if layout.expand_dim is not None and nd > 0 and shape[layout.expand_dim] > 1:
        d = layout.expand_dim
        one = values.narrow(d, 0, 1)
        small = place(one, Layout(perm, steps, layout.offset, None), device)
        return small.expand(shape)
    padded = [shape[p] * steps[p] for p in perm]
    numel = 1
    for s in padded:
        numel *= s
    base = torch.full((layout.offset + numel,), float("nan"), dtype=values.dtype, device=device)
    t = base[layout.offset :].view(padded) if numel else base[layout.offset : layout.offset].view(padded)
    t = t[tuple(slice(None, None, steps[p]) for p in perm)]
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    t = t.permute(inv)
    assert tuple(t.shape) == shape, (t.shape, shape)
    t.copy_(values)
    return t


# ---------------------------------------------------------------------------- error bounds


def assert_within(name: str, actual: torch.Tensor, expected64: torch.Tensor, bound: torch.Tensor, context: str = ""):
    """|actual - expected| <= bound elementwise (compared in float64 on the CPU). NaN and Inf must
    match exactly; where the expected value (plus its bound) lies beyond the largest finite value of
    actual's dtype, overflow to Inf of the same sign is also correct."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected64.detach().to("cpu", torch.float64)
    assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != expected {tuple(e.shape)}. {context}"
    b = bound.detach().to("cpu", torch.float64).expand(e.shape)
    nan_a, nan_e = a.isnan(), e.isnan()
    assert torch.equal(nan_a, nan_e), (
        f"{name}: NaN pattern differs ({int(nan_a.sum())} NaN vs {int(nan_e.sum())} expected). {context}"
    )
    fmax = torch.finfo(actual.dtype).max if actual.is_floating_point() else float("inf")
    may_overflow = (e.abs() + b) >= fmax
    overflowed = a.isinf() & may_overflow & ~e.isnan() & (a.sign() == e.sign())
    inf_e = e.isinf()
    assert torch.equal(a.isinf() & ~overflowed, inf_e & ~overflowed) and torch.equal(a[inf_e], e[inf_e]), (
        f"{name}: Inf pattern differs ({int(a.isinf().sum())} Inf vs {int(inf_e.sum())} expected). {context}"
    )
    fin = ~(nan_e | inf_e | overflowed)
    err = (a - e).abs()[fin]
    b = b[fin]
    bad = err > b
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        ratio = float((err / b.clamp_min(1e-300)).max())
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {err.numel()} elements outside the error bound (worst err/bound = "
            f"{ratio:.3g}); e.g. got {float(a[fin][i])!r}, expected {float(e[fin][i])!r}, bound {float(b[i])!r}. "
            f"{context}"
        )


# ---------------------------------------------------------------------------- subprocesses


def child_env(**extra) -> dict:
    env = dict(os.environ)
    # the caller's PYTHONPATH first: a sanitizer build (scripts/sanitize_check.sh) must win in children too
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [env.get("PYTHONPATH", ""), str(PACKAGE_PARENT), str(ROOT / "tests")] if p
    )
    env.setdefault("OMP_NUM_THREADS", "2")
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
    return env


def run_python(code: str, timeout: float = 300, env: dict | None = None, **popen) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter; a signal death shows up as a negative returncode."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        cwd=str(ROOT),
        **popen,
    )


def describe_result(r: subprocess.CompletedProcess) -> str:
    how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit code {r.returncode}"
    return f"child {how}\n--- stdout ---\n{r.stdout[-4000:]}\n--- stderr ---\n{r.stderr[-4000:]}"


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# Long tests (a sanitizer build, > 2^31-element tensors) run only when asked for:
# XKERNELS_RUN_SLOW=1 (see docs/reliability.md). They also carry the `slow` marker.
RUN_SLOW = os.environ.get("XKERNELS_RUN_SLOW", "") == "1"


def slow_marks() -> list:
    return [pytest.mark.slow, pytest.mark.skipif(not RUN_SLOW, reason="long test: set XKERNELS_RUN_SLOW=1 to run it")]
