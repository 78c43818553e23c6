"""The benchmark harness (benchmarks/harness.py) refuses to time a wrong result, reports every provider it
timed with a median and spread in the case's unit, and never times an unavailable provider or one that does not
run the op. Cheap synthetic cases only: no timing claims are made here (speed is measured by the suite)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.harness import Case, Provider, time_case  # noqa: E402


def _case(mode="fwd"):
    def make():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 32, generator=g, requires_grad=mode == "fwd+bwd")
        return (x,), {}
    return Case("relu", mode, torch.float32, "64x32", make, lambda a, k: torch.relu(a[0].detach().double()),
                work=64 * 32 * 8.0, metric="GB/s")


def _prov(name, fn, **kw):
    return Provider(name, lambda op, args, kwargs: fn(*args), **kw)


def test_rows_for_each_timed_provider():
    rows = time_case(_case(), [_prov("good", torch.relu), _prov("also", lambda x: x.clamp_min(0))],
                     repeats=3, min_time=0.01, log=lambda *a: None)
    assert [r["provider"] for r in rows] == ["good", "also"]
    for r in rows:
        assert float(r["median"]) > 0 and float(r["spread"]) >= 0 and r["samples"] == 3
        assert r["unit"] == "GB/s" and r["metric"] == "gb_per_s" and r["op"] == "relu"


def test_wrong_result_is_refused():
    with pytest.raises(AssertionError, match="refusing to time a wrong result"):
        time_case(_case(), [_prov("wrong", lambda x: torch.relu(x) * 1.01)], repeats=3, min_time=0.01,
                  log=lambda *a: None)


def test_unchecked_baseline_and_skipped_providers():
    logged = []
    rows = time_case(_case(), [
        _prov("copy", lambda x: x.clone(), checked=False),                     # timed, not checked
        _prov("gone", torch.relu, available=False, reason="not installed"),    # never called
        _prov("other_op", torch.relu, ops=frozenset({"conv2d"})),              # does not run this op
        _prov("broken", lambda x: (_ for _ in ()).throw(RuntimeError("no kernel"))),  # reported, not timed
    ], repeats=3, min_time=0.01, log=logged.append)
    assert [r["provider"] for r in rows] == ["copy"]
    assert any("broken" in line and "no kernel" in line for line in logged)


def test_backward_mode_runs_backward_and_clears_grads():
    calls = []

    def relu(x):
        calls.append(x.requires_grad)
        return torch.relu(x)
    rows = time_case(_case("fwd+bwd"), [_prov("p", relu)], repeats=3, min_time=0.01, log=lambda *a: None)
    assert rows and all(calls)
