"""Shared fixtures: the backend under test, fixed seeds, and the backends table in the header.

Every numerical test takes the `backend` fixture, so the same suite checks each backend that
xkernels.backends() lists as built (see tests/_backends.py for the rule: XKERNELS_REQUIRE_BACKENDS
names the backends that must be available -- those fail instead of skipping). The fixture yields a
`_backends.Backend` (a str equal to the name, with `.name`, `.device` and `.slow`) with
xkernels.use_backend(<name>) entered; for a backend whose tensors live on another device than the
CPU (cuda), that device is also torch's default device for the test, so the suites' factory calls
create their tensors there (unless the test is marked `explicit_device`).
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

import xkernels

import _backends


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "explicit_device: the test puts its tensors on backend.device itself (the backend fixture leaves torch's "
        "default device alone)",
    )
    for name in _backends.backend_names():
        config.addinivalue_line("markers", f"{name}: runs on the '{name}' backend")


def pytest_report_header(config):
    lines = ["xkernels backends:"]
    for name, st in xkernels.backends().items():
        state = "available" if st.available else "unavailable"
        lines.append(f"  {name:10s} {state:12s} {st.reason}".rstrip())
    required = ",".join(sorted(_backends.required_backends())) or "none"
    slow = os.environ.get("XKERNELS_SLOW_BACKENDS", _backends.SLOW_BACKENDS_DEFAULT)
    threads = torch.get_num_threads()
    lines.append(f"  (required: {required}; slow: {slow!r}; torch {torch.__version__}, {threads} threads)")
    return lines


@pytest.fixture(params=_backends.backend_params())
def backend(request):
    """Runs the test with xkernels.use_backend(<name>) entered; yields the _backends.Backend."""
    be = _backends.get(request.param)
    with xkernels.use_backend(be.name):
        if be.device.type == "cpu" or request.node.get_closest_marker("explicit_device"):
            yield be
        else:
            with torch.device(be.device):
                yield be


@pytest.fixture
def cpu_backend(backend):
    """The backend, for tests of CPU-only features (pre-packed weights): others skip."""
    if backend.device.type != "cpu":
        pytest.skip(f"CPU tensors only; backend '{backend.name}' runs {backend.device.type} tensors")
    return backend


@pytest.fixture(autouse=True)
def _fixed_seed(request):
    """Every test starts from a fixed seed derived from its id (stable across runs and orders)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
