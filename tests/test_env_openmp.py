"""xkernels sets GOMP_SPINCOUNT only when the user has set neither it nor OMP_WAIT_POLICY and no
OpenMP runtime is loaded yet (python/xkernels/_env.py; why: docs/performance.md)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The directory holding the xkernels package in use (found without importing it: the point of these
# tests is what importing does): python/ after an in-place build, site-packages after pip install.
PYTHON_DIR = Path(importlib.util.find_spec("xkernels").origin).resolve().parent.parent
KEYS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
REPORT = (
    "import os, json; from xkernels import _env; "
    "print(json.dumps([_env.openmp_spin_status(), os.environ.get('GOMP_SPINCOUNT'), "
    "os.environ.get('OMP_WAIT_POLICY')]))"
)


def _run(code: str, **env_changes):
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])
    env.update(env_changes)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_sets_spin_count_when_imported_before_torch():
    from xkernels import _env

    assert _run("import xkernels; " + REPORT) == ["set", _env.OPENMP_SPIN_COUNT, None]


def test_leaves_openmp_alone_when_torch_came_first():
    assert _run("import torch, xkernels; " + REPORT) == ["too-late", None, None]


@pytest.mark.parametrize(
    "key,value", [("GOMP_SPINCOUNT", "300000"), ("OMP_WAIT_POLICY", "ACTIVE"), ("OMP_WAIT_POLICY", "passive")]
)
def test_user_value_wins(key, value):
    want = ["user", value if key == "GOMP_SPINCOUNT" else None, value if key == "OMP_WAIT_POLICY" else None]
    assert _run("import xkernels; " + REPORT, **{key: value}) == want
