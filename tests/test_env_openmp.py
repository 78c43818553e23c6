"""xkernels sets OMP_WAIT_POLICY=PASSIVE only when the user has not set it and no OpenMP runtime is
loaded yet (python/xkernels/_env.py; why: docs/performance.md)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1] / "python"

REPORT = ("import os, json; from xkernels import _env; "
          "print(json.dumps([_env.passive_openmp_status(), os.environ.get('OMP_WAIT_POLICY')]))")


def _run(code: str, **env_changes):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])
    env.update(env_changes)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_sets_passive_when_imported_before_torch():
    assert _run("import xkernels; " + REPORT) == ["set", "PASSIVE"]


def test_leaves_policy_alone_when_torch_came_first():
    assert _run("import torch, xkernels; " + REPORT) == ["too-late", None]


@pytest.mark.parametrize("value", ["ACTIVE", "passive"])
def test_user_value_wins(value):
    assert _run("import xkernels; " + REPORT, OMP_WAIT_POLICY=value) == ["user", value]
