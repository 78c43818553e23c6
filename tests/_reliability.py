"""Shared helpers of the reliability tests (test_fuzz, test_hostile, test_threads, test_memory,
test_cache_robustness): which backends to run on, tensors with arbitrary layouts, and
subprocess runners that turn a crash into a test failure.

Every test iterates over the backends that are available here (xkernels.backends()), so a
backend lights up in these tests as soon as it is built and has a device.
"""
from __future__ import annotations

import contextlib
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
BACKEND_NAMES = ("reference", "sycl", "cuda")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def backend_device(name: str) -> torch.device:
    """The device whose tensors backend `name` runs on (reference and sycl: CPU tensors)."""
    return torch.device("cuda") if name == "cuda" else torch.device("cpu")


def backend_params() -> list:
    """pytest params, one per backend; unavailable ones are skipped with the reason."""
    status = xkernels.backends()
    params = []
    for name in BACKEND_NAMES:
        st = status[name]
        marks = [getattr(pytest.mark, name)] if name != "reference" else []
        if not st.available:
            marks.append(pytest.mark.skip(reason=f"backend '{name}' unavailable: {st.reason}"))
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def available_backends() -> list[str]:
    status = xkernels.backends()
    return [n for n in BACKEND_NAMES if status[n].available]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def supports(backend: str, dtype: torch.dtype) -> bool:
    """Can `backend` run ops in `dtype` on this machine (e.g. a SYCL device without fp64 cannot)?"""
    if backend == "sycl":
        return bool(xkernels._C.sycl.cpu_status(dtype_name(dtype))[0])
    return True


@contextlib.contextmanager
def on_backend(name: str):
    with xkernels.use_backend(name):
        yield backend_device(name)


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
    t = base[layout.offset:].view(padded) if numel else base[layout.offset:layout.offset].view(padded)
    t = t[tuple(slice(None, None, steps[p]) for p in perm)]
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    t = t.permute(inv)
    assert tuple(t.shape) == shape, (t.shape, shape)
    t.copy_(values)
    return t


# ---------------------------------------------------------------------------- float facts

# Unit roundoff of each dtype, and the dtype each accumulates in (README: half types in float32).
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
ACC_DTYPE = {torch.float64: torch.float64, torch.float32: torch.float32,
             torch.float16: torch.float32, torch.bfloat16: torch.float32}
# Largest integer up to which every integer is exactly representable (2^digits).
EXACT_INT_LIMIT = {torch.float64: 2**53, torch.float32: 2**24, torch.float16: 2**11, torch.bfloat16: 2**8}


def u_out(dtype) -> float:
    return UNIT_ROUNDOFF[dtype]


def u_acc(dtype) -> float:
    return UNIT_ROUNDOFF[ACC_DTYPE[dtype]]


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
        f"{name}: NaN pattern differs ({int(nan_a.sum())} NaN vs {int(nan_e.sum())} expected). {context}")
    fmax = torch.finfo(actual.dtype).max if actual.is_floating_point() else float("inf")
    may_overflow = (e.abs() + b) >= fmax
    overflowed = a.isinf() & may_overflow & ~e.isnan() & (a.sign() == e.sign())
    inf_e = e.isinf()
    assert torch.equal(a.isinf() & ~overflowed, inf_e & ~overflowed) and torch.equal(a[inf_e], e[inf_e]), (
        f"{name}: Inf pattern differs ({int(a.isinf().sum())} Inf vs {int(inf_e.sum())} expected). {context}")
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
            f"{context}")


# ---------------------------------------------------------------------------- subprocesses


def child_env(**extra) -> dict:
    env = dict(os.environ)
    # the caller's PYTHONPATH first: a sanitizer build (scripts/sanitize_check.sh) must win in children too
    env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), str(PACKAGE_PARENT), str(ROOT / "tests")]
                                        if p)
    env.setdefault("OMP_NUM_THREADS", "2")
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
    return env


def run_python(code: str, timeout: float = 300, env: dict | None = None, **popen) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter; a signal death shows up as a negative returncode."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env or child_env(), cwd=str(ROOT), **popen)


def describe_result(r: subprocess.CompletedProcess) -> str:
    how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit code {r.returncode}"
    return f"child {how}\n--- stdout ---\n{r.stdout[-4000:]}\n--- stderr ---\n{r.stderr[-4000:]}"


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# Long tests (a sanitizer build, > 2^31-element tensors) run only when asked for:
# XKERNELS_RUN_SLOW=1 (see docs/reliability.md). They also carry the `slow` marker.
RUN_SLOW = os.environ.get("XKERNELS_RUN_SLOW", "") == "1"


def slow_marks() -> list:
    return [pytest.mark.slow, pytest.mark.skipif(not RUN_SLOW, reason="long test: set XKERNELS_RUN_SLOW=1 to run it")]


# ---------------------------------------------------------------------------- ops not there yet
# A backend can be available while one of its ops is still missing (a branch in progress raises
# "... is not implemented yet"). Tests skip such (backend, op) pairs instead of failing on them.
NOT_IMPLEMENTED = "not implemented yet"
_implemented: dict = {}


def implemented(backend: str, op: str) -> bool:
    key = (backend, op)
    if key not in _implemented:
        dev = backend_device(backend)
        probes = {
            "fused_linear_relu": lambda: xkernels.fused_linear_relu(torch.ones(1, 2, device=dev),
                                                                    torch.ones(1, 2, device=dev)),
            "conv2d": lambda: xkernels.conv2d(torch.ones(1, 1, 2, 2, device=dev), torch.ones(1, 1, 1, 1, device=dev)),
            "layer_norm": lambda: xkernels.layer_norm(torch.ones(1, 2, device=dev), [2]),
        }
        try:
            with xkernels.use_backend(backend):
                probes[op]()
            _implemented[key] = True
        except RuntimeError as e:
            if NOT_IMPLEMENTED not in str(e):
                raise
            _implemented[key] = False
    return _implemented[key]


def require_op(backend: str, op: str) -> None:
    if not implemented(backend, op):
        pytest.skip(f"xkernels.{op} is not implemented on backend '{backend}' yet")
