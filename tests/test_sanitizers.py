"""The C++ reference kernels and host code run clean under AddressSanitizer and
UndefinedBehaviorSanitizer: scripts/sanitize_check.sh builds a sanitizer build (SYCL off) into a
scratch directory and runs the reference-backend op tests with libasan preloaded, failing on any
report. A build plus the run takes several minutes on a 2-core machine, so this is a long test
(XKERNELS_RUN_SLOW=1); CI can also call the script directly."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from _reliability import ROOT, slow_marks

pytestmark = slow_marks()


def test_reference_kernels_clean_under_asan_ubsan(tmp_path):
    if shutil.which("ninja") is None and shutil.which("cmake") is None:
        pytest.skip("cmake/ninja not available for the sanitizer build")
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "sanitize_check.sh")],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=3600,
        env={
            **os.environ,
            "SANITIZE_OUT": str(tmp_path / "out"),
            "SANITIZE_BUILD_DIR": str(ROOT / "build" / "sanitize"),
        },
    )
    assert r.returncode == 0 and "sanitize_check: OK" in r.stdout, (
        f"exit {r.returncode}\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    )
