"""The backends the tests run on, and the one rule for which of them must be present.

Every backend ``xkernels.backends()`` lists as built is tested (a backend added later is picked
up without being named here), plus every backend the environment requires:

  XKERNELS_REQUIRE_BACKENDS=sycl,cuda   comma-separated names that must be available: a test of
                                        a required backend that is not built, or has no usable
                                        device, FAILS (never skips).
  XKERNELS_REQUIRE_SYCL=1               alias of XKERNELS_REQUIRE_BACKENDS=sycl (any value but
                                        "" and "0" counts).

A backend that is unavailable and not required skips with the reason xkernels.backends() gives.

A backend can be slow (a conformance backend such as AdaptiveCpp's): ``Backend.slow`` is True when
its name is in XKERNELS_SLOW_BACKENDS (comma-separated, default "acpp"). Tests with big shapes use
smaller ones or skip, with the reason, on slow backends.

Test tiers (XKERNELS_TEST_TIER, read by test_tier()): "default" (unset) runs every backend except the
conformance backends of FULL_TIER_BACKENDS, which only "full" runs -- unless one of them is required,
since a required backend is never left out. tests/conftest.py applies the tier.
"""

from __future__ import annotations

import os

import pytest
import torch

import xkernels

SLOW_BACKENDS_DEFAULT = "acpp"


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def required_backends() -> frozenset[str]:
    """The backends that must be available here (XKERNELS_REQUIRE_BACKENDS, and its alias
    XKERNELS_REQUIRE_SYCL=1)."""
    names = set(_names(os.environ.get("XKERNELS_REQUIRE_BACKENDS", "")))
    if os.environ.get("XKERNELS_REQUIRE_SYCL", "") not in ("", "0"):
        names.add("sycl")
    return frozenset(names)


def is_required(name: str) -> bool:
    return name in required_backends()


def _is_slow(name: str) -> bool:
    return name in _names(os.environ.get("XKERNELS_SLOW_BACKENDS", SLOW_BACKENDS_DEFAULT))


def _device_type(name: str) -> str:
    return "cuda" if name == "cuda" else "cpu"  # every other backend runs CPU tensors


TIERS = ("default", "full")
# Conformance backends: slow by design (AdaptiveCpp's OpenMP host device), run by the full tier only.
FULL_TIER_BACKENDS = frozenset({"acpp"})


def test_tier() -> str:
    """The test tier: XKERNELS_TEST_TIER, "default" when unset or empty."""
    tier = os.environ.get("XKERNELS_TEST_TIER", "").strip() or "default"
    if tier not in TIERS:
        raise ValueError(f"XKERNELS_TEST_TIER must be one of {', '.join(TIERS)}, got {tier!r}")
    return tier


test_tier.__test__ = False  # a helper, not a test (pytest collects test_* names from modules it imports)


def in_tier(name: str) -> bool:
    """Whether the tier runs backend `name`: every backend in the full tier; in the default tier every backend but
    the conformance ones, which still run when required."""
    return test_tier() == "full" or name not in FULL_TIER_BACKENDS or is_required(name)


class Backend(str):
    """A backend under test: the name (it compares equal to it), the torch device its tensors live on,
    whether it is slow, and its xkernels.backends() status."""

    name: str
    device: torch.device
    slow: bool

    def __new__(cls, name: str, status=None):
        self = super().__new__(cls, name)
        self.name = name
        self.status = status
        self.device = torch.device(_device_type(name))
        self.slow = _is_slow(name)
        return self


def backend_names() -> list[str]:
    """Every built backend, then every required one that is not (so that it fails)."""
    status = xkernels.backends()
    names = [n for n, st in status.items() if st.built]
    return names + sorted(required_backends() - set(names))


def backend_params() -> list:
    """pytest params, one per backend_names(), each marked with the backend's name (-m "not sycl"), and with
    `full_tier` where only the full tier runs the backend (tests/conftest.py deselects those in the default tier)."""
    return [
        pytest.param(n, id=n, marks=[getattr(pytest.mark, n)] + ([] if in_tier(n) else [pytest.mark.full_tier]))
        for n in backend_names()
    ]


def get(name: str) -> Backend:
    """The backend `name`, ready to test: fails if it is required and unavailable, skips if it is
    only unavailable."""
    st = xkernels.backends().get(name)
    if st is None or not st.available:
        why = "not listed by xkernels.backends()" if st is None else st.reason
        if is_required(name):
            pytest.fail(
                f"backend '{name}' is required (XKERNELS_REQUIRE_BACKENDS={','.join(sorted(required_backends()))}) "
                f"but unavailable: {why}",
                pytrace=False,
            )
        pytest.skip(f"backend '{name}' unavailable: {why}")
    return Backend(name, st)


def device_of(name: str) -> torch.device:
    """The device backend `name` runs tensors on (for child processes, which have no fixture)."""
    return torch.device(_device_type(name))


def skip_if_slow(backend: Backend, why: str) -> None:
    if backend.slow:
        pytest.skip(f"backend '{backend.name}' is a slow (conformance) backend: {why}")
