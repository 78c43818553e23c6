"""Unified Runtime's CUDA adapter (docs/oneapi.md, "NVIDIA GPUs"): how xkernels finds it, the ABI check that keeps
the SYCL runtime away from an adapter built for another UR release, and what `xkernels.info()` / `python -m
xkernels info` say when there is no CUDA SYCL device. Pure Python plus the CLI in child processes; the tests that
build the adapter are in test_ur_cuda_adapter_build.py (full tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import xkernels
from xkernels import _ur_cuda

REPO = Path(__file__).resolve().parents[1]
PKG_ROOT = str(Path(xkernels.__file__).resolve().parent.parent)
THIRD_PARTY = REPO.parent / "shared" / "third_party"
VENV_DDI = Path(sys.prefix) / "include" / "unified-runtime" / "ur_ddi.h"

DDI_A = """
typedef struct ur_adapter_dditable_t {
  ur_pfnAdapterGet_t pfnGet;
  ur_pfnAdapterRelease_t pfnRelease;
} ur_adapter_dditable_t;
typedef struct ur_kernel_dditable_t {
  ur_pfnKernelCreate_t pfnCreate;
  ur_pfnKernelSetArgValue_t pfnSetArgValue;
} ur_kernel_dditable_t;
"""
DDI_B = DDI_A.replace("  ur_pfnKernelSetArgValue_t pfnSetArgValue;\n", "")  # a function dropped: another ABI


def _fake_runtime(tmp_path: Path, ddi: str) -> Path:
    """A prefix that looks like the pip SYCL runtime to runtime_prefix(): lib/libur_loader.so.0 + ur_ddi.h."""
    prefix = tmp_path / "runtime"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libur_loader.so.0").write_bytes(b"")
    (prefix / "include" / "unified-runtime").mkdir(parents=True)
    (prefix / "include" / "unified-runtime" / "ur_ddi.h").write_text(ddi)
    return prefix


def _fake_adapter(d: Path, ddi_for_stamp: str | None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    lib = d / _ur_cuda.ADAPTER
    lib.write_bytes(b"not really a library")
    if ddi_for_stamp is not None:
        header = d / "stamp_source_ur_ddi.h"
        header.write_text(ddi_for_stamp)
        (d / _ur_cuda.STAMP).write_text(_ur_cuda.ddi_digest(header) + " unified-runtime-test.tar.gz\n")
    return lib


@pytest.fixture(autouse=True)
def _keep_the_processs_lookup():
    """prepare() records what it found for info(); these tests call it with fakes, so put the real one back."""
    saved = _ur_cuda._lookup
    yield
    _ur_cuda._lookup = saved


# ------------------------------------------------------------------ the ABI digest


def test_ddi_layout_lists_tables_and_functions_in_order():
    assert _ur_cuda.ddi_layout(DDI_A) == [
        "ur_adapter_dditable_t.pfnGet",
        "ur_adapter_dditable_t.pfnRelease",
        "ur_kernel_dditable_t.pfnCreate",
        "ur_kernel_dditable_t.pfnSetArgValue",
    ]


def test_ddi_digest_tells_layouts_apart(tmp_path):
    a, b, a2 = tmp_path / "a.h", tmp_path / "b.h", tmp_path / "a2.h"
    a.write_text(DDI_A)
    b.write_text(DDI_B)
    a2.write_text("// another comment\n" + DDI_A.replace("  ", "    "))  # formatting is not ABI
    assert _ur_cuda.ddi_digest(a) == _ur_cuda.ddi_digest(a2)
    assert _ur_cuda.ddi_digest(a) != _ur_cuda.ddi_digest(b)
    assert _ur_cuda.ddi_digest(a).endswith("/4") and _ur_cuda.ddi_digest(b).endswith("/3")
    (tmp_path / "c.h").write_text("int x;")
    with pytest.raises(ValueError, match="no UR DDI tables"):
        _ur_cuda.ddi_digest(tmp_path / "c.h")


def _third_party_ur_ddi(tmp_path: Path) -> Path:
    tars = sorted(THIRD_PARTY.glob("unified-runtime-*.tar.gz"))
    if not tars:
        pytest.skip(f"no unified-runtime tarball in {THIRD_PARTY}")
    with tarfile.open(tars[0]) as t:
        member = next(m for m in t.getmembers() if m.name.endswith("include/unified-runtime/ur_ddi.h"))
        out = tmp_path / "ur_ddi_third_party.h"
        out.write_bytes(t.extractfile(member).read())
    return out


def test_third_party_ur_is_another_abi_than_the_pinned_runtime(tmp_path):
    """The fact behind the ABI check: the UR snapshot in ../shared/third_party and the pinned pip runtime (2026.1.2)
    both call themselves UR 0.12.0, but their dispatch tables differ (the snapshot has no urKernelSetArg*, which
    2026.1.2's libsycl calls). An adapter built from the snapshot must not be handed to this runtime."""
    if not VENV_DDI.is_file():
        pytest.skip(f"the SYCL runtime's ur_ddi.h is not at {VENV_DDI}")
    ours = _third_party_ur_ddi(tmp_path)
    runtime_layout = _ur_cuda.ddi_layout(VENV_DDI.read_text())
    snapshot_layout = _ur_cuda.ddi_layout(ours.read_text())
    if xkernels.info().get("sycl", {}).get("runtime", "").startswith("2026.2"):
        assert runtime_layout == snapshot_layout
        return
    assert _ur_cuda.ddi_digest(VENV_DDI) != _ur_cuda.ddi_digest(ours)
    assert "ur_kernel_dditable_t.pfnSetArgValue" in runtime_layout
    assert "ur_kernel_dditable_t.pfnSetArgValue" not in snapshot_layout


# ------------------------------------------------------------------ finding the adapter


def test_variable_names_the_library_a_directory_or_the_build_prefix(tmp_path):
    lib = _fake_adapter(tmp_path / "prefix" / "lib", None)
    for value in (lib, lib.parent, tmp_path / "prefix"):
        look = _ur_cuda.find_adapter({_ur_cuda.ENV_ADAPTER: str(value)}, package_dir=tmp_path / "pkg")
        assert (look.adapter, look.found_by, look.problem) == (str(lib), _ur_cuda.ENV_ADAPTER, "")


def test_variable_naming_nothing_is_reported_not_ignored(tmp_path):
    _fake_adapter(tmp_path / "pkg", None)  # one beside the package must not stand in for the user's choice
    look = _ur_cuda.find_adapter({_ur_cuda.ENV_ADAPTER: str(tmp_path / "nowhere")}, package_dir=tmp_path / "pkg")
    assert look.adapter == ""
    assert f"{_ur_cuda.ENV_ADAPTER}={tmp_path / 'nowhere'} names no libur_adapter_cuda.so.0" in look.problem


def test_beside_the_package_then_the_runtime(tmp_path, monkeypatch):
    prefix = _fake_runtime(tmp_path, DDI_A)
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(prefix))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    look = _ur_cuda.find_adapter({}, package_dir=pkg)
    assert look.adapter == "" and "scripts/build_ur_cuda_adapter.sh" in look.problem
    assert str(prefix / "lib") in look.problem and str(pkg) in look.problem
    in_runtime = _fake_adapter(prefix / "lib", None)
    look = _ur_cuda.find_adapter({}, package_dir=pkg)
    assert (look.adapter, look.found_by) == (str(in_runtime), "runtime")
    beside = _fake_adapter(pkg, None)
    look = _ur_cuda.find_adapter({}, package_dir=pkg)
    assert (look.adapter, look.found_by) == (str(beside), "package")


# ------------------------------------------------------------------ pointing the loader at it


def test_matching_adapter_goes_first_on_the_search_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(_fake_runtime(tmp_path, DDI_A)))
    lib = _fake_adapter(tmp_path / "adapter", DDI_A)
    env = {_ur_cuda.ENV_ADAPTER: str(lib.parent), _ur_cuda.SEARCH_PATH: "/users/own"}
    done = _ur_cuda.prepare(env, package_dir=tmp_path / "pkg")
    assert env[_ur_cuda.SEARCH_PATH] == f"{lib.parent},/users/own"
    assert done == {_ur_cuda.SEARCH_PATH: env[_ur_cuda.SEARCH_PATH]}
    look = _ur_cuda.lookup()
    assert look.problem == "" and look.abi.startswith("matches the runtime")
    assert _ur_cuda.prepare(env, package_dir=tmp_path / "pkg") == {}  # already there: not added twice
    assert env[_ur_cuda.SEARCH_PATH] == f"{lib.parent},/users/own"


def test_adapter_for_another_abi_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(_fake_runtime(tmp_path, DDI_A)))
    lib = _fake_adapter(tmp_path / "adapter", DDI_B)
    env = {_ur_cuda.ENV_ADAPTER: str(lib)}
    assert _ur_cuda.prepare(env, package_dir=tmp_path / "pkg") == {}
    assert _ur_cuda.SEARCH_PATH not in env
    st = _ur_cuda.status([], with_sycl=True)
    assert "another Unified Runtime ABI" in st["reason"] and "/3" in st["reason"] and "/4" in st["reason"]
    assert st["devices"] == []


def test_unstamped_adapter_is_used_but_says_the_abi_was_not_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(_fake_runtime(tmp_path, DDI_A)))
    lib = _fake_adapter(tmp_path / "adapter", None)
    env: dict[str, str] = {_ur_cuda.ENV_ADAPTER: str(lib)}
    _ur_cuda.prepare(env, package_dir=tmp_path / "pkg")
    assert env[_ur_cuda.SEARCH_PATH] == str(lib.parent)
    assert _ur_cuda.lookup().abi.startswith("not checked: no libur_adapter_cuda.ddi-layout")


def test_users_force_load_list_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(_fake_runtime(tmp_path, DDI_A)))
    lib = _fake_adapter(tmp_path / "adapter", DDI_A)
    env = {_ur_cuda.ENV_ADAPTER: str(lib), _ur_cuda.FORCE_LOAD: "/opt/x/libur_adapter_opencl.so.0"}
    assert _ur_cuda.prepare(env, package_dir=tmp_path / "pkg") == {}
    assert _ur_cuda.SEARCH_PATH not in env
    assert any(_ur_cuda.FORCE_LOAD in n for n in _ur_cuda.lookup().notes)


# ------------------------------------------------------------------ the reason in info()


def test_status_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(_fake_runtime(tmp_path, DDI_A)))
    _ur_cuda.prepare({}, package_dir=tmp_path / "pkg")  # nothing anywhere
    assert "no CUDA adapter" in _ur_cuda.status([], with_sycl=True)["reason"]
    assert _ur_cuda.status(None, with_sycl=False)["reason"] == "xkernels was built without SYCL"
    h200 = {"name": "NVIDIA H200", "backend": "cuda", "usable": True}
    st = _ur_cuda.status([h200], with_sycl=True)
    assert (st["reason"], st["devices"]) == ("", ["NVIDIA H200"])
    lib = _fake_adapter(tmp_path / "adapter", DDI_A)
    _ur_cuda.prepare({_ur_cuda.ENV_ADAPTER: str(lib)}, package_dir=tmp_path / "pkg")
    broken = {"name": "NVIDIA X", "backend": "cuda", "usable": False, "reason": "no fp64"}
    assert _ur_cuda.status([broken])["reason"] == "NVIDIA X: no fp64"


def test_status_without_a_driver_says_so(tmp_path, monkeypatch):
    """This machine's case: the adapter is there, the NVIDIA driver is not."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("an NVIDIA driver library is installed here")
    except OSError:
        pass
    monkeypatch.setenv("XKERNELS_SYCL_ROOT", str(_fake_runtime(tmp_path, DDI_A)))
    lib = _fake_adapter(tmp_path / "adapter", DDI_A)
    _ur_cuda.prepare({_ur_cuda.ENV_ADAPTER: str(lib)}, package_dir=tmp_path / "pkg")
    assert _ur_cuda.status([{"name": "cpu", "backend": "opencl", "usable": True}])["reason"].startswith(
        "no NVIDIA driver: libcuda.so.1 cannot be loaded"
    )


def _cli(*args, env_extra: dict[str, str]) -> tuple[int, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["COLUMNS"] = "250"
    env.pop("FORCE_COLOR", None)
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-m", "xkernels", *args], capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


def test_info_command_says_why_there_is_no_cuda_sycl_device(tmp_path):
    missing = tmp_path / "no-such-adapter"
    rc, out = _cli("info", env_extra={_ur_cuda.ENV_ADAPTER: str(missing)})
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if "SYCL on CUDA" in ln)
    assert "no CUDA device" in line and "names no libur_adapter_cuda.so.0" in out.replace("\n", " ")
    rc, out = _cli("info", "--json", env_extra={_ur_cuda.ENV_ADAPTER: str(missing)})
    assert rc == 0, out
    sc = json.loads(out[out.index("{") :])["sycl_cuda"]
    assert sc["devices"] == [] and sc["found_by"] == _ur_cuda.ENV_ADAPTER and str(missing) in sc["reason"]


def test_import_points_the_runtime_at_a_matching_adapter(tmp_path):
    """In a fresh process: xkernels' import sets UR_ADAPTERS_SEARCH_PATH before the first platform query, and the
    SYCL runtime then starts (the fake adapter is not a library: the loader skips it) with info() saying why."""
    if not VENV_DDI.is_file():
        pytest.skip(f"the SYCL runtime's ur_ddi.h is not at {VENV_DDI}")
    lib = _fake_adapter(tmp_path / "adapter", VENV_DDI.read_text())
    code = (
        "import os, json, xkernels; i = xkernels.info(); "
        "print(json.dumps([os.environ.get('UR_ADAPTERS_SEARCH_PATH'), i['sycl_cuda']]))"
    )
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, **{_ur_cuda.ENV_ADAPTER: str(lib)})
    env.pop("UR_ADAPTERS_SEARCH_PATH", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    search, sc = json.loads(p.stdout.strip().splitlines()[-1])
    assert search == str(lib.parent)
    assert sc["adapter"] == str(lib) and sc["abi"].startswith("matches the runtime") and sc["devices"] == []
    assert sc["reason"]  # no driver here, or (on a GPU machine) a fake adapter that cannot load
