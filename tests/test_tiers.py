"""The test tiers (tests/conftest.py, tests/_backends.py): XKERNELS_TEST_TIER selects default or full; the default
tier leaves out compiler/build tests, slow tests and the conformance backends, but never a required backend."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest

import xkernels
from xkernels.backends import BackendStatus

import _backends

HERE = Path(__file__).resolve().parent


@pytest.fixture
def env(monkeypatch):
    for k in ("XKERNELS_TEST_TIER", "XKERNELS_REQUIRE_BACKENDS", "XKERNELS_REQUIRE_SYCL"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_tier_switch(env):
    assert _backends.test_tier() == "default"
    env.setenv("XKERNELS_TEST_TIER", "")
    assert _backends.test_tier() == "default"
    env.setenv("XKERNELS_TEST_TIER", "full")
    assert _backends.test_tier() == "full"
    env.setenv("XKERNELS_TEST_TIER", "fast")
    with pytest.raises(ValueError, match="XKERNELS_TEST_TIER must be one of default, full, got 'fast'"):
        _backends.test_tier()


def _marks(name):
    (param,) = [p for p in _backends.backend_params() if p.values == (name,)]
    return {m.name for m in param.marks}


def test_default_tier_leaves_out_conformance_backends_unless_required(env):
    fake = {
        **xkernels.backends(),
        "acpp": BackendStatus("acpp", True, True),
        "sycl": BackendStatus("sycl", True, True),
    }
    env.setattr(xkernels, "backends", lambda: fake)
    assert _backends.in_tier("reference") and _backends.in_tier("sycl") and _backends.in_tier("cuda")
    assert not _backends.in_tier("acpp")
    assert _marks("acpp") == {"acpp", "full_tier"} and _marks("sycl") == {"sycl"}
    env.setenv("XKERNELS_REQUIRE_BACKENDS", "sycl,acpp")  # required: run (and fail if missing) in every tier
    assert _backends.in_tier("acpp") and _marks("acpp") == {"acpp"}
    env.delenv("XKERNELS_REQUIRE_BACKENDS")
    env.setenv("XKERNELS_TEST_TIER", "full")
    assert _backends.in_tier("acpp") and _marks("acpp") == {"acpp"}


def test_required_backend_that_is_not_built_still_fails_in_the_default_tier(env):
    fake = {k: v for k, v in xkernels.backends().items() if k != "acpp"}
    env.setattr(xkernels, "backends", lambda: fake)
    env.setenv("XKERNELS_REQUIRE_BACKENDS", "acpp")
    assert "acpp" in _backends.backend_names() and _marks("acpp") == {"acpp"}
    with pytest.raises(pytest.fail.Exception, match="backend 'acpp' is required"):
        _backends.get("acpp")


def _item(path, name, *marks):
    markers = {m: SimpleNamespace(name=m) for m in marks}
    return SimpleNamespace(path=HERE / path, originalname=name, get_closest_marker=markers.get)


def test_which_tests_only_the_full_tier_runs(env):
    full_only = conftest._full_tier_only
    assert full_only(_item("test_conv2d.py", "test_matches_torch")) is None
    assert full_only(_item("test_conv2d.py", "test_matches_torch", "acpp", "full_tier")) == "conformance backend"
    assert full_only(_item("test_compile.py", "test_compile_inductor", "slow")) == "slow"
    assert full_only(_item("test_cuda_compile.py", "test_anything")) == "compiler or build"
    assert full_only(_item("test_oneapi_build.py", "test_cmake_runs_exactly_the_planned_commands")) == (
        "compiler or build"
    )
    assert full_only(_item("test_oneapi_build.py", "test_no_toolchain_means_no_plan")) is None
    assert full_only(_item("test_sycl_runtime.py", "test_warmup_compiles_all_groups")) == (
        "kernel builds into an empty cache"
    )
    assert full_only(_item("test_sycl_runtime.py", "test_layer_norm_backward_mask")) is None
    assert full_only(_item("test_cross_implementation.py", "test_small_integer_inputs_agree_exactly")) == (
        "conformance backend"
    )
    env.setenv("XKERNELS_REQUIRE_BACKENDS", "acpp")
    assert full_only(_item("test_cross_implementation.py", "test_small_integer_inputs_agree_exactly")) is None


def test_full_tier_table_names_existing_tests():
    tables = {**{f: funcs for f, (_, funcs) in conftest.FULL_TIER_TESTS.items()}, **conftest.FULL_TIER_BACKEND_TESTS}
    for name, funcs in tables.items():
        src = (HERE / name).read_text()
        if isinstance(funcs, str):  # a backend name
            continue
        for f in funcs or ():
            assert re.search(rf"^def {f}\(", src, re.M), f"{name} has no test {f}"
