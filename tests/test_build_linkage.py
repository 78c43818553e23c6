"""The built extension shares the process's libstdc++ (DT_NEEDED libstdc++.so.6, no static copy inside).

A compiler with only a static libstdc++ (the GPU machine's /opt/gcc g++ 13.3) once put a second copy of the C++
runtime into _C whose locale was never set up: the first error message with an integer in it crashed the
process (docs/reliability.md). CMakeLists.txt links the shared runtime then, and checks every link with
buildtools/elf_needed.py; this test checks the library the suite imports, and that the checker tells the two
kinds of library apart.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

import xkernels
from buildtools import elf_needed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF linkage: Linux only")


def test_extension_uses_the_shared_libstdcxx():
    lib = xkernels._C.__file__
    assert any(d.startswith("libstdc++.so") for d in elf_needed.needed(lib)), elf_needed.needed(lib)
    assert not elf_needed.defines_libstdcxx(lib)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_checker_tells_static_from_shared(tmp_path):
    src = tmp_path / "f.cpp"
    src.write_text("#include <sstream>\nstd::string f(long v) { std::ostringstream s; s << v; return s.str(); }\n")
    shared, static = tmp_path / "shared.so", tmp_path / "static.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(src), "-o", str(shared)], check=True)
    subprocess.run(["g++", "-shared", "-fPIC", str(src), "-static-libstdc++", "-o", str(static)], check=True)
    assert elf_needed.main([str(shared)]) == 0
    assert elf_needed.main([str(static)]) == 1
    assert elf_needed.defines_libstdcxx(static) and not elf_needed.defines_libstdcxx(shared)
