"""Hypothesis profiles for the property-based tests (tests/test_fuzz.py).

Select with the environment variable HYPOTHESIS_PROFILE (default: "quick" in the default test tier, "ci" in
the full tier, XKERNELS_TEST_TIER=full; see tests/conftest.py):
  quick    the default tier's: like ci, with fewer examples per test (FUZZ_EXAMPLES["quick"]), so that
           `python -m pytest` stays a few minutes.
  ci       bounded and deterministic (derandomized): the same examples on every run, so CI stays
           reproducible and within its time budget. Examples per test: FUZZ_EXAMPLES["ci"].
  nightly  thousands of fresh random examples per test (FUZZ_EXAMPLES["nightly"]); failures are
           stored in the example database (.hypothesis/) and replayed first on the next run.
  dev      a quick smoke run while editing (a handful of examples).
XKERNELS_FUZZ_EXAMPLES=<n> overrides the per-test example count of whichever profile is active.
See docs/reliability.md for the commands.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

import _backends

# Examples per (test, backend). test_fuzz.py has 5 property tests: one per op (forward and backward
# checked in every example) plus layer_norm(out=) and the pre-packed linear (CPU backends), so the nightly
# profile runs 5 x 3000 = 15000 examples per CPU backend, and ci runs 5 x FUZZ_EXAMPLES["ci"].
FUZZ_EXAMPLES = {"quick": 30, "ci": 300, "nightly": 3000, "dev": 10}

_common = dict(
    deadline=None,  # the machine is shared and noisy; timing is not a property here
    # function_scoped_fixture: the `backend` fixture only selects the backend (the same for every example)
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
    print_blob=True,  # a failure prints @reproduce_failure(...) to replay it exactly
)

_bounded = dict(derandomize=True, database=None, phases=[Phase.explicit, Phase.generate, Phase.shrink], **_common)
settings.register_profile("quick", max_examples=FUZZ_EXAMPLES["quick"], **_bounded)
settings.register_profile("ci", max_examples=FUZZ_EXAMPLES["ci"], **_bounded)
settings.register_profile("nightly", max_examples=FUZZ_EXAMPLES["nightly"], **_common)
settings.register_profile("dev", max_examples=FUZZ_EXAMPLES["dev"], **_common)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _backends.test_tier() == "full" else "quick")
if PROFILE not in FUZZ_EXAMPLES:
    raise ValueError(f"HYPOTHESIS_PROFILE must be one of {sorted(FUZZ_EXAMPLES)}, got {PROFILE!r}")
settings.load_profile(PROFILE)


def examples() -> int:
    """Examples per property test and backend under the active profile."""
    env = os.environ.get("XKERNELS_FUZZ_EXAMPLES")
    return int(env) if env else FUZZ_EXAMPLES[PROFILE]
