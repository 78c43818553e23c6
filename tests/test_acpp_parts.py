"""The acpp launcher library compiled in parts (cmake/AcppBackend.cmake, csrc/sycl/aot/launcher_part.cpp).

A build compiles each kernel table's instantiations in several translation units and launchers.cpp (with
XK_AOT_IN_PARTS) only lists them, taking each launcher by name. What must hold: a table split into any number of
parts still yields every instantiation once; a build that leaves a table or a part out, or compiles one twice,
refuses to load, naming the instantiation (never a listing with a null launcher). The full acpp backend tests
check the real build; these build small libraries from the same sources with AdaptiveCpp's acpp (full tier).
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_adaptivecpp_known_bugs import _acpp

REPO = Path(__file__).resolve().parents[1]
AOT = REPO / "csrc" / "sycl" / "aot"
CMAKE = REPO / "cmake" / "AcppBackend.cmake"
TABLES = REPO / "csrc" / "sycl" / "kernels" / "tables.hpp"


def _cmake_parts() -> list[tuple[str, str, int]]:
    block = re.search(r"set\(XK_ACPP_TABLE_PARTS(.*?)\)", CMAKE.read_text(), re.S)
    assert block, "XK_ACPP_TABLE_PARTS not found in cmake/AcppBackend.cmake"
    return [(h, t, int(n)) for h, t, n in re.findall(r'"([\w.]+)\|(\w+)\|(\d+)"', block.group(1))]


def test_every_kernel_table_is_compiled_in_parts():
    # tables.hpp's all_tables against the build's part list (the library would refuse to load without it).
    tables = re.findall(r"table<(\w+)_file, (\w+)>", TABLES.read_text())
    assert tables, "no table<...> in tables.hpp"
    parts = _cmake_parts()
    assert sorted((f"{f}.hpp", t) for f, t in tables) == sorted((h, t) for h, t, _ in parts)
    assert all(n >= 1 for _, _, n in parts)


def _build(tmp_path: Path, name: str, parts: list[tuple[str, str, int, int]]) -> Path:
    """Links the listing and the given (header, table, part, parts) objects into lib<name>.so (-O0: the
    registration logic is under test, not the kernels' speed)."""
    cc = [_acpp(), "--acpp-targets=omp.library-only", "-O0", "-std=c++17", "-fPIC", "-fvisibility=hidden"]
    jobs = [[*cc, "-DXK_AOT_SUB_GROUP=1", "-DXK_AOT_IN_PARTS=1", "-c", str(AOT / "launchers.cpp"), "-o", "listing.o"]]
    objs = ["listing.o"]
    for i, (header, table, part, n) in enumerate(parts):
        obj = f"part{i}.o"
        defs = [
            f'-DXK_AOT_PART_HEADER="../kernels/{header}"',
            f"-DXK_AOT_PART_KERNELS={table}",
            f"-DXK_AOT_PART={part}",
        ]
        jobs.append([*cc, *defs, f"-DXK_AOT_PARTS={n}", "-c", str(AOT / "launcher_part.cpp"), "-o", obj])
        objs.append(obj)

    def run(argv):
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for p in pool.map(run, jobs):
            assert p.returncode == 0, p.stdout + p.stderr
    lib = tmp_path / f"lib{name}.so"
    p = run([_acpp(), "--acpp-targets=omp.library-only", "-shared", "-fPIC", "-o", str(lib), *objs])
    assert p.returncode == 0, p.stdout + p.stderr
    return lib


LOAD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
f = lib.xk_aot_library_v1
f.restype = ctypes.c_void_p
err = ctypes.create_string_buffer(4096)
print("LOADED" if f(err, ctypes.c_size_t(len(err))) else "ERROR " + err.value.decode())
"""


def _load(lib: Path) -> str:
    # A child process: the library carries AdaptiveCpp's runtime, which stays out of the test process.
    p = subprocess.run([sys.executable, "-c", LOAD, str(lib)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


@pytest.fixture(scope="module")
def split_layer_norm(tmp_path_factory) -> str:
    # layer_norm in three parts and nothing else: every layer_norm instantiation must be found, so the first
    # one missing is the first of the next table in all_tables (conv2d).
    tmp = tmp_path_factory.mktemp("acpp_parts")
    lib = _build(tmp, "split", [("layer_norm.hpp", "layer_norm_kernels", p, 3) for p in range(3)])
    return _load(lib)


def test_a_table_split_into_parts_yields_every_instantiation(split_layer_norm):
    assert split_layer_norm.startswith("ERROR "), split_layer_norm
    assert "no launcher of xk::conv2d" in split_layer_norm, split_layer_norm
    assert "layer_norm" not in split_layer_norm, split_layer_norm


def test_a_missing_part_is_named(tmp_path):
    # Part 1 of 2 left out: an instantiation of layer_norm itself is reported.
    out = _load(_build(tmp_path, "gap", [("layer_norm.hpp", "layer_norm_kernels", 0, 2)]))
    assert re.fullmatch(r"ERROR .*no launcher of xk::layer_norm\w* <\w+>: its build left .*", out), out


def test_a_part_compiled_twice_is_refused(tmp_path):
    out = _load(_build(tmp_path, "twice", [("layer_norm.hpp", "layer_norm_kernels", 0, 1)] * 2))
    assert re.fullmatch(r"ERROR .*two launchers of xk::layer_norm\w* <\w+>: two of its parts overlap.*", out), out
