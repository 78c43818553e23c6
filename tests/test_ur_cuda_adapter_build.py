"""Unified Runtime's CUDA adapter built from ../shared/third_party by scripts/build_ur_cuda_adapter.sh (cached per
tarball pair; .ci/run builds it first), and the pip UR loader loading it on a machine without an NVIDIA driver.
Full tier (tests/conftest.py): it may start a 2-3 minute build.

The driver libraries are absent here, so the tests that need the loader to open the adapter put link stubs
(scripts/cuda_link_stubs.py: every cu*/nvml* function fails, cuInit with CUDA_ERROR_NO_DEVICE) on
LD_LIBRARY_PATH of a child process; they exist only in the test's temporary directory."""

from __future__ import annotations

import glob
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
LOADER = Path(sys.prefix) / "lib" / "libur_loader.so.0"
VENV_DDI = Path(sys.prefix) / "include" / "unified-runtime" / "ur_ddi.h"


@pytest.fixture(scope="module")
def prefix() -> Path:
    """The adapter's install prefix: UR_CUDA_ADAPTER_DIR (set by .ci/run), else the build script (cached)."""
    given = os.environ.get("UR_CUDA_ADAPTER_DIR")
    if given:
        return Path(given)
    p = subprocess.run(
        ["bash", str(REPO / "scripts" / "build_ur_cuda_adapter.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    assert p.returncode == 0, f"scripts/build_ur_cuda_adapter.sh failed:\n{p.stderr[-6000:]}"
    return Path(p.stdout.strip().splitlines()[-1])


def _readelf(lib: Path) -> str:
    return subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout


def _exports(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_adapter_needs_the_driver_by_soname_and_nothing_of_the_build(prefix):
    lib = prefix / "lib" / _ur_cuda.ADAPTER
    dyn = _readelf(lib)
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        assert f"[{soname}]" in dyn, dyn
    assert "libumf" not in dyn, "UMF must be linked in statically (the pip wheel's libumf is another version)"
    assert "RUNPATH" not in dyn and "RPATH" not in dyn, "a run path could point at the link stubs"
    assert "(SONAME)" in dyn and "[libur_adapter_cuda.so.0]" in dyn
    # nothing but the adapter, its links, its ABI stamp and the build notes is installed (never the stubs)
    files = sorted(p.name for p in (prefix / "lib").iterdir())
    expected = ["libur_adapter_cuda.so", "libur_adapter_cuda.so.0", lib.resolve().name, _ur_cuda.STAMP]
    assert files == sorted(expected), files


def test_adapter_exports_every_table_the_pip_loader_looks_up(prefix):
    if not LOADER.is_file():
        pytest.fail(f"no pip UR loader at {LOADER} (intel-cmplr-lib-ur is a requirement)")
    strings = subprocess.run(["strings", "-n", "8", str(LOADER)], capture_output=True, text=True, check=True).stdout
    wanted = {s for s in strings.split() if s.startswith("urGet") and s.endswith("ProcAddrTable")}
    assert len(wanted) >= 20, wanted
    assert wanted <= _exports(prefix / "lib" / _ur_cuda.ADAPTER), wanted - _exports(prefix / "lib" / _ur_cuda.ADAPTER)


def test_abi_stamp_is_the_third_party_sources(prefix, tmp_path):
    tar = sorted(THIRD_PARTY.glob("unified-runtime-*.tar.gz"))[0]
    with tarfile.open(tar) as t:
        m = next(m for m in t.getmembers() if m.name.endswith("include/unified-runtime/ur_ddi.h"))
        (tmp_path / "ur_ddi.h").write_bytes(t.extractfile(m).read())
    stamp = (prefix / "lib" / _ur_cuda.STAMP).read_text().split()
    assert stamp[0] == _ur_cuda.ddi_digest(tmp_path / "ur_ddi.h") and stamp[1] == tar.name


@pytest.fixture(scope="module")
def stubs(tmp_path_factory, prefix) -> Path:
    """Link stubs for libcuda.so.1 / libnvidia-ml.so.1, made for this test only."""
    nvml = sorted(glob.glob(str(prefix.parent / "nvml-*" / "nvidia" / "*" / "include")))
    cands = ["/usr/local/cuda/include", *glob.glob("/usr/local/cuda-*/include")]
    cuda = next((c for c in cands if Path(c, "cuda.h").is_file()), None)
    if not nvml or cuda is None:
        pytest.fail(f"no nvml.h under {prefix.parent} or no cuda.h: the build script should have left both")
    out = tmp_path_factory.mktemp("driver-stubs")
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "cuda_link_stubs.py"), "--cuda-include", cuda, "--nvml-include",
         nvml[-1], "--out", str(out)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return out


def _probe(loader: Path, env_extra: dict[str, str], devices: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UR_")}
    env.update(env_extra)
    args = [sys.executable, str(REPO / "scripts" / "ur_loader_probe.py"), "--loader", str(loader), "--json"]
    p = subprocess.run(
        args + ([] if devices else ["--no-devices"]), capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _venv_abi_matches(prefix: Path) -> bool:
    return VENV_DDI.is_file() and (prefix / "lib" / _ur_cuda.STAMP).read_text().split()[0] == _ur_cuda.ddi_digest(
        VENV_DDI
    )


def test_pip_loader_loads_the_adapter(prefix, stubs):
    """The pip loader finds the adapter on UR_ADAPTERS_SEARCH_PATH, opens it, fills its tables and lists its platform.
    With the pinned runtime (another UR ABI) only adapter and platform queries line up, so devices are asked only
    when the ABI matches; then the stub driver's CUDA_ERROR_NO_DEVICE gives a platform without devices."""
    match = _venv_abi_matches(prefix)
    env = {"UR_ADAPTERS_SEARCH_PATH": str(prefix / "lib"), "LD_LIBRARY_PATH": str(stubs)}
    got = _probe(LOADER, env, devices=match)
    cuda = [a for a in got["adapters"] if a["backend"] == "cuda"]
    assert len(cuda) == 1, got
    assert [p["name"] for p in cuda[0]["platforms"]] == ["NVIDIA CUDA BACKEND"], got
    if match:
        assert cuda[0]["platforms"][0]["devices"] == [] and cuda[0]["platforms"][0]["device_get"] == 0
    # without a driver library the loader skips the adapter (it cannot be opened) and carries on
    got = _probe(LOADER, {"UR_ADAPTERS_SEARCH_PATH": str(prefix / "lib")}, devices=True)
    assert not [a for a in got["adapters"] if a["backend"] == "cuda"], got


def test_xkernels_info_with_the_built_adapter(prefix, stubs):
    """xkernels never hands the runtime an adapter of another UR ABI (the pinned 2026.1.2 runtime here would crash
    in its first device query) and says so; with a matching runtime it reports the stub driver's 'no device'."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, LD_LIBRARY_PATH=str(stubs), XKERNELS_UR_CUDA_ADAPTER=str(prefix))
    env.pop("UR_ADAPTERS_SEARCH_PATH", None)
    p = subprocess.run(
        [sys.executable, "-m", "xkernels", "info", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stdout + p.stderr
    sc = json.loads(p.stdout[p.stdout.index("{") :])["sycl_cuda"]
    assert sc["adapter"] == str(prefix / "lib" / _ur_cuda.ADAPTER) and sc["devices"] == []
    if _venv_abi_matches(prefix):
        assert sc["search_path"] == str(prefix / "lib")
        assert "cuInit returned 100 (CUDA_ERROR_NO_DEVICE)" in sc["reason"], sc
    else:
        assert sc["search_path"] == "" and "another Unified Runtime ABI" in sc["reason"], sc


def test_bundle_loader_lists_the_adapter_without_devices(prefix, stubs, tmp_path):
    """With the runtime of the adapter's own UR ABI (the bundle of scripts/make_sycl_cuda_bundle.sh, when one was
    made): the whole device query works and the stub driver's answer comes back as zero devices."""
    bundles = sorted((REPO / ".sycl-cuda-bundle").glob("xkernels-sycl-cuda-*.tar.xz"))
    if not bundles:
        pytest.skip("no bundle in .sycl-cuda-bundle/ (scripts/make_sycl_cuda_bundle.sh makes one)")
    with tarfile.open(bundles[-1]) as t:
        members = [m for m in t.getmembers() if "/lib/" in m.name and "libsycl" not in m.name]
        t.extractall(tmp_path, members=members, filter="tar")
    lib = next(tmp_path.glob("*/lib"))
    env = {"LD_LIBRARY_PATH": f"{stubs}:{lib}"}
    got = _probe(lib / "libur_loader.so.0", env, devices=True)
    cuda = [a for a in got["adapters"] if a["backend"] == "cuda"]
    assert len(cuda) == 1, got
    plat = cuda[0]["platforms"]
    assert [(p["name"], p["devices"], p["device_get"]) for p in plat] == [("NVIDIA CUDA BACKEND", [], 0)], got
