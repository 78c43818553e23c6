"""The oneAPI ahead-of-time build planner (buildtools/oneapi.py) and its CMake wiring
(cmake/OneAPIAOT.cmake), against fake oneAPI installations laid out in temporary directories:
both ONEAPI_ROOT layouts and PATH, with and without the CUDA plugin, and broken ones.

The fake icpx is a script that prints a real icpx's --version text, accepts (or, to play an old
compiler, rejects) the floating-point flags, and, for the CMake test, records every command line
it is given and writes the requested outputs. What cannot be tested here (no icpx, no Intel or
NVIDIA GPU): that real icpx compiles the kernels, and that the images load; see docs/oneapi.md.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import _backends

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from buildtools import oneapi  # noqa: E402

FP = [
    "-fp-model=precise",
    "-fno-fast-math",
    "-ffp-contract=off",
    "-fno-associative-math",
    "-fno-reciprocal-math",
    "-foffload-fp32-prec-div",
    "-foffload-fp32-prec-sqrt",
]
VERSION_TEXT = """Intel(R) oneAPI DPC++/C++ Compiler {v} ({v}.20250605)
Target: x86_64-unknown-linux-gnu
Thread model: posix
InstalledDir: {bindir}/compiler
Configuration file: {bindir}/compiler/../icpx.cfg
"""

KERNEL_LN = """// layer norm kernels (test stand-in)
// xkernels-aot: xk::layer_norm_fwd<float>
// xkernels-aot: xk::layer_norm_fwd<sycl::half>
#pragma once
#include "common.hpp"
namespace xk {
template <typename T>
SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))
void layer_norm_fwd(const T* x, T* y, int n) { for (int i = 0; i < n; ++i) y[i] = x[i]; }
}  // namespace xk
"""
KERNEL_CONV = """#pragma once
#include "common.hpp"
// xkernels-aot: xk::conv2d_direct<float, true>
namespace xk {
template <typename T, bool HasBias>
SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<3>))
void conv2d_direct(const T* x, T* y) { y[0] = HasBias ? x[0] : T(0); }
}  // namespace xk
"""
COMMON = (
    "#pragma once\n// helpers shared by kernel files: no kernels here\n"
    "namespace xk { inline int cdiv(int a, int b) { return (a + b - 1) / b; } }\n"
)


# ------------------------------------------------------------------ fixtures: fake installations


def _write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_icpx_script(bindir: Path, version: str = "2026.1.0", reject_fp: bool = False, fail: bool = False) -> str:
    """A stand-in for icpx: --version, the flag probe, and 'compiling' (records argv, writes -o)."""
    return f"""#!{sys.executable}
import json, os, subprocess, sys
args = sys.argv[1:]
if {fail!r}:
    sys.stderr.write("icpx: error while loading shared libraries: libsvml.so: cannot open shared object file\\n")
    sys.exit(127)
if args == ["--version"]:
    sys.stdout.write({VERSION_TEXT.format(v=version, bindir=bindir)!r})
    sys.exit(0)
if {reject_fp!r} and "-foffload-fp32-prec-div" in args:
    sys.stderr.write("icpx: error: unknown argument: '-foffload-fp32-prec-div'\\n")
    sys.exit(1)
log = os.environ.get("XK_FAKE_ICPX_LOG")
if log and "-fsyntax-only" not in args:
    with open(log, "a") as f:
        f.write(json.dumps(args) + "\\n")
if "-o" in args:
    out = args[args.index("-o") + 1]
    if "-shared" in args:  # a real (empty) shared library, so that CMake can link against it
        soname = [a for a in args if a.startswith("-Wl,-soname,")]
        subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", os.devnull, "-o", out, *soname], check=True)
    else:
        open(out, "w").close()
sys.exit(0)
"""


def fake_oneapi(
    root: Path,
    layout: str = "component",
    version: str = "2026.1.0",
    cuda_adapter: bool = False,
    libsycl: int = 9,
    ocloc: bool = False,
    reject_fp: bool = False,
    fail: bool = False,
    opencl_aot: bool = False,
) -> Path:
    """A oneAPI installation: <root>/compiler/latest/... (component) or <root>/... (unified)."""
    prefix = root / "compiler" / "latest" if layout == "component" else root
    bindir = prefix / "bin"
    _write_exe(bindir / "icpx", fake_icpx_script(bindir, version, reject_fp, fail))
    (prefix / "include" / "sycl").mkdir(parents=True, exist_ok=True)
    (prefix / "include" / "sycl" / "sycl.hpp").write_text("// fake\n")
    lib = prefix / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for name in ("libsycl.so", f"libsycl.so.{libsycl}", f"libsycl.so.{libsycl}.0.0", "libur_loader.so.0"):
        (lib / name).write_text("")
    if cuda_adapter:
        (lib / "libur_adapter_cuda.so").write_text("")
        (lib / "libur_adapter_cuda.so.0").write_text("")
    if ocloc:
        _write_exe(bindir / "ocloc", "#!/bin/sh\nexit 0\n")
    if opencl_aot:
        _write_exe(bindir / "opencl-aot", "#!/bin/sh\nexit 0\n")
    return root


def fake_cuda_toolkit(root: Path) -> Path:
    (root / "nvvm" / "libdevice").mkdir(parents=True, exist_ok=True)
    (root / "nvvm" / "libdevice" / "libdevice.10.bc").write_text("")
    _write_exe(root / "bin" / "ptxas", "#!/bin/sh\nexit 0\n")
    return root


def fake_repo(root: Path, kernels: dict[str, str] | None = None) -> Path:
    """The parts of the repository the planner reads: cmake/FPFlags.cmake (the real one) and kernel files."""
    (root / "cmake").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "cmake" / "FPFlags.cmake", root / "cmake" / "FPFlags.cmake")
    kdir = root / "csrc" / "sycl" / "kernels"
    kdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "csrc" / "sycl" / "aot_kernels.h", root / "csrc" / "sycl" / "aot_kernels.h")
    for name, text in (
        kernels
        if kernels is not None
        else {"layer_norm.hpp": KERNEL_LN, "conv2d.hpp": KERNEL_CONV, "common.hpp": COMMON}
    ).items():
        (kdir / name).write_text(text)
    return root


def fake_host_sycl(root: Path, major: int = 9) -> Path:
    """A pip-style SYCL runtime prefix (<prefix>/lib/libsycl.so.N), as the rest of xkernels links."""
    (root / "lib").mkdir(parents=True, exist_ok=True)
    (root / "lib" / f"libsycl.so.{major}").write_text("")
    return root


def plan_env(tmp: Path, **kw: str) -> dict[str, str]:
    """A clean environment: no oneAPI/CUDA variables from the machine, PATH without a real icpx."""
    empty = tmp / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {"PATH": f"{empty}:/usr/bin:/bin", "HOME": str(tmp)}
    env.update(kw)
    return env


@pytest.fixture
def repo(tmp_path):
    return fake_repo(tmp_path / "repo")


def plan_for(tmp_path, repo, env, host=None):
    host = fake_host_sycl(tmp_path / "venv") if host is None else host
    return oneapi.make_plan(
        env, repo, tmp_path / "build", tmp_path / "pkg", str(host) if host else "", system_cuda_dirs=()
    )


# ------------------------------------------------------------------ discovery and validation


@pytest.mark.parametrize("layout", ["component", "unified"])
def test_finds_icpx_in_both_oneapi_root_layouts(tmp_path, repo, layout):
    root = fake_oneapi(tmp_path / "oneapi", layout=layout)
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    prefix = root / "compiler" / "latest" if layout == "component" else root
    assert plan.toolchain.icpx == prefix / "bin" / "icpx"
    assert plan.toolchain.layout == layout
    assert plan.toolchain.prefix == prefix
    assert plan.toolchain.version == (2026, 1, 0)
    assert plan.toolchain.libsycl_major == 9
    assert plan.toolchain.cuda_adapter is None


def test_finds_icpx_on_path_without_oneapi_root(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", layout="unified")
    env = plan_env(tmp_path)
    env["PATH"] = f"{root / 'bin'}:{env['PATH']}"
    plan = plan_for(tmp_path, repo, env)
    assert plan.toolchain.layout == "PATH"
    assert plan.toolchain.icpx == root / "bin" / "icpx"
    assert plan.toolchain.prefix == root


def test_oneapi_root_wins_over_another_icpx_on_path(tmp_path, repo):
    chosen = fake_oneapi(tmp_path / "chosen")
    other = fake_oneapi(tmp_path / "other", layout="unified", version="2025.1.0")
    env = plan_env(tmp_path, ONEAPI_ROOT=str(chosen))
    env["PATH"] = f"{other / 'bin'}:{env['PATH']}"
    plan = plan_for(tmp_path, repo, env)
    assert plan.toolchain.icpx == chosen / "compiler" / "latest" / "bin" / "icpx"
    assert plan.toolchain.version == (2026, 1, 0)


def test_no_toolchain_means_no_plan(tmp_path, repo):
    assert plan_for(tmp_path, repo, plan_env(tmp_path)) is None


def _error(tmp_path, repo, env, host=None) -> str:
    with pytest.raises(oneapi.OneAPIError) as e:
        plan_for(tmp_path, repo, env, host)
    return str(e.value)


def test_oneapi_root_not_a_directory(tmp_path, repo):
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(tmp_path / "nope")))
    assert f"ONEAPI_ROOT={tmp_path / 'nope'} is not a directory" in msg
    assert "setvars.sh" in msg and "XKERNELS_SYCL_AOT=off" in msg


def test_oneapi_root_without_icpx_names_both_places_it_looked(tmp_path, repo):
    root = tmp_path / "oneapi"
    (root / "compiler" / "latest" / "bin").mkdir(parents=True)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert str(root / "compiler" / "latest" / "bin" / "icpx") in msg
    assert str(root / "bin" / "icpx") in msg
    assert "XKERNELS_SYCL_AOT=off" in msg


def test_icpx_not_executable(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi")
    icpx = root / "compiler" / "latest" / "bin" / "icpx"
    icpx.chmod(0o644)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert f"{icpx} (found through ONEAPI_ROOT={root}) is not an executable file" in msg
    assert f"chmod +x {icpx}" in msg


def test_icpx_broken_link(tmp_path, repo):
    root = tmp_path / "oneapi"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "icpx").symlink_to(root / "bin" / "compiler" / "icpx-gone")
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "is a broken link" in msg and "icpx-gone" in msg


def test_icpx_that_fails_to_run(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", fail=True)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "--version` failed with exit code 127" in msg
    assert "libsvml.so: cannot open shared object file" in msg  # the compiler's own words
    assert "setvars.sh" in msg


def test_a_compiler_that_is_not_icpx(tmp_path, repo):
    root = tmp_path / "oneapi"
    fake_oneapi(root, layout="unified")
    _write_exe(root / "bin" / "icpx", "#!/bin/sh\necho 'clang version 19.1.0'\necho 'Target: x86_64-pc-linux-gnu'\n")
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "printed no Intel oneAPI DPC++/C++ Compiler version" in msg and "clang version 19.1.0" in msg


def test_icpx_too_old(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", version="2024.2.1")
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "is oneAPI 2024.2.1; xkernels needs >= 2025.0" in msg


def test_pre_2024_layout_is_recognised(tmp_path, repo):
    root = tmp_path / "oneapi"
    _write_exe(root / "compiler" / "latest" / "linux" / "bin" / "icpx", "#!/bin/sh\n")
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "pre-2024 oneAPI installation" in msg


def test_compiler_that_rejects_the_fp_flags(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", version="2025.0.4", reject_fp=True)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "icpx 2025.0.4 rejected xkernels' floating-point flags" in msg
    assert "unknown argument: '-foffload-fp32-prec-div'" in msg
    assert "oneAPI >= 2025.1" in msg


def test_incomplete_installation(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi")
    (root / "compiler" / "latest" / "include" / "sycl" / "sycl.hpp").unlink()
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert "is incomplete: missing" in msg
    assert str(root / "compiler" / "latest" / "include" / "sycl" / "sycl.hpp") in msg


def test_libsycl_major_mismatch_with_the_runtime_xkernels_links(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", version="2025.3.1", libsycl=8)
    host = fake_host_sycl(tmp_path / "venv", major=9)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)), host)
    assert "libsycl.so.8" in msg and "libsycl.so.9" in msg
    assert "pip install 'intel-sycl-rt==2025.3.*'" in msg


def test_without_a_sycl_runtime_next_to_python_the_host_builds_against_oneapi(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)), host=False)
    prefix = root / "compiler" / "latest"
    assert plan.sycl_root_override == str(prefix)
    assert f"-DXKERNELS_SYCL_ROOT={prefix}" in plan.cmake_args(tmp_path / "f.cmake")


# ------------------------------------------------------------------ targets


def test_default_targets_without_cuda_plugin(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi")
    cuda = fake_cuda_toolkit(tmp_path / "cuda")  # a toolkit alone does not add NVIDIA code
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda)))
    assert plan.targets.targets == ("spir64",)
    assert plan.targets.backend_options == ()
    assert plan.targets.provider_spec == "spir64"
    assert plan.targets.source == "default"
    assert not any("--cuda-path" in a for s in plan.steps for a in s.argv)


def test_default_targets_with_cuda_plugin(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda)))
    assert plan.toolchain.cuda_adapter == root / "compiler" / "latest" / "lib" / "libur_adapter_cuda.so"
    assert plan.targets.targets == ("spir64", "nvptx64-nvidia-cuda")
    assert plan.targets.backend_options == ("-Xsycl-target-backend=nvptx64-nvidia-cuda", "--offload-arch=sm_75")
    assert plan.targets.provider_spec == "spir64 nvptx64-nvidia-cuda:sm_75"
    assert plan.targets.cuda_toolkit == cuda


def test_cuda_plugin_without_toolkit_builds_no_nvidia_image_and_says_so(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert plan.targets.targets == ("spir64",)
    assert any("no CUDA toolkit" in n for n in plan.targets.notes)
    assert "no CUDA toolkit" in plan.summary()


def test_cuda_toolkit_found_through_nvcc_on_path(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    _write_exe(cuda / "bin" / "nvcc", "#!/bin/sh\n")
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root))
    env["PATH"] = f"{cuda / 'bin'}:{env['PATH']}"
    assert plan_for(tmp_path, repo, env).targets.cuda_toolkit == cuda


def test_cuda_arch_override(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda), XKERNELS_SYCL_CUDA_ARCH="sm_90")
    plan = plan_for(tmp_path, repo, env)
    assert all("--offload-arch=sm_90" in s.argv for s in plan.steps)
    assert plan.targets.provider_spec == "spir64 nvptx64-nvidia-cuda:sm_90"
    env["XKERNELS_SYCL_CUDA_ARCH"] = "90"
    assert "is not an NVIDIA architecture" in _error(tmp_path, repo, env)
    env.update(XKERNELS_SYCL_CUDA_ARCH="sm_90", XKERNELS_SYCL_TARGETS="spir64")
    assert (
        "XKERNELS_SYCL_CUDA_ARCH=sm_90 is ignored: no nvptx64-nvidia-cuda image is built"
        in plan_for(tmp_path, repo, env).summary()
    )


def test_intel_aot_devices_add_spir64_gen(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", ocloc=True)
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), XKERNELS_SYCL_AOT_DEVICES="pvc, bmg-g21"))
    assert plan.targets.targets == ("spir64", "spir64_gen")
    assert plan.targets.backend_options == ("-Xsycl-target-backend=spir64_gen", "-device pvc,bmg-g21")
    assert plan.targets.provider_spec == "spir64 spir64_gen:pvc,bmg-g21"


def test_spir64_gen_needs_ocloc_and_devices(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi")
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), XKERNELS_SYCL_AOT_DEVICES="pvc"))
    assert "needs Intel's offline compiler ocloc" in msg
    root2 = fake_oneapi(tmp_path / "oneapi2", ocloc=True)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root2), XKERNELS_SYCL_TARGETS="spir64,spir64_gen"))
    assert "XKERNELS_SYCL_AOT_DEVICES=pvc,bmg-g21" in msg
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root2), XKERNELS_SYCL_AOT_DEVICES="pvc;rm -rf"))
    assert "is not an ocloc device name" in msg


def test_cpu_aot_needs_opencl_aot(tmp_path, repo):
    env = plan_env(tmp_path, XKERNELS_SYCL_TARGETS="spir64,spir64_x86_64")
    env["ONEAPI_ROOT"] = str(fake_oneapi(tmp_path / "without"))
    assert "needs opencl-aot" in _error(tmp_path, repo, env)
    env["ONEAPI_ROOT"] = str(fake_oneapi(tmp_path / "with", opencl_aot=True))
    assert plan_for(tmp_path, repo, env).targets.provider_spec == "spir64 spir64_x86_64"


def test_explicit_targets(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    env = plan_env(
        tmp_path,
        ONEAPI_ROOT=str(root),
        CUDA_PATH=str(cuda),
        XKERNELS_SYCL_TARGETS="nvptx64-nvidia-cuda, spir64-unknown-unknown,intel_gpu_pvc,spir64",
    )
    plan = plan_for(tmp_path, repo, env)
    assert plan.targets.targets == ("nvptx64-nvidia-cuda", "spir64", "intel_gpu_pvc")
    assert plan.targets.source == "XKERNELS_SYCL_TARGETS"
    assert "-fsycl-targets=nvptx64-nvidia-cuda,spir64,intel_gpu_pvc" in plan.steps[0].argv
    assert plan.targets.provider_spec == "nvptx64-nvidia-cuda:sm_75 spir64 intel_gpu_pvc"


@pytest.mark.parametrize(
    "targets,adapter,toolkit,fragment",
    [
        ("spir64,amdgcn-amd-amdhsa", True, True, "unknown target 'amdgcn-amd-amdhsa'"),
        ("nvptx64-nvidia-cuda", False, True, "the oneAPI CUDA plugin is not installed (no libur_adapter_cuda.so in"),
        ("nvidia_gpu_sm_90", True, False, "no CUDA toolkit was found"),
        (" , ", True, True, "names no target"),
    ],
)
def test_explicit_targets_that_cannot_be_built(tmp_path, repo, targets, adapter, toolkit, fragment):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=adapter)
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root), XKERNELS_SYCL_TARGETS=targets)
    if toolkit:
        env["CUDA_PATH"] = str(fake_cuda_toolkit(tmp_path / "cuda"))
    assert fragment in _error(tmp_path, repo, env)


# ------------------------------------------------------------------ the exact commands


def test_exact_commands_component_layout_with_cuda_plugin(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    host = fake_host_sycl(tmp_path / "venv")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda)), host)
    icpx = str(root / "compiler" / "latest" / "bin" / "icpx")
    b, k = tmp_path / "build", repo / "csrc" / "sycl" / "kernels"
    targets = "-fsycl-targets=spir64,nvptx64-nvidia-cuda"
    backend = ["-Xsycl-target-backend=nvptx64-nvidia-cuda", "--offload-arch=sm_75"]
    compile_head = [
        icpx,
        "-fsycl",
        targets,
        *backend,
        f"--cuda-path={cuda}",
        "-std=c++17",
        "-O2",
        "-fPIC",
        *FP,
        f"-I{k}",
        f"-I{repo / 'csrc' / 'sycl'}",
        "-c",
    ]
    assert [list(s.argv) for s in plan.steps] == [
        [*compile_head, f"{b}/gen/kernels_conv2d.cpp", "-o", f"{b}/obj/kernels_conv2d.o"],
        [*compile_head, f"{b}/gen/kernels_layer_norm.cpp", "-o", f"{b}/obj/kernels_layer_norm.o"],
        [*compile_head, f"{b}/gen/index.cpp", "-o", f"{b}/obj/index.o"],
        [
            icpx,
            "-fsycl",
            targets,
            *backend,
            f"--cuda-path={cuda}",
            "-O2",
            "-fPIC",
            *FP,
            "-shared",
            "-Wl,-soname,libxkernels_sycl_aot.so",
            f"-Wl,-rpath,$ORIGIN:$ORIGIN/../../..:{host}/lib:{root}/compiler/latest/lib",
            "-o",
            f"{tmp_path}/pkg/libxkernels_sycl_aot.so",
            f"{b}/obj/kernels_conv2d.o",
            f"{b}/obj/kernels_layer_norm.o",
            f"{b}/obj/index.o",
        ],
    ]
    # Every kernel file may include the shared helpers, so each compile depends on all of them.
    assert set(plan.steps[0].depends) >= {k / "common.hpp", k / "conv2d.hpp", k / "layer_norm.hpp"}
    assert plan.kernels == {
        "conv2d.hpp": ["xk::conv2d_direct<float, true>"],
        "layer_norm.hpp": ["xk::layer_norm_fwd<float>", "xk::layer_norm_fwd<sycl::half>"],
    }


def test_exact_commands_unified_layout_spirv_only(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", layout="unified")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    link = list(plan.steps[-1].argv)
    assert link[:3] == [str(root / "bin" / "icpx"), "-fsycl", "-fsycl-targets=spir64"]
    assert link[3:5] == ["-O2", "-fPIC"]  # no backend options for generic SPIR-V
    assert link[5 : 5 + len(FP)] == FP


def test_fp_flags_are_the_policy_of_fpflags_cmake(tmp_path, repo):
    """icpx's default model is fast: -fp-model=precise first, then the project's list, then IEEE div/sqrt."""
    assert oneapi.icpx_fp_flags(REPO) == FP
    assert oneapi.read_fp_flags(REPO) == FP[1:-2]
    root = fake_oneapi(tmp_path / "oneapi")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    for step in plan.steps:
        argv = list(step.argv)
        i = argv.index(FP[0])
        assert argv[i : i + len(FP)] == FP
        assert "-ffast-math" not in argv and "-fp-model=fast" not in argv


def test_manifest_errors(tmp_path):
    repo = fake_repo(tmp_path / "r1", {"k.hpp": "SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((x)) void k();\n"})
    root = fake_oneapi(tmp_path / "oneapi")
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root))
    msg = _error(tmp_path, repo, env)
    assert "defines free-function kernels but lists no '// xkernels-aot: <name>' lines" in msg
    repo2 = fake_repo(tmp_path / "r2", {"k.hpp": '// xkernels-aot: xk::k<float>"); system("x\n'})
    assert "is not a kernel name" in _error(tmp_path, repo2, env)
    repo3 = fake_repo(tmp_path / "r3", {"k.hpp": "// xkernels-aot: xk::k<float>\n// xkernels-aot: xk::k<float>\n"})
    assert "listed twice" in _error(tmp_path, repo3, env)
    repo4 = fake_repo(
        tmp_path / "r4", {"a-b.hpp": "// xkernels-aot: xk::k<float>\n", "a_b.hpp": "// xkernels-aot: xk::j<float>\n"}
    )
    assert "map to the same generated name 'a_b'" in _error(tmp_path, repo4, env)


def test_generated_sources_compile_and_index_every_kernel(tmp_path, repo):
    """The generated translation units, compiled by the host compiler against a stand-in for the
    few SYCL names they use, list every manifest name with its file, and the library's facts."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    root = fake_oneapi(tmp_path / "oneapi", ocloc=True)
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), XKERNELS_SYCL_AOT_DEVICES="pvc"))
    plan.write()
    stub = tmp_path / "stub" / "sycl"
    stub.mkdir(parents=True)
    (stub / "sycl.hpp").write_text(
        "#pragma once\n#define SYCL_EXT_ONEAPI_FUNCTION_PROPERTY(x)\n"
        "namespace sycl { struct half { float v; }; struct kernel_id { const void* fn; };\n"
        "namespace ext::oneapi::experimental { template <auto* F> kernel_id get_kernel_id() {"
        " return {reinterpret_cast<const void*>(F)}; } } }\n"
    )
    main = tmp_path / "main.cpp"
    main.write_text(
        '#include <cstdio>\n#include "aot_kernels.h"\nint main() {\n'
        "  const auto& lib = xkernels::sycl_aot::aot_library();\n"
        '  std::printf("targets=%s\\ncompiler=%s\\nflags=%s\\n", lib.targets, lib.compiler, lib.flags);\n'
        "  for (std::size_t i = 0; i < lib.count; ++i)\n"
        '    std::printf("kernel=%s|%s|%d\\n", lib.kernels[i].file, lib.kernels[i].name,'
        " lib.kernels[i].id().fn != nullptr);\n}\n"
    )
    srcs = [str(p) for p in sorted(plan.generated)]
    exe = tmp_path / "index"
    cmd = [
        cxx,
        "-std=c++17",
        "-Wall",
        "-Werror",
        f"-I{tmp_path / 'stub'}",
        f"-I{repo / 'csrc' / 'sycl' / 'kernels'}",
        f"-I{repo / 'csrc' / 'sycl'}",
        *srcs,
        str(main),
        "-o",
        str(exe),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[:3] == ["targets=spir64 spir64_gen:pvc", "compiler=icpx 2026.1.0", "flags=" + " ".join(FP)]
    assert sorted(out[3:]) == sorted(
        [
            "kernel=conv2d.hpp|xk::conv2d_direct<float, true>|1",
            "kernel=layer_norm.hpp|xk::layer_norm_fwd<float>|1",
            "kernel=layer_norm.hpp|xk::layer_norm_fwd<sycl::half>|1",
        ]
    )


# ------------------------------------------------------------------ what setup.py calls, and the summary


def test_configure_for_setup_off_paths(tmp_path, repo):
    def call(**kw):
        return oneapi.configure_for_setup(
            plan_env(tmp_path, **kw), repo, tmp_path / "b", tmp_path / "l", "", system_cuda_dirs=()
        )

    r = call()
    assert r.plan is None
    assert r.cmake_args[0] == "-DXKERNELS_SYCL_AOT_PLAN="
    assert "no oneAPI compiler" in r.summary
    root = fake_oneapi(tmp_path / "oneapi")
    assert call(ONEAPI_ROOT=str(root), XKERNELS_SYCL_AOT="off").plan is None
    assert call(ONEAPI_ROOT=str(root), XKERNELS_SYCL="off").plan is None
    empty = fake_repo(tmp_path / "empty", {"common.hpp": COMMON})
    r = oneapi.configure_for_setup(
        plan_env(tmp_path, ONEAPI_ROOT=str(root)), empty, tmp_path / "b", tmp_path / "l", "", system_cuda_dirs=()
    )
    assert r.plan is None and "no kernel file in csrc/sycl/kernels lists '// xkernels-aot:' names" in r.summary
    with pytest.raises(oneapi.OneAPIError, match="XKERNELS_SYCL_AOT=on but no oneAPI compiler"):
        call(XKERNELS_SYCL_AOT="on")
    with pytest.raises(oneapi.OneAPIError, match="must be auto, on or off"):
        call(XKERNELS_SYCL_AOT="yes")


def test_configure_for_setup_writes_plan_and_prints_configuration(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    host = fake_host_sycl(tmp_path / "venv")
    r = oneapi.configure_for_setup(
        plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda)),
        repo,
        tmp_path / "b",
        tmp_path / "l",
        str(host),
        system_cuda_dirs=(),
    )
    frag = tmp_path / "b" / "oneapi_aot_plan.cmake"
    assert r.cmake_args == [f"-DXKERNELS_SYCL_AOT_PLAN={frag}", "-DXKERNELS_SYCL_AOT_REASON="]
    assert frag.exists() and (tmp_path / "b" / "gen" / "kernels_layer_norm.cpp").exists()
    s = r.summary
    assert f"compiler     : {root}/compiler/latest/bin/icpx (Intel(R) oneAPI DPC++/C++ Compiler 2026.1.0" in s
    assert "component layout" in s
    assert "targets      : spir64,nvptx64-nvidia-cuda (default)" in s
    assert "backend opts : -Xsycl-target-backend=nvptx64-nvidia-cuda --offload-arch=sm_75" in s
    assert "FP flags     : " + " ".join(FP) in s
    assert "kernels      : conv2d.hpp (1), layer_norm.hpp (2)" in s
    assert "libur_adapter_cuda.so" in s


def test_cli_prints_summary_and_cmake_args(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi")
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root))
    env["PYTHONPATH"] = str(REPO)
    cmd = [
        sys.executable,
        "-m",
        "buildtools.oneapi",
        "--repo-root",
        str(repo),
        "--build-dir",
        str(tmp_path / "b"),
        "--library-dir",
        str(tmp_path / "l"),
        "--show-commands",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"-DXKERNELS_SYCL_AOT_PLAN={tmp_path / 'b' / 'oneapi_aot_plan.cmake'}"
    assert "xkernels: oneAPI ahead-of-time SYCL kernels" in p.stderr
    assert "$ " + str(root / "compiler" / "latest" / "bin" / "icpx") + " -fsycl" in p.stderr
    (root / "compiler" / "latest" / "bin" / "icpx").chmod(0o644)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert p.returncode == 2
    assert "ERROR" in p.stderr and "is not an executable file" in p.stderr


# ------------------------------------------------------------------ CMake runs the planned commands verbatim


@pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("cmake", "ninja", "cc", "readelf")),
    reason="needs cmake, ninja, cc and readelf",
)
def test_cmake_runs_exactly_the_planned_commands(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True, ocloc=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    host = fake_host_sycl(tmp_path / "venv")
    libdir = tmp_path / "pkg"
    libdir.mkdir()
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda), XKERNELS_SYCL_AOT_DEVICES="pvc,bmg-g21")
    r = oneapi.configure_for_setup(env, repo, tmp_path / "b", libdir, str(host), system_cuda_dirs=())
    assert "-device pvc,bmg-g21" in r.plan.steps[-1].argv  # one argument with a space: must arrive as one
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "dummy.cpp").write_text("int xk_dummy() { return 1; }\n")
    (proj / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.25)
project(aot_wiring LANGUAGES CXX)
set(XK_SUMMARY "")
set(XK_WITH_SYCL ON)
list(APPEND CMAKE_MODULE_PATH "{REPO / "cmake"}")
include(OneAPIAOT)
add_library(_C MODULE dummy.cpp)
set_target_properties(_C PROPERTIES LIBRARY_OUTPUT_DIRECTORY "{libdir}")
# The stand-in library has no symbols for dummy.cpp to use; keep the DT_NEEDED entry anyway.
target_link_options(_C PRIVATE "LINKER:--no-as-needed")
xk_configure_sycl_aot_target(_C)
foreach(line IN LISTS XK_SUMMARY)
  message(STATUS "SUMMARY ${{line}}")
endforeach()
""")
    log = tmp_path / "icpx.log"
    env = dict(os.environ, XK_FAKE_ICPX_LOG=str(log))
    cfg = subprocess.run(
        [
            "cmake",
            "-S",
            str(proj),
            "-B",
            str(tmp_path / "cb"),
            "-G",
            "Ninja",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
            *r.cmake_args,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    assert (
        "SUMMARY SYCL AOT        : ON — icpx 2026.1.0, images: spir64 spir64_gen:pvc,bmg-g21 nvptx64-nvidia-cuda:sm_75"
    ) in cfg.stdout
    build = subprocess.run(
        ["cmake", "--build", str(tmp_path / "cb"), "-j", "1"], capture_output=True, text=True, env=env
    )
    assert build.returncode == 0, build.stdout + build.stderr
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    planned = [list(s.argv[1:]) for s in r.plan.steps]
    # Byte for byte ($ORIGIN included); Ninja orders the independent compiles as it likes, the link is last.
    assert sorted(ran[:-1]) == sorted(planned[:-1])
    assert ran[-1] == planned[-1]
    assert (libdir / "libxkernels_sycl_aot.so").exists()
    cc = json.loads((tmp_path / "cb" / "compile_commands.json").read_text())
    argv = shlex.split(cc[0]["command"])
    assert "-DXKERNELS_SYCL_AOT=1" in argv
    assert '-DXKERNELS_SYCL_AOT_TARGETS="spir64 spir64_gen:pvc,bmg-g21 nvptx64-nvidia-cuda:sm_75"' in argv
    mod = next(libdir.glob("*_C*.so"))
    dyn = subprocess.run(["readelf", "-d", str(mod)], capture_output=True, text=True).stdout
    assert "libxkernels_sycl_aot.so" in dyn  # linked by soname
    assert "$ORIGIN" in dyn
    # A second build runs nothing: the outputs are up to date.
    log.unlink()
    subprocess.run(["cmake", "--build", str(tmp_path / "cb")], capture_output=True, check=True, env=env)
    assert not log.exists()


def test_real_kernel_files_list_their_names(tmp_path):
    """Every kernel file in this repository that defines free-function kernels lists the names the
    AOT library must hold (checked with a fake compiler: the planner reads the real tree)."""
    kdir = REPO / "csrc" / "sycl" / "kernels"
    if not kdir.is_dir() or not any(kdir.glob("*.hpp")):
        pytest.skip("no kernel files in this tree yet")
    root = fake_oneapi(tmp_path / "oneapi")
    plan = oneapi.make_plan(
        plan_env(tmp_path, ONEAPI_ROOT=str(root)),
        REPO,
        tmp_path / "b",
        tmp_path / "l",
        str(fake_host_sycl(tmp_path / "venv")),
        system_cuda_dirs=(),
    )
    assert plan.kernels, "kernel files exist but none lists '// xkernels-aot:' names"


def test_kernel_file_names_match_the_built_module():
    """No drift: the '// xkernels-aot:' lines of every kernel file are exactly the names its host file
    registers (for every dtype and sub-group profile), as the built module reports them
    (scripts/aot_kernel_names.py --check; --write regenerates them)."""
    import importlib.util

    spec = importlib.util.find_spec("xkernels")  # the package in use: python/ in-place, or site-packages
    pkg_parent = str(Path(spec.origin).resolve().parent.parent) if spec and spec.origin else str(REPO / "python")
    env = dict(os.environ, PYTHONPATH=pkg_parent + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "aot_kernel_names.py"), "--check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if p.returncode == 2 or "No module named 'xkernels" in p.stderr:
        if _backends.is_required("sycl"):
            pytest.fail(f"backend 'sycl' is required but the SYCL kernel groups are unavailable: {p.stderr[-2000:]}")
        pytest.skip(f"needs xkernels built with SYCL: {p.stderr.strip()[-300:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    # and the planner reads the same lists (with the XK_ND_KERNEL marker seen as a kernel definition)
    files = sorted((REPO / "csrc" / "sycl" / "kernels").glob("*.hpp"))
    macros = oneapi.kernel_macros(f.read_text() for f in files)
    assert "XK_ND_KERNEL" in macros
    manifests = {f.name: oneapi.read_kernel_manifest(f, macros) for f in files}
    assert manifests["common.hpp"] is None
    assert {k for k, v in manifests.items() if v} == {"conv2d.hpp", "fused_linear_relu.hpp", "layer_norm.hpp"}


def test_kernel_marking_macros(tmp_path):
    """A file marking kernels through a macro of a shared header defines kernels; the header defining the
    macro does not; a macro named only in a comment does not count."""
    common = "#pragma once\n#define MY_KERNEL(N) SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((x<N>))\n"
    kern = '#include "common.hpp"\ntemplate <typename T>\nMY_KERNEL(1) void k(T* p) {}\n'
    doc = "#pragma once\n// use MY_KERNEL(1) to mark kernels\ninline int f() { return 1; }\n"
    repo = fake_repo(tmp_path / "r", {"common.hpp": common, "k.hpp": kern, "doc.hpp": doc})
    kdir = repo / "csrc" / "sycl" / "kernels"
    macros = oneapi.kernel_macros((kdir / n).read_text() for n in ("common.hpp", "k.hpp", "doc.hpp"))
    assert macros == {"MY_KERNEL"}
    assert oneapi.read_kernel_manifest(kdir / "common.hpp", macros) is None
    assert oneapi.read_kernel_manifest(kdir / "doc.hpp", macros) is None
    with pytest.raises(oneapi.OneAPIError, match="k.hpp defines free-function kernels but lists no"):
        oneapi.read_kernel_manifest(kdir / "k.hpp", macros)
    root = fake_oneapi(tmp_path / "oneapi")
    assert "k.hpp defines free-function kernels" in _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))


def test_setup_py_stops_with_the_planners_message(tmp_path):
    """setup.py calls the planner before CMake; a broken ONEAPI_ROOT ends the build with its message."""
    pytest.importorskip("torch")  # setup.py's build_ext imports the installed torch first
    env = dict(os.environ, ONEAPI_ROOT=str(tmp_path / "missing-oneapi"))
    env.pop("XKERNELS_SYCL_AOT", None)
    p = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-temp",
            str(tmp_path / "bt"),
            "--build-lib",
            str(tmp_path / "bl"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode != 0
    assert "xkernels: oneAPI ahead-of-time build: ERROR" in p.stderr
    assert f"ONEAPI_ROOT={tmp_path / 'missing-oneapi'} is not a directory" in p.stderr
    assert not (tmp_path / "bt" / "xkernels._C" / "CMakeCache.txt").exists()  # CMake never ran
