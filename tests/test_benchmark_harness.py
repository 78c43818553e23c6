"""The benchmark harness (benchmarks/harness.py) refuses to time a wrong result, reports every provider it
timed with a median and spread in the case's unit, and never times an unavailable provider or one that does not
run the op. Cheap synthetic cases only: no timing claims are made here (speed is measured by the suite)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import csv  # noqa: E402

from benchmarks.harness import CSV_FIELDS, Case, Provider, append_csv, cpu_isa, provenance, time_case  # noqa: E402


def _case(mode="fwd"):
    def make():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 32, generator=g, requires_grad=mode == "fwd+bwd")
        return (x,), {}

    return Case(
        "relu",
        mode,
        torch.float32,
        "64x32",
        make,
        lambda a, k: torch.relu(a[0].detach().double()),
        work=64 * 32 * 8.0,
        metric="GB/s",
    )


def _prov(name, fn, **kw):
    return Provider(name, lambda op, args, kwargs: fn(*args), **kw)


def test_rows_for_each_timed_provider():
    rows = time_case(
        _case(),
        [_prov("good", torch.relu), _prov("also", lambda x: x.clamp_min(0))],
        repeats=3,
        min_time=0.01,
        log=lambda *a: None,
    )
    assert [r["provider"] for r in rows] == ["good", "also"]
    for r in rows:
        assert float(r["median"]) > 0 and float(r["spread"]) >= 0 and r["samples"] == 3
        assert r["unit"] == "GB/s" and r["metric"] == "gb_per_s" and r["op"] == "relu"


def test_wrong_result_is_refused():
    with pytest.raises(AssertionError, match="refusing to time a wrong result"):
        time_case(
            _case(), [_prov("wrong", lambda x: torch.relu(x) * 1.01)], repeats=3, min_time=0.01, log=lambda *a: None
        )


def test_unchecked_baseline_and_skipped_providers():
    logged = []
    rows = time_case(
        _case(),
        [
            _prov("copy", lambda x: x.clone(), checked=False),  # timed, not checked
            _prov("gone", torch.relu, available=False, reason="not installed"),  # never called
            _prov("other_op", torch.relu, ops=frozenset({"conv2d"})),  # does not run this op
            _prov("broken", lambda x: (_ for _ in ()).throw(RuntimeError("no kernel"))),  # reported, not timed
        ],
        repeats=3,
        min_time=0.01,
        log=logged.append,
    )
    assert [r["provider"] for r in rows] == ["copy"]
    assert any("broken" in line and "no kernel" in line for line in logged)


def test_backward_mode_runs_backward_and_clears_grads():
    calls = []

    def relu(x):
        calls.append(x.requires_grad)
        return torch.relu(x)

    rows = time_case(_case("fwd+bwd"), [_prov("p", relu)], repeats=3, min_time=0.01, log=lambda *a: None)
    assert rows and all(calls)


def test_budget_is_relative_to_torchs_own_error():
    """With PyTorch's own same-dtype result given, a provider may be a few times PyTorch's error: a result
    as far off as PyTorch passes, ten times PyTorch's error does not."""
    torch_like = lambda x: (torch.relu(x.double()) * (1 + 1e-3)).float()  # noqa: E731 - "PyTorch" off by 1e-3
    case = _case()
    case.torch_same = lambda a, k: torch_like(a[0])
    rows = time_case(case, [_prov("as_torch", torch_like)], repeats=3, min_time=0.01, log=lambda *a: None)
    assert [r["provider"] for r in rows] == ["as_torch"]
    with pytest.raises(AssertionError, match="refusing to time a wrong result"):
        time_case(
            case,
            [_prov("ten_times", lambda x: (torch.relu(x.double()) * (1 + 1e-2)).float())],
            repeats=3,
            min_time=0.01,
            log=lambda *a: None,
        )


def test_case_timer_is_used():
    """Every timed sample comes from the case's timer (CUDA events for GPU cases)."""
    calls = []

    def timer(fn, n):
        calls.append(n)
        for _ in range(n):
            fn()
        return 1e-3

    case = _case()
    case.timer = timer
    rows = time_case(case, [_prov("p", torch.relu)], repeats=3, min_time=0.01, log=lambda *a: None)
    assert rows[0]["median_ms"] == "1.0000" and len(calls) >= 1 + 3


def test_bench_cuda_imports_and_skips_without_cuda(tmp_path, capsys):
    import xkernels
    from benchmarks import bench_cuda

    cases = bench_cuda.build_cases(quick=True, dtypes=[torch.float32])  # built lazily: no tensor made yet
    assert {c.op for c in cases} == {"fused_linear_relu", "layer_norm", "conv2d"}
    assert all(c.timer.__name__ == "cuda_event_timer" for c in cases)
    if xkernels.backends()["cuda"].available:
        pytest.skip("CUDA is available here: bench_cuda would run")
    assert bench_cuda.main(["--csv", str(tmp_path / "out.csv")]) == 0
    assert "bench_cuda: skipped: the native CUDA backend is unavailable" in capsys.readouterr().out
    assert not (tmp_path / "out.csv").exists()


def test_rows_carry_the_isa_and_old_csvs_get_the_column(tmp_path):
    isa = cpu_isa()
    assert isa.split(" + ")[0] in ("AVX2", "AVX-512", "no AVX2"), isa
    prov = provenance()
    assert prov["isa"] == isa
    # A CSV written before the "isa" column: its rows are kept under the current header, isa empty.
    path = tmp_path / "old.csv"
    old_fields = [f for f in CSV_FIELDS if f != "isa"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old_fields)
        w.writeheader()
        w.writerow({k: f"old-{k}" for k in old_fields})
    append_csv([{"op": "relu", "median": "1.0"}], path, prov)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CSV_FIELDS
    assert rows[0]["op"] == "old-op" and rows[0]["isa"] == "" and rows[0]["device"] == "old-device"
    assert rows[1]["op"] == "relu" and rows[1]["isa"] == isa
    # A column the harness does not write is refused, not dropped.
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,mystery\n1,2\n")
    with pytest.raises(ValueError, match="mystery"):
        append_csv([{"op": "relu"}], bad, prov)
