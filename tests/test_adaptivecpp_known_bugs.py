"""Known bugs of AdaptiveCpp (the second SYCL implementation behind the acpp backend), kept as reproducers.

Each test compiles a minimal program with the AdaptiveCpp the build used (ACPP_ROOT, or acpp on PATH) and asserts
the behaviour recorded here, so that a fixed AdaptiveCpp shows up as a failing test (time to revisit the choice it
forced), not as silence.

* tests/adaptivecpp/tiled_barrier.cpp, --acpp-targets=omp: the compiler crashes (SIGSEGV in
  hipsycl::compiler::SubCfgFormationPass / VectorizationAnalysis::pushMissingOperands) on a kernel with local
  memory tiles between two barriers in a loop: the shape of xkernels' linear_gemm_tiled, which crashes the same
  way. This is why the acpp backend compiles for omp.library-only, where the same program compiles and computes
  the exact result (checked below).
* tests/adaptivecpp/sub_group_ids.cpp, omp.library-only: with sub-groups 1 wide, every work-item of a 64-item
  work-group reports sub-group 0 of 1 instead of sub-group i of 64. Found by tests/test_fuzz.py (layer_norm in
  place on the acpp backend: all work-items took the same row, and one read an element another had already
  normalized); the layer_norm kernels now derive their sub-group slot from the local id (xk::sub_group_slot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import _backends

HERE = Path(__file__).resolve().parent / "adaptivecpp"


def _acpp() -> str:
    root = os.environ.get("ACPP_ROOT")
    exe = str(Path(root) / "bin" / "acpp") if root else shutil.which("acpp")
    if exe and Path(exe).is_file():
        return exe
    why = "AdaptiveCpp's acpp not found (set ACPP_ROOT or put acpp on PATH)"
    if _backends.is_required("acpp"):
        pytest.fail(f"the acpp backend is required here but {why}", pytrace=False)
    pytest.skip(why)


def _compile(
    target: str, tmp_path: Path, source: str = "tiled_barrier.cpp"
) -> tuple[subprocess.CompletedProcess, Path]:
    exe = tmp_path / f"{Path(source).stem}_{target.replace('.', '_')}"
    p = subprocess.run(
        [_acpp(), "-O2", f"--acpp-targets={target}", str(HERE / source), "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return p, exe


def test_known_bug_omp_target_crashes_on_a_tiled_barrier_kernel(tmp_path):
    p, _exe = _compile("omp", tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "SubCfgFormationPass" in out, (
        "AdaptiveCpp's omp target no longer crashes on tests/adaptivecpp/tiled_barrier.cpp: the known bug looks "
        "fixed, so the acpp backend may use the faster omp target (cmake/AcppBackend.cmake). Compiler said:\n"
        + out[-2000:]
    )


def test_library_only_target_compiles_and_computes_it_exactly(tmp_path):
    p, exe = _compile("omp.library-only", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "wrong 0 of" in run.stdout, run.stdout + run.stderr


def test_known_bug_library_only_sub_group_ids_do_not_partition_the_work_group(tmp_path):
    p, exe = _compile("omp.library-only", tmp_path, "sub_group_ids.cpp")
    assert p.returncode == 0, p.stdout + p.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "local 63: lane 0 width 1 sub-group 0 of 1" in run.stdout, (
        "AdaptiveCpp now reports sub-group ids as SYCL 2020 specifies (expected 'sub-group 63 of 64' for local 63): "
        f"the known bug looks fixed. Output:\n{run.stdout}"
    )
