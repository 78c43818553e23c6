"""The planted-bug table of scripts/mutants.py stays in step with the sources: every entry's original
snippet occurs exactly once in its file (a stale entry would silently plant nothing), ids are unique,
the mapped test files exist, and the table is large enough. Fast: reads files only, builds nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("xkernels_mutants", ROOT / "scripts" / "mutants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_every_snippet_found_exactly_once():
    mutants = _load()
    assert mutants.check_table(ROOT) == []


def test_table_covers_the_required_areas():
    mutants = _load()
    table = mutants.MUTANTS
    assert len(table) >= 40
    files = {m.file for m in table}
    for required in (
        "csrc/shapes.cpp",
        "python/xkernels/ops.py",
        "python/xkernels/nn.py",
        "python/xkernels/tolerances.py",
        "csrc/cpu/fused_linear_relu.cpp",
        "csrc/cpu/conv2d.cpp",
        "csrc/cpu/layer_norm.cpp",
        "csrc/sycl/kernels/fused_linear_relu.hpp",
        "csrc/sycl/kernels/conv2d.hpp",
        "csrc/sycl/kernels/layer_norm.hpp",
    ):
        assert required in files, f"no planted bug in {required}"
    for m in table:
        assert m.tests.strip() and m.description.strip(), m.id


def test_a_missing_snippet_is_an_error(tmp_path):
    """The runner refuses to apply an entry whose snippet is gone (rather than running unchanged code)."""
    mutants = _load()
    m = mutants.MUTANTS[0]
    (tmp_path / m.file).parent.mkdir(parents=True)
    (tmp_path / m.file).write_text("// the snippet is not here\n")
    problems = mutants.check_table(tmp_path)
    assert any(m.id in p and "0 times" in p for p in problems)
