"""Backend selection and introspection: backends(), use_backend (nesting, restoring, threads),
XKERNELS_BACKEND, invalid and unavailable names, and the dispatch record."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import xkernels

PYTHON_DIR = Path(xkernels.__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _process_default_auto():
    """These tests reason from the default 'auto', whatever XKERNELS_BACKEND this run has."""
    previous = xkernels._C.default_backend()
    xkernels._C.set_default_backend("auto")
    yield
    xkernels._C.set_default_backend(previous)


def test_backends_content():
    b = xkernels.backends()
    assert list(b) == ["reference", "sycl", "cuda", "acpp"]
    for name, st in b.items():
        assert st.name == name
        assert isinstance(st.built, bool) and isinstance(st.available, bool)
        assert not st.available or st.built  # available implies built
        if not st.available:
            assert st.reason, f"unavailable backend '{name}' must say why"
        assert set(st.as_dict()) == {"name", "built", "available", "reason", "devices"}
    assert b["reference"].available and b["reference"].built
    assert b["sycl"].built == xkernels._C.with_sycl
    assert b["cuda"].built == xkernels._C.with_cuda
    assert b["acpp"].built == xkernels._C.with_acpp


def test_info_says_where_each_sycl_device_gets_its_kernels():
    info = xkernels.info()
    if not xkernels._C.with_sycl:
        assert "sycl" not in info
        return
    usable = [d["name"] for d in xkernels.backends()["sycl"].devices if d.get("usable")]
    provs = info["sycl"]["provider_devices"]
    assert [p["device"] for p in provs] == usable
    for p in provs:
        assert p["source"] in ("aot-native", "aot-portable", "run-time-compile")
        assert p["choice"].startswith(p["source"]) and len(p["choice"]) > len(p["source"]) + 2  # with the reason
        assert (p["image"] == "") == (p["source"] == "run-time-compile")
    assert isinstance(info["sycl"]["runtime_compile_env"], list)


def test_default_is_auto():
    assert xkernels.current_backend() == "auto"


def test_use_backend_nests_and_restores():
    assert xkernels.current_backend() == "auto"
    with xkernels.use_backend("reference") as name:
        assert name == xkernels.current_backend() == "reference"
        with xkernels.use_backend("auto"):
            assert xkernels.current_backend() == "auto"
            with xkernels.use_backend("REFERENCE"):  # case-insensitive
                assert xkernels.current_backend() == "reference"
            assert xkernels.current_backend() == "auto"
        assert xkernels.current_backend() == "reference"
    assert xkernels.current_backend() == "auto"


def test_use_backend_restores_after_exception():
    with pytest.raises(KeyError):
        with xkernels.use_backend("reference"):
            raise KeyError("boom")
    assert xkernels.current_backend() == "auto"


def test_use_backend_is_thread_local():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def worker():
        seen["before"] = xkernels.current_backend()
        with xkernels.use_backend("reference"):
            inside.set()
            release.wait(10)
            seen["inside"] = xkernels.current_backend()
        seen["after"] = xkernels.current_backend()

    with xkernels.use_backend("auto"):
        t = threading.Thread(target=worker)
        t.start()
        assert inside.wait(10)
        assert xkernels.current_backend() == "auto"  # the worker's selection does not leak here
        with xkernels.use_backend("reference"):
            release.set()
            t.join(10)
            assert xkernels.current_backend() == "reference"
    assert seen == {"before": "auto", "inside": "reference", "after": "auto"}


def test_new_thread_does_not_inherit_selection():
    seen = []
    with xkernels.use_backend("reference"):
        t = threading.Thread(target=lambda: seen.append(xkernels.current_backend()))
        t.start()
        t.join(10)
    assert seen == ["auto"]


@pytest.mark.parametrize("bad", ["foo", "gpu", ""])
def test_invalid_name(bad):
    if bad == "":  # the empty string means "auto" (an unset environment variable)
        with xkernels.use_backend(bad):
            assert xkernels.current_backend() == "auto"
        return
    with pytest.raises(ValueError, match=f"'{bad}'") as info:
        with xkernels.use_backend(bad):
            pass
    assert "use_backend" in str(info.value) and "reference" in str(info.value)
    assert xkernels.current_backend() == "auto"


def test_unavailable_backend_raises():
    st = xkernels.backends()["cuda"]
    if st.available:
        pytest.skip("CUDA is available here")
    with pytest.raises(xkernels.BackendUnavailableError, match="'cuda'") as info:
        with xkernels.use_backend("cuda"):
            pass
    assert st.reason in str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert xkernels.current_backend() == "auto"


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")]), **env}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120)


def test_env_var_sets_process_default():
    code = (
        "import torch, xkernels\n"
        "print(xkernels.current_backend())\n"
        "with xkernels.dispatch_record() as rec:\n"
        "    xkernels.fused_linear_relu(torch.randn(2, 3), torch.randn(4, 3))\n"
        "print(sorted(rec.counts()))\n"
        "with xkernels.use_backend('auto'):\n"
        "    print(xkernels.current_backend())\n"
    )
    p = _run_python(code, XKERNELS_BACKEND="Reference")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "reference"
    assert lines[1] == "[('fused_linear_relu', 'reference', 'cpu')]"
    assert lines[2] == "auto"  # use_backend still overrides the process default


def test_env_var_invalid_value_names_the_variable():
    p = _run_python("import xkernels; print(xkernels.current_backend())", XKERNELS_BACKEND="bogus")
    assert p.returncode != 0
    assert "XKERNELS_BACKEND" in p.stderr and "'bogus'" in p.stderr


def test_dispatch_record_forward_and_backward():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    xi = torch.randn(1, 2, 5, 5, requires_grad=True)
    wi = torch.randn(3, 2, 3, 3, requires_grad=True)
    with xkernels.use_backend("reference"), xkernels.dispatch_record() as rec:
        xkernels.fused_linear_relu(x, w).sum().backward()
        xkernels.fused_linear_relu(x, w)
        xkernels.conv2d(xi, wi, padding=1).sum().backward()
        xkernels.layer_norm(x, [4]).sum().backward()
    counts = rec.counts()
    assert counts[("fused_linear_relu", "reference", "cpu")] == 2
    assert counts[("fused_linear_relu_backward", "reference", "cpu")] == 1
    assert counts[("conv2d", "reference", "cpu")] == 1
    assert counts[("conv2d_backward", "reference", "cpu")] == 1
    assert counts[("layer_norm", "reference", "cpu")] == 1
    assert counts[("layer_norm_backward", "reference", "cpu")] == 1
    assert rec.fallbacks() == []  # explicitly requested: no fallback
    assert "fused_linear_relu" in rec.summary()


def _graph_of_every_op(requires_grad=True):
    x = torch.randn(3, 4, requires_grad=requires_grad)
    w = torch.randn(5, 4, requires_grad=requires_grad)
    xi = torch.randn(1, 2, 5, 5, requires_grad=requires_grad)
    wi = torch.randn(3, 2, 3, 3, requires_grad=requires_grad)
    return (
        xkernels.fused_linear_relu(x, w).sum()
        + xkernels.conv2d(xi, wi, padding=1).sum()
        + xkernels.layer_norm(x, [4]).sum()
    )


BACKWARD_OPS = ("fused_linear_relu_backward", "conv2d_backward", "layer_norm_backward")


def _backward_backends(rec):
    return {op: backend for (op, backend, _device) in rec.counts() if op in BACKWARD_OPS}


def test_backward_runs_on_the_forward_selection_from_another_thread():
    # The autograd engine runs CUDA/XPU backwards on its own device threads, which do not see the forward
    # thread's use_backend; the selection saved at forward time is re-applied around the backward op. On the
    # CPU the backward runs on the calling thread, so calling it from a new thread shows the same thing.
    others = [b for b in ("sycl", "reference") if xkernels.backends()[b].available]
    for forward_backend in others:
        with xkernels.use_backend(forward_backend):
            loss = _graph_of_every_op()
        errors = []

        def run_backward():
            try:
                loss.backward()
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(e)

        with xkernels.dispatch_record() as rec:
            t = threading.Thread(target=run_backward)
            t.start()
            t.join()
        assert not errors, errors
        assert _backward_backends(rec) == {op: forward_backend for op in BACKWARD_OPS}
        assert xkernels.current_backend() == "auto"  # nothing leaked into this thread


def test_backward_forward_selection_wins_and_is_restored():
    with xkernels.use_backend("reference"):
        loss = _graph_of_every_op()
    target = "sycl" if xkernels.backends()["sycl"].available else "auto"
    with xkernels.use_backend(target), xkernels.dispatch_record() as rec:
        loss.backward()
        assert xkernels.current_backend() == target  # restored after each backward op
    assert _backward_backends(rec) == {op: "reference" for op in BACKWARD_OPS}


def test_backward_without_forward_selection_uses_the_backward_threads():
    loss = _graph_of_every_op()  # no use_backend at forward time
    with xkernels.use_backend("reference"), xkernels.dispatch_record() as rec:
        loss.backward()
    assert _backward_backends(rec) == {op: "reference" for op in BACKWARD_OPS}


def test_dispatch_record_auto_fallback_has_reason():
    if xkernels.backends()["sycl"].available:
        pytest.skip("auto picks sycl here: no fallback to record")
    with xkernels.dispatch_record() as rec:
        xkernels.fused_linear_relu(torch.randn(2, 3), torch.randn(4, 3))
    (event,) = rec.fallbacks()
    op, backend, device, reason, n = event
    assert (op, backend, device, n) == ("fused_linear_relu", "reference", "cpu", 1)
    assert "sycl" in reason


def test_dispatch_record_off_outside_block():
    with xkernels.dispatch_record() as rec:
        pass
    xkernels.fused_linear_relu(torch.randn(2, 3), torch.randn(4, 3))
    assert rec.events == []
    assert not xkernels._C.dispatch_record_enabled()


def test_empty_inputs_do_not_dispatch():
    """Degenerate sizes are answered by the shared entry code, before any backend is chosen."""
    with xkernels.use_backend("reference"), xkernels.dispatch_record() as rec:
        xkernels.fused_linear_relu(torch.randn(0, 3), torch.randn(4, 3))
    assert rec.events == []


def test_required_backends_rule(monkeypatch):
    """tests/_backends.py: XKERNELS_REQUIRE_BACKENDS lists the required backends; XKERNELS_REQUIRE_SYCL=1
    is an alias adding "sycl" (parsed in that one helper)."""
    import _backends

    monkeypatch.delenv("XKERNELS_REQUIRE_BACKENDS", raising=False)
    monkeypatch.delenv("XKERNELS_REQUIRE_SYCL", raising=False)
    assert _backends.required_backends() == frozenset()
    monkeypatch.setenv("XKERNELS_REQUIRE_SYCL", "0")
    assert _backends.required_backends() == frozenset()
    monkeypatch.setenv("XKERNELS_REQUIRE_SYCL", "1")
    assert _backends.required_backends() == {"sycl"}
    monkeypatch.setenv("XKERNELS_REQUIRE_BACKENDS", " cuda, acpp ,")
    assert _backends.required_backends() == {"sycl", "cuda", "acpp"}


def test_unavailable_backend_fails_if_required_else_skips(monkeypatch):
    """A required backend that is unavailable fails the test (never skips); otherwise it skips with the reason.
    Every backend xkernels.backends() lists as built is a parameter, whatever its name."""
    from xkernels.backends import BackendStatus

    import _backends

    real = xkernels.backends()
    fake = {**real, "newbackend": BackendStatus("newbackend", True, False, "no device for it here")}
    monkeypatch.setattr(xkernels, "backends", lambda: fake)
    monkeypatch.delenv("XKERNELS_REQUIRE_BACKENDS", raising=False)
    monkeypatch.delenv("XKERNELS_REQUIRE_SYCL", raising=False)
    assert "newbackend" in _backends.backend_names()
    with pytest.raises(pytest.skip.Exception, match="no device for it here"):
        _backends.get("newbackend")
    monkeypatch.setenv("XKERNELS_REQUIRE_BACKENDS", "newbackend")
    with pytest.raises(pytest.fail.Exception, match="required.*no device for it here"):
        _backends.get("newbackend")
    monkeypatch.setenv("XKERNELS_REQUIRE_BACKENDS", "notlisted")
    assert _backends.backend_names()[-1] == "notlisted"  # required but not listed: a parameter, so it fails
    with pytest.raises(pytest.fail.Exception, match="not listed"):
        _backends.get("notlisted")
    monkeypatch.setenv("XKERNELS_REQUIRE_BACKENDS", "")
    monkeypatch.setenv("XKERNELS_REQUIRE_SYCL", "1")
    fake["sycl"] = BackendStatus("sycl", True, False, "no SYCL device")
    with pytest.raises(pytest.fail.Exception, match="no SYCL device"):
        _backends.get("sycl")


def test_backend_device_and_slow(monkeypatch):
    from xkernels.backends import BackendStatus

    import _backends

    monkeypatch.delenv("XKERNELS_SLOW_BACKENDS", raising=False)
    ref = _backends.Backend("reference", BackendStatus("reference", True, True))
    assert ref == "reference" and ref.name == "reference" and ref.device == torch.device("cpu") and not ref.slow
    assert _backends.Backend("cuda", BackendStatus("cuda", True, True)).device.type == "cuda"
    assert _backends.Backend("acpp", BackendStatus("acpp", True, True)).slow  # default XKERNELS_SLOW_BACKENDS
    monkeypatch.setenv("XKERNELS_SLOW_BACKENDS", "sycl")
    assert _backends.Backend("sycl", BackendStatus("sycl", True, True)).slow
    assert not _backends.Backend("acpp", BackendStatus("acpp", True, True)).slow


@pytest.mark.slow  # a pytest subprocess (~15 s on a loaded 2-core machine)
def test_required_unavailable_backend_errors_the_run():
    """End to end: a required backend nobody built makes the run fail (an error at fixture setup)."""
    test_id = f"{Path(__file__).parent / 'test_fused_linear_relu.py'}::test_via_torch_ops"
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_id]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])}
    env.pop("XKERNELS_REQUIRE_SYCL", None)
    strict = subprocess.run(
        base, env={**env, "XKERNELS_REQUIRE_BACKENDS": "nosuchbackend"}, capture_output=True, text=True, timeout=300
    )
    assert strict.returncode != 0 and "1 error" in strict.stdout, strict.stdout
    assert "backend 'nosuchbackend' is required" in strict.stdout


def test_reference_is_deterministic_across_thread_counts():
    """The reference kernels sum every element in a fixed order (gathers, no atomics), so results
    are bitwise identical whatever the thread count. Sizes are large enough to be split."""
    x, w, b = torch.randn(64, 128), torch.randn(64, 128), torch.randn(64)
    xi, wi = torch.randn(2, 8, 16, 16), torch.randn(8, 8, 3, 3)
    xl = torch.randn(64, 200)

    def run():
        outs = []
        for fn, args in (
            (xkernels.fused_linear_relu, (x, w, b)),
            (lambda a, c: xkernels.conv2d(a, c, None, 1, 1), (xi, wi)),
            (lambda a: xkernels.layer_norm(a, [200]), (xl,)),
        ):
            leaves = [t.clone().requires_grad_() for t in args]
            out = fn(*leaves)
            outs += [out.detach(), *torch.autograd.grad(out, leaves, torch.ones_like(out))]
        return outs

    threads = torch.get_num_threads()
    try:
        with xkernels.use_backend("reference"):
            torch.set_num_threads(1)
            single = run()
            torch.set_num_threads(max(2, threads))
            multi = run()
    finally:
        torch.set_num_threads(threads)
    for i, (a, m) in enumerate(zip(single, multi)):
        assert torch.equal(a, m), f"result {i} differs between 1 and {max(2, threads)} threads"


def test_version_has_one_source():
    """pyproject.toml [project] version is the only place the version is written; the package reports it."""
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert xkernels.__version__ == version
    assert xkernels.info()["xkernels"] == version
