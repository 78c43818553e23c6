"""Shared fixtures: the backend under test, fixed seeds, and the backends table in the header.

Every numerical test takes the `backend` fixture, so the same suite checks each backend
("reference" here; "sycl" reuses it unchanged). A backend that is unavailable skips with
the reason xkernels.backends() gives — except that with XKERNELS_REQUIRE_SYCL=1 (CI) an
unavailable "sycl" backend fails the tests instead of skipping them (pytest reports each as an
error in setup, and the run fails).
"""
from __future__ import annotations

import os
import zlib

import pytest
import torch

import xkernels

BACKENDS = ("reference", "sycl")


def _sycl_required() -> bool:
    return os.environ.get("XKERNELS_REQUIRE_SYCL", "") == "1"


def pytest_report_header(config):
    lines = ["xkernels backends:"]
    for name, st in xkernels.backends().items():
        state = "available" if st.available else "unavailable"
        lines.append(f"  {name:10s} {state:12s} {st.reason}".rstrip())
    lines.append(f"  (XKERNELS_REQUIRE_SYCL={os.environ.get('XKERNELS_REQUIRE_SYCL', '')!r}, "
                 f"torch {torch.__version__}, {torch.get_num_threads()} threads)")
    return lines


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def backend(request):
    """Runs the test with xkernels.use_backend(<name>) entered; yields the name."""
    name = request.param
    st = xkernels.backends()[name]
    if not st.available:
        if name == "sycl" and _sycl_required():
            pytest.fail(f"backend 'sycl' is required (XKERNELS_REQUIRE_SYCL=1) but unavailable: {st.reason}")
        pytest.skip(f"backend '{name}' unavailable: {st.reason}")
    with xkernels.use_backend(name):
        yield name


@pytest.fixture(autouse=True)
def _fixed_seed(request):
    """Every test starts from a fixed seed derived from its id (stable across runs and orders)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
