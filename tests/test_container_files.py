"""The container image's files (Containerfile, container/entrypoint.sh, scripts/{build,run,smoke}_image.sh),
checked without podman: the scripts parse, the Containerfile's promises hold (non-root user, cache volume,
JUPYTER argument, what it copies exists), and the entry point's cache seeding and XKERNELS_DEVICE stop run on the
host. Building and running the image itself: scripts/smoke_image.sh (docs/container.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import xkernels

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "container" / "entrypoint.sh"
SCRIPTS = [ENTRYPOINT, *(ROOT / "scripts" / f"{n}_image.sh" for n in ("build", "run", "smoke"))]
PKG_ROOT = str(Path(xkernels.__file__).resolve().parent.parent)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse_and_are_executable(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_containerfile_promises():
    text = (ROOT / "Containerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines()]
    assert "ARG JUPYTER=0" in lines
    assert "VOLUME /cache" in lines
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), users
    assert 'ENTRYPOINT ["/usr/local/bin/xkernels-entrypoint"]' in lines
    assert "COPY container/entrypoint.sh /usr/local/bin/xkernels-entrypoint" in lines
    # the warm-up runs after the last USER (the cache belongs to the non-root user) and before VOLUME
    assert text.index("python -m xkernels warmup") > text.rindex("\nUSER ") and text.index(
        "python -m xkernels warmup"
    ) < text.index("VOLUME /cache")
    for args in re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.M):
        for src in args.split()[:-1]:
            assert (ROOT / src).exists(), f"Containerfile copies {src}, which does not exist"
            assert src not in (ROOT / ".containerignore").read_text().split(), f"{src} is in .containerignore"
    # torch is the CPU wheel, never PyPI's default (CUDA) build
    assert '"torch==${TORCH_VERSION}+cpu"' in text


def _entrypoint(tmp_path, *cmd, **env):
    e = dict(os.environ)
    e["PYTHONPATH"] = PKG_ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(env)
    p = subprocess.run(["bash", str(ENTRYPOINT), *cmd], capture_output=True, text=True, env=e, timeout=300)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def warm(tmp_path):
    w = tmp_path / "warm"
    (w / "sycl" / "dev").mkdir(parents=True)
    (w / "sycl" / "dev" / "0.bin").write_bytes(b"kernel")
    return w


def test_entrypoint_seeds_an_empty_cache_and_keeps_a_filled_one(tmp_path, warm):
    cache = tmp_path / "cache"
    env = {"XKERNELS_CACHE_DIR": str(cache), "XKERNELS_WARM_CACHE": str(warm), "XKERNELS_INFO": "0"}
    rc, out = _entrypoint(tmp_path, "true", **env)
    assert rc == 0, out
    assert (cache / "sycl" / "dev" / "0.bin").read_bytes() == b"kernel"
    assert "seeded from the image's warm cache" in out
    (cache / "sycl" / "dev" / "0.bin").write_bytes(b"newer")
    rc, out = _entrypoint(tmp_path, "true", **env)
    assert rc == 0 and "seeded" not in out, out
    assert (cache / "sycl" / "dev" / "0.bin").read_bytes() == b"newer"  # a filled cache is left alone


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write any directory")
def test_entrypoint_falls_back_to_the_warm_cache_when_the_volume_is_read_only(tmp_path, warm):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o555)
    env = {"XKERNELS_CACHE_DIR": str(cache), "XKERNELS_WARM_CACHE": str(warm), "XKERNELS_INFO": "0"}
    rc, out = _entrypoint(tmp_path, "bash", "-c", 'echo "dir=$XKERNELS_CACHE_DIR"', **env)
    assert rc == 0, out
    assert f"dir={warm}" in out and "is not writable" in out


def test_entrypoint_runs_the_command_with_its_arguments(tmp_path, warm):
    env = {"XKERNELS_CACHE_DIR": str(tmp_path / "c"), "XKERNELS_WARM_CACHE": str(warm), "XKERNELS_INFO": "0"}
    rc, out = _entrypoint(tmp_path, sys.executable, "-c", "import sys; print('args', sys.argv[1:])", "a b", "c", **env)
    assert rc == 0 and "args ['a b', 'c']" in out, out


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a torch built without CUDA (the CPU wheel)")
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_entrypoint_prints_info_and_stops_when_the_requested_device_is_absent(tmp_path, warm):
    env = {"XKERNELS_CACHE_DIR": str(tmp_path / "c"), "XKERNELS_WARM_CACHE": str(warm), "COLUMNS": "200"}
    rc, out = _entrypoint(tmp_path, "echo", "RAN", XKERNELS_DEVICE="cuda", **env)
    assert rc == 3, out
    assert "XKERNELS_DEVICE=cuda: the cuda device is unavailable" in " ".join(out.split())
    assert "RAN" not in out
    rc, out = _entrypoint(tmp_path, "echo", "RAN", XKERNELS_DEVICE="cpu", **env)
    assert rc == 0, out
    assert "chosen: cpu" in out and out.rstrip().endswith("RAN")
