"""Shared fixtures: the backend under test, fixed seeds, and the backends table in the header.

Every numerical test takes the `backend` fixture, so the same suite checks each backend that
xkernels.backends() lists as built (see tests/_backends.py for the rule: XKERNELS_REQUIRE_BACKENDS
names the backends that must be available -- those fail instead of skipping). The fixture yields a
`_backends.Backend` (a str equal to the name, with `.name`, `.device` and `.slow`) with
xkernels.use_backend(<name>) entered; for a backend whose tensors live on another device than the
CPU (cuda), that device is also torch's default device for the test, so the suites' factory calls
create their tensors there (unless the test is marked `explicit_device`).

Test tiers, one switch: `python -m pytest` runs the default tier; `XKERNELS_TEST_TIER=full python -m pytest`
the full tier (what .ci/run runs). The default tier deselects (pytest reports them as deselected, and says
why after collecting) the tests that start compilers or builds or build kernels into a fresh kernel cache on
purpose, and two long soak/size tests (FULL_TIER_TESTS below), the tests of the
conformance backends (_backends.FULL_TIER_BACKENDS, i.e. acpp) unless XKERNELS_REQUIRE_BACKENDS names them,
and the `slow` tests; its property-based tests run the "quick" hypothesis profile instead of "ci"
(tests/hypothesis_profiles.py). Every op, dtype and layout runs in both tiers.
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

import xkernels

import _amx_guard
import _backends

# Tests only the full tier runs, because they start a compiler or a build, build kernels into an empty kernel
# cache of their own on purpose (the cache's own tests: a warm cache cannot spare them the compiler), or are
# long soak/size runs: file -> (why, the test functions; None: the whole file).
COMPILER = "compiler or build"
COLD_CACHE = "kernel builds into an empty cache"
LONG = "long"
FULL_TIER_TESTS = {
    "test_adaptivecpp_known_bugs.py": (COMPILER, None),  # compiles reproducers with AdaptiveCpp's acpp
    "test_acpp_parts.py": (  # builds small launcher libraries with AdaptiveCpp's acpp
        COMPILER,
        {
            "test_a_table_split_into_parts_yields_every_instantiation",
            "test_a_missing_part_is_named",
            "test_a_part_compiled_twice_is_refused",
        },
    ),
    "test_cuda_compile.py": (COMPILER, None),  # scripts/check_cuda_compile.sh: nvcc and g++
    "test_cuda_stream_queue_header.py": (COMPILER, None),  # g++ against the SYCL runtime's headers
    "test_cuda_sim_hostile.py": (COMPILER, None),  # g++ builds the CUDA kernels' CPU simulator (tests/_cuda_sim.py)
    "test_cuda_sim_layer_norm.py": (COMPILER, None),  # the same simulator, layer_norm's launch modes
    "test_build_linkage.py": (COMPILER, {"test_checker_tells_static_from_shared"}),  # g++ links two libraries
    "test_sanitizers.py": (COMPILER, None),  # a CMake sanitizer build (and only with XKERNELS_RUN_SLOW=1)
    "test_oneapi_build.py": (  # the rest of the file plans builds against fake toolchains, starting nothing
        COMPILER,
        {
            "test_planned_definitions_expand_to_the_strings_the_library_reports",  # g++
            "test_launchers_parse_with_the_planned_definitions",  # g++ -fsyntax-only on the SYCL launchers
            "test_cmake_runs_exactly_the_planned_commands",  # cmake + ninja
            "test_setup_py_stops_with_the_planners_message",  # setup.py build_ext
        },
    ),
    "test_ur_cuda_adapter_build.py": (COMPILER, None),  # scripts/build_ur_cuda_adapter.sh (cached), link stubs
    "test_cache_robustness.py": (COLD_CACHE, None),  # processes racing, interrupted, on fresh caches
    "test_sycl_runtime.py": (
        COLD_CACHE,
        {
            "test_second_process_hits_cache",
            "test_corrupted_cache_entry_rebuilt",
            "test_warmup_compiles_all_groups",  # every kernel group of every dtype, cold
            "test_concurrent_first_use_compiles_once",
        },
    ),
    "test_custom_kernels.py": (COLD_CACHE, {"test_second_process_does_not_recompile"}),
    "test_threads.py": (COLD_CACHE, {"test_first_use_compilation_happens_once_per_device"}),
    "test_memory.py": (LONG, None),  # 10,000 forward+backward calls per op and backend, in child processes
    "test_hostile.py": (LONG, {"test_more_than_2_31_elements"}),  # 12-27 s and up to 8.8 GB each (docs/reliability.md)
}
# Tests outside the `backend` fixture that need a conformance backend: run wherever that backend runs.
FULL_TIER_BACKEND_TESTS = {"test_cross_implementation.py": "acpp"}


def pytest_configure(config):
    _amx_guard.check()  # before anything touches SYCL: a wrong AMX guard must fail a test, not abort the suite
    config.addinivalue_line(
        "markers",
        "explicit_device: the test puts its tensors on backend.device itself (the backend fixture leaves torch's "
        "default device alone)",
    )
    for name in _backends.backend_names():
        config.addinivalue_line("markers", f"{name}: runs on the '{name}' backend")


def _full_tier_only(item) -> str | None:
    """Why only the full tier runs `item` (None: both tiers run it)."""
    if item.get_closest_marker("full_tier"):
        return "conformance backend"
    if item.get_closest_marker("slow"):
        return "slow"
    name = item.path.name
    if name in FULL_TIER_TESTS:
        why, only = FULL_TIER_TESTS[name]
        if only is None or getattr(item, "originalname", "") in only:
            return why
    if name in FULL_TIER_BACKEND_TESTS and not _backends.in_tier(FULL_TIER_BACKEND_TESTS[name]):
        return "conformance backend"
    return None


def pytest_collection_modifyitems(config, items):
    # A name in FULL_TIER_TESTS that matches nothing would leave a renamed compiler test in the default tier.
    collected = {(i.path.name, getattr(i, "originalname", i.name)) for i in items}
    files = {f for f, _ in collected}
    stale = [
        f"{f}::{t}" for f, (_, ts) in FULL_TIER_TESTS.items() if f in files for t in ts or () if (f, t) not in collected
    ]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py FULL_TIER_TESTS names tests that do not exist: {stale}")
    if _backends.test_tier() == "full":
        return
    keep, dropped = [], {}
    for item in items:
        why = _full_tier_only(item)
        if why is None:
            keep.append(item)
        else:
            dropped.setdefault(why, []).append(item)
    if dropped:
        config.hook.pytest_deselected(items=[i for its in dropped.values() for i in its])
        items[:] = keep
    config._xk_full_tier_only = {why: len(its) for why, its in dropped.items()}


def pytest_report_collectionfinish(config, start_path, items):
    counts = getattr(config, "_xk_full_tier_only", None)
    if not counts:
        return []
    what = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
    return [f"default test tier: {sum(counts.values())} tests deselected ({what}); XKERNELS_TEST_TIER=full runs them"]


def pytest_report_header(config):
    lines = ["xkernels backends:"]
    for name, st in xkernels.backends().items():
        state = "available" if st.available else "unavailable"
        lines.append(f"  {name:10s} {state:12s} {st.reason}".rstrip())
    required = ",".join(sorted(_backends.required_backends())) or "none"
    slow = os.environ.get("XKERNELS_SLOW_BACKENDS", _backends.SLOW_BACKENDS_DEFAULT)
    threads = torch.get_num_threads()
    lines.append(f"  (required: {required}; slow: {slow!r}; torch {torch.__version__}, {threads} threads)")
    tier = _backends.test_tier()
    left_out = sorted(n for n in _backends.backend_names() if not _backends.in_tier(n))
    lines.append(
        f"  test tier: {tier}"
        + (f" (not run: {', '.join(left_out)}; XKERNELS_TEST_TIER=full runs everything)" if left_out else "")
    )
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


LAUNCH_CHECKING = os.environ.get("XKERNELS_LAUNCH_CHECKING", "") == "1"


@pytest.fixture(autouse=True)
def _launch_checking():
    """XKERNELS_LAUNCH_CHECKING=1 (what .ci/run sets): every test runs with launch checking on (csrc/sycl/launch.h) and
    fails if host memory was released while SYCL kernels it queued were still unwaited (a temporary freed under a
    running kernel). Off by default: it wraps torch's CPU allocator for the rest of the process."""
    if not LAUNCH_CHECKING:
        yield
        return
    sycl = getattr(xkernels._C, "sycl", None)
    if sycl is None:
        pytest.fail("XKERNELS_LAUNCH_CHECKING=1, but this build has no SYCL backend to check", pytrace=False)
    sycl.set_launch_checking(True)
    sycl.launch_check_report(reset=True)
    yield
    report = sycl.launch_check_report(reset=True)
    assert report["unsafe_releases"] == 0, (
        f"host memory was released while SYCL kernels were still queued (the kernel queued last: "
        f"{report['first_unsafe']}): {report}"
    )


@pytest.fixture(autouse=True)
def _fixed_seed(request):
    """Every test starts from a fixed seed derived from its id (stable across runs and orders)."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
