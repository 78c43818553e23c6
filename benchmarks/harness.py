"""One harness for every provider: xkernels on each backend, torch eager, torch.compile (plain and
with freezing), on CPU tensors or (benchmarks/bench_cuda.py) CUDA tensors.

Rules (README "Benchmarks"): correctness is checked against a float64 oracle before any
timing, within the relative-to-torch error budget of xkernels.tolerances (PyTorch's own
same-dtype error on the case's inputs sets the scale); warm-up (and kernel compilation) is
excluded; providers are timed interleaved, round-robin, in one process, so machine noise hits
them alike; each provider gets `repeats` samples of a timed inner loop, timed by the case's
timer (wall clock, or CUDA events for GPU work); median and spread (IQR / median) are reported;
throughput comes from explicit FLOP or byte formulas given by each case.
"""

from __future__ import annotations

import csv
import datetime as _dt
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import xkernels
from xkernels.tolerances import within_budget

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CSV_FIELDS = [
    "timestamp",
    "commit",
    "op",
    "mode",
    "provider",
    "dtype",
    "shape",
    "metric",
    "unit",
    "median",
    "spread",
    "median_ms",
    "samples",
    "device",
    "isa",
    "torch",
    "xkernels",
    "sycl_runtime",
    "threads",
]


# ------------------------------------------------------------------------------------ timers
# A timer runs fn() n times and returns the seconds per call.


def wall_timer(fn: Callable[[], object], n: int) -> float:
    """Host wall clock (CPU work: the call returns when the work is done)."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def cuda_event_timer(fn: Callable[[], object], n: int) -> float:
    """CUDA events on the current stream around the n calls (asynchronous GPU work): the device time."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / n


@dataclass
class Case:
    op: str
    mode: str  # "fwd" or "fwd+bwd"
    dtype: torch.dtype
    shape: str  # printable shape key
    make_inputs: Callable[[], tuple]  # -> (args tuple, kwargs dict); tensors with requires_grad as needed
    oracle: Callable  # (args, kwargs) -> float64 output (forward)
    work: float  # FLOPs or bytes per call (for the metric)
    metric: str  # "GFLOP/s" or "GB/s"
    big: bool = False  # skip slow providers (the reference backend) on these
    torch_same: Callable | None = None  # (args, kwargs) -> PyTorch's own result in `dtype`: the error budget's
    # scale (None: PyTorch's error counts as 0, only the budget's floor)
    timer: Callable[[Callable[[], object], int], float] = wall_timer


@dataclass
class Provider:
    name: str
    fn: Callable  # (op, args, kwargs) -> output
    available: bool = True
    reason: str = ""
    handles_big: bool = True
    setup: Callable | None = None  # context manager factory entered around calls
    extra: dict = field(default_factory=dict)
    ops: frozenset | None = None  # the ops this provider runs (None: every op)
    checked: bool = True  # False: a baseline that computes something else (e.g. a plain copy
    # for the copy bandwidth), timed on the same inputs but not checked
    modes: frozenset | None = None  # the modes ("fwd", "fwd+bwd") this provider runs (None: every mode)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=8"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=True,
        ).stdout.strip()
    except Exception:
        return "unknown"


def device_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def cpu_isa() -> str:
    """The host CPU's vector ISA as the docs name it (the CSVs' "isa" column): "AVX2", "AVX-512 + AVX512-BF16",
    "AVX-512 + AVX512-BF16 + AMX", ... ("" where /proc/cpuinfo is unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    base = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    extras = [name for flag, name in (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX")) if flag in flags]
    return " + ".join([base, *extras])


def provenance(device: str | None = None) -> dict:
    info = xkernels.info()
    return {
        "commit": _commit(),
        "device": device or device_name(),
        "isa": cpu_isa(),
        "torch": torch.__version__,
        "xkernels": xkernels.__version__,
        "sycl_runtime": info.get("sycl", {}).get("runtime", ""),
        "threads": str(torch.get_num_threads()),
    }


def _run(provider: Provider, case: Case, args, kwargs, backward: bool):
    out = provider.fn(case.op, args, kwargs)
    if backward:
        out.sum().backward() if out.requires_grad else None
    return out


def _clear_grads(args):
    for a in args:
        if isinstance(a, torch.Tensor) and a.grad is not None:
            a.grad = None


def time_case(case: Case, providers: list[Provider], repeats: int, min_time: float, log=print) -> list[dict]:
    """Checks every provider, then times them interleaved. Returns one row per provider."""
    args, kwargs = case.make_inputs()
    ref = case.oracle(args, kwargs)
    if case.torch_same is not None:
        with torch.no_grad():
            torch_same = case.torch_same(args, kwargs)
    else:
        torch_same = None
    backward = case.mode == "fwd+bwd"
    timer = case.timer
    live: list[Provider] = []
    rows = []
    warm_s: dict[str, float] = {}
    for p in providers:
        if (
            not p.available
            or (case.big and not p.handles_big)
            or (p.ops is not None and case.op not in p.ops)
            or (p.modes is not None and case.mode not in p.modes)
        ):
            continue
        try:
            outs = []
            # warm-up: compiles kernels / traces graphs
            warm_s[p.name] = timer(lambda p=p: outs.append(_run(p, case, args, kwargs, backward)), 1)
            _clear_grads(args)
            ok, err, allowed = within_budget(outs[0].detach(), torch_same, ref, case.dtype)
        except Exception as e:  # a provider that cannot run this case is reported, not timed
            log(f"    {p.name:22s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        if p.checked and not ok:
            raise AssertionError(
                f"{case.op} {case.shape} {case.dtype} {p.name}: max error {err:.3g} exceeds the "
                f"budget {allowed:.3g}; refusing to time a wrong result"
            )
        live.append(p)
    if not live:
        return rows
    # Inner-loop length per provider so each sample lasts >= min_time / repeats.
    # A warm-up call that already took longer than one sample needs no calibration call: one call per sample
    # (the warm-up can only overestimate a call's time), which saves a call per provider in the large cases.
    inner, est = {}, {}
    for p in live:
        if warm_s[p.name] >= min_time / repeats:
            inner[p.name], est[p.name] = 1, warm_s[p.name]
            continue
        dt = max(timer(lambda p=p: _run(p, case, args, kwargs, backward), 1), 1e-7)
        inner[p.name], est[p.name] = max(1, int((min_time / repeats) / dt)), dt
    # Cases where one call already exceeds the whole timing budget get 3 samples (median and spread still
    # defined); the large GEMMs / convolutions dominated the standard suite's time otherwise.
    # (min over providers: torch.compile's warm-up includes its compilation).
    if min(est.values()) > min_time:
        repeats = min(repeats, 3)
    samples: dict[str, list[float]] = {p.name: [] for p in live}
    for _ in range(repeats):
        for p in live:  # round-robin: every provider sees the same machine state
            _clear_grads(args)
            samples[p.name].append(timer(lambda p=p: _run(p, case, args, kwargs, backward), inner[p.name]))
    for p in live:
        s = sorted(samples[p.name])
        med = statistics.median(s)
        q1, q3 = (s[len(s) // 4], s[(3 * len(s)) // 4]) if len(s) >= 4 else (s[0], s[-1])
        value = case.work / med / 1e9
        rows.append(
            {
                "op": case.op,
                "mode": case.mode,
                "provider": p.name,
                "dtype": str(case.dtype).replace("torch.", ""),
                "shape": case.shape,
                "metric": case.metric.split("/")[0].lower() + "_per_s",
                "unit": case.metric,
                "median": f"{value:.3f}",
                "spread": f"{(q3 - q1) / med:.3f}",
                "median_ms": f"{med * 1e3:.4f}",
                "samples": len(s),
            }
        )
    return rows


def open_for_append(path: Path, fields: list[str]):
    """`path` opened for appending rows with `fields`, the header written if the file is new. A file written
    before a field existed is rewritten first with the current header (its old rows get that field empty), so
    every row of a file lines up with one header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            old_fields, old_rows = reader.fieldnames or [], list(reader)
        if old_fields != fields:
            unknown = set(old_fields) - set(fields)
            if unknown:
                raise ValueError(f"{path}: columns {sorted(unknown)} are not among the fields written now")
            with path.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields)
                w.writeheader()
                w.writerows(old_rows)
    new = not path.exists()
    f = path.open("a", newline="")
    w = csv.DictWriter(f, fieldnames=fields)
    if new:
        w.writeheader()
    return f, w


def append_csv(rows: list[dict], path: Path, prov: dict) -> None:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    f, w = open_for_append(path, CSV_FIELDS)
    with f:
        for r in rows:
            w.writerow({"timestamp": stamp, **prov, **r})


def env_summary() -> str:
    keys = ["OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "CL_CONFIG_CPU_TBB_NUM_WORKERS", "XKERNELS_BACKEND"]
    return ", ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ) or "(defaults)"
