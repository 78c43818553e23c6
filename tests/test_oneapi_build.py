"""The oneAPI ahead-of-time build planner (buildtools/oneapi.py) and its CMake wiring
(cmake/OneAPIAOT.cmake), against fake oneAPI installations laid out in temporary directories:
both ONEAPI_ROOT layouts and PATH, with and without the CUDA plugin, and broken ones.

The fake icpx is a script that prints a real icpx's --version text, accepts (or, to play an old
compiler, rejects) the floating-point flags, and, for the CMake test, records every command line
it is given and writes the requested outputs. The planned command compiles ONE translation unit,
csrc/sycl/aot/launchers.cpp (standard SYCL, also built by AdaptiveCpp); the host compiler checks here
that it parses against the SYCL headers with the planned definitions. What cannot be tested here (no
icpx, no Intel or NVIDIA GPU): that real icpx compiles it, and that the images load; see docs/oneapi.md.
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


def fake_repo(root: Path, launchers: bool = True) -> Path:
    """The parts of the repository the planner reads: cmake/fp_flags.txt, the launcher TU and its headers
    (the real files)."""
    (root / "cmake").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "cmake" / "fp_flags.txt", root / "cmake" / "fp_flags.txt")
    for sub in ("kernels", "aot"):
        shutil.copytree(REPO / "csrc" / "sycl" / sub, root / "csrc" / "sycl" / sub, dirs_exist_ok=True)
    if not launchers:
        (root / "csrc" / "sycl" / "aot" / "launchers.cpp").unlink()
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


# ------------------------------------------------------------------ the exact command: one launcher TU


def _defines(impl: str, sub_group: int) -> list[str]:
    return [
        f"-DXK_AOT_SUB_GROUP={sub_group}",
        f'-DXK_AOT_IMPLEMENTATION="{impl}"',
        '-DXK_AOT_FLAGS="' + " ".join(FP) + '"',
    ]


def test_exact_commands_component_layout_with_cuda_plugin(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    host = fake_host_sycl(tmp_path / "venv")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda)), host)
    icpx = str(root / "compiler" / "latest" / "bin" / "icpx")
    sycl = repo / "csrc" / "sycl"
    targets = "-fsycl-targets=spir64,nvptx64-nvidia-cuda"
    backend = ["-Xsycl-target-backend=nvptx64-nvidia-cuda", "--offload-arch=sm_75"]
    assert [list(s.argv) for s in plan.steps] == [
        [
            icpx,
            "-fsycl",
            targets,
            *backend,
            f"--cuda-path={cuda}",
            "-std=c++17",
            "-O2",
            "-fPIC",
            *FP,
            "-fvisibility=hidden",
            *_defines("icpx 2026.1.0 (spir64,nvptx64-nvidia-cuda)", 16),
            f"-I{sycl}",
            "-shared",
            "-Wl,-soname,libxkernels_sycl_aot.so",
            f"-Wl,-rpath,$ORIGIN:$ORIGIN/../../..:{host}/lib:{root}/compiler/latest/lib",
            "-o",
            f"{tmp_path}/pkg/libxkernels_sycl_aot.so",
            f"{sycl}/aot/launchers.cpp",
        ],
    ]
    step = plan.steps[0]
    assert step.output == tmp_path / "pkg" / "libxkernels_sycl_aot.so"
    # launchers.cpp includes abi.h, launch.h and every kernel table: a change to any of them rebuilds the library.
    assert set(step.depends) == {
        sycl / "aot" / "launchers.cpp",
        sycl / "aot" / "abi.h",
        sycl / "aot" / "launch.h",
        *(sycl / "kernels").glob("*.hpp"),
    }
    assert sycl / "kernels" / "tables.hpp" in step.depends
    assert plan.source == sycl / "aot" / "launchers.cpp"


def test_exact_commands_unified_layout_spirv_only(tmp_path, repo):
    root = fake_oneapi(tmp_path / "oneapi", layout="unified")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert len(plan.steps) == 1  # one translation unit, compiled and linked in one command
    argv = list(plan.steps[0].argv)
    assert argv[:3] == [str(root / "bin" / "icpx"), "-fsycl", "-fsycl-targets=spir64"]
    assert argv[3:6] == ["-std=c++17", "-O2", "-fPIC"]  # no backend options for generic SPIR-V
    assert argv[6 : 6 + len(FP)] == FP
    assert argv[-3:] == [
        "-o",
        str(tmp_path / "pkg" / "libxkernels_sycl_aot.so"),
        str(repo / "csrc" / "sycl" / "aot" / "launchers.cpp"),
    ]
    assert '-DXK_AOT_IMPLEMENTATION="icpx 2026.1.0 (spir64)"' in argv


def test_fp_flags_are_the_policy_of_fp_flags_txt(tmp_path, repo):
    """icpx's default model is fast: -fp-model=precise first, then the host list of cmake/fp_flags.txt, then the
    device-only flags of its sycl list (IEEE div/sqrt)."""
    assert oneapi.icpx_fp_flags(REPO) == FP
    assert oneapi.read_fp_flags(REPO) == FP[1:-2]
    assert oneapi.read_fp_flags(REPO, "sycl")[-2:] == FP[-2:]
    bad = tmp_path / "bad"
    (bad / "cmake").mkdir(parents=True)
    (bad / "cmake" / "fp_flags.txt").write_text("# no lists\nnvcc: --fmad=false\n")
    with pytest.raises(oneapi.OneAPIError, match="no 'host:' line"):
        oneapi.read_fp_flags(bad)
    root = fake_oneapi(tmp_path / "oneapi")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    for step in plan.steps:
        argv = list(step.argv)
        i = argv.index(FP[0])
        assert argv[i : i + len(FP)] == FP
        assert "-ffast-math" not in argv and "-fp-model=fast" not in argv


@pytest.mark.parametrize(
    "env,targets,sub_group",
    [
        ({}, "spir64", 16),
        ({"XKERNELS_SYCL_AOT_DEVICES": "pvc"}, "spir64,spir64_gen", 16),
        ({"XKERNELS_SYCL_TARGETS": "intel_gpu_bmg_g21"}, "intel_gpu_bmg_g21", 16),
        ({"CUDA": "1"}, "spir64,nvptx64-nvidia-cuda", 16),  # Intel images present: their width
        ({"CUDA": "1", "XKERNELS_SYCL_TARGETS": "nvptx64-nvidia-cuda"}, "nvptx64-nvidia-cuda", 32),  # warp only
    ],
)
def test_plan_compiles_launchers_with_fp_flags_and_defines(tmp_path, repo, env, targets, sub_group):
    """The one compile is launchers.cpp, position-independent into a shared library, under the FP policy,
    with the sub-group size of the targets and the descriptive strings xkernels.info() shows."""
    root = fake_oneapi(tmp_path / "oneapi", ocloc=True, cuda_adapter=True)
    e = plan_env(tmp_path, ONEAPI_ROOT=str(root), **{k: v for k, v in env.items() if k != "CUDA"})
    if "CUDA" in env:
        e["CUDA_PATH"] = str(fake_cuda_toolkit(tmp_path / "cuda"))
    plan = plan_for(tmp_path, repo, e)
    (step,) = plan.steps
    argv = list(step.argv)
    assert argv[-1] == str(repo / "csrc" / "sycl" / "aot" / "launchers.cpp")
    assert [a for a in argv if a.endswith(".cpp")] == [argv[-1]]  # no other (generated) source
    assert {"-fsycl", "-fPIC", "-shared", f"-fsycl-targets={targets}", f"-I{repo / 'csrc' / 'sycl'}"} <= set(argv)
    i = argv.index(FP[0])
    assert argv[i : i + len(FP)] == FP
    defs = [a for a in argv if a.startswith("-D")]
    assert defs == _defines(f"icpx 2026.1.0 ({targets})", sub_group)
    assert plan.sub_group == sub_group
    assert f"sub-group {sub_group}" in plan.summary()


def test_planned_definitions_expand_to_the_strings_the_library_reports(tmp_path, repo):
    """The -D values, passed as argv elements without a shell, expand to C++ string literals (quotes,
    spaces and '=' intact), as launchers.cpp stores them in xk_aot_library."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    root = fake_oneapi(tmp_path / "oneapi")
    plan = plan_for(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    defs = [a for a in plan.steps[0].argv if a.startswith("-D")]
    probe = tmp_path / "probe.cpp"
    probe.write_text(
        '#include <cstdio>\nint main() { std::printf("%d|%s|%s\\n", XK_AOT_SUB_GROUP, '
        "XK_AOT_IMPLEMENTATION, XK_AOT_FLAGS); }\n"
    )
    exe = tmp_path / "probe"
    p = subprocess.run([cxx, *defs, str(probe), "-o", str(exe)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out == "16|icpx 2026.1.0 (spir64)|" + " ".join(FP) + "\n"


def test_missing_launcher_source_is_an_error(tmp_path):
    root = fake_oneapi(tmp_path / "oneapi")
    repo = fake_repo(tmp_path / "repo", launchers=False)
    msg = _error(tmp_path, repo, plan_env(tmp_path, ONEAPI_ROOT=str(root)))
    assert f"{repo / 'csrc' / 'sycl' / 'aot' / 'launchers.cpp'} is missing" in msg
    assert "XKERNELS_SYCL_AOT=off" in msg


def _sycl_include_dir() -> Path | None:
    """SYCL headers to parse launchers.cpp against: the intel-sycl-rt headers next to Python, or a oneAPI's."""
    cands = [Path(sys.prefix) / "include"]
    if os.environ.get("ONEAPI_ROOT"):
        cands += [
            Path(os.environ["ONEAPI_ROOT"]) / "compiler" / "latest" / "include",
            Path(os.environ["ONEAPI_ROOT"]) / "include",
        ]
    return next((c for c in cands if (c / "sycl" / "sycl.hpp").is_file()), None)


def test_launchers_parse_with_the_planned_definitions(tmp_path):
    """launchers.cpp, with exactly the planned -D/-I/-std arguments, parses (g++ -fsyntax-only, no -fsycl:
    the host side of every parallel_for instantiation) against real SYCL headers; without the planned
    XK_AOT_SUB_GROUP it stops at its #error. Device code generation needs icpx (not here)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    inc = _sycl_include_dir()
    if cxx is None or inc is None:
        if os.environ.get("XKERNELS_REQUIRE_SYCL", "") not in ("", "0"):
            pytest.fail("XKERNELS_REQUIRE_SYCL=1 but no C++ compiler or SYCL headers (sycl/sycl.hpp) were found")
        pytest.skip("needs g++ and the SYCL headers (intel-sycl-rt next to Python, or ONEAPI_ROOT)")
    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True)
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(fake_cuda_toolkit(tmp_path / "cuda")))
    plan = oneapi.make_plan(
        env, REPO, tmp_path / "b", tmp_path / "l", str(fake_host_sycl(tmp_path / "venv")), system_cuda_dirs=()
    )
    argv = list(plan.steps[0].argv)
    keep = [a for a in argv if a.startswith(("-D", "-I", "-std="))]
    assert len([a for a in keep if a.startswith("-D")]) == 3
    common = [cxx, *keep, f"-isystem{inc}", "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING"]
    p = subprocess.run(
        [*common, "-fsyntax-only", "-Wall", "-Wno-deprecated-declarations", argv[-1]],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    no_sg = [a for a in common if not a.startswith("-DXK_AOT_SUB_GROUP=")]
    p = subprocess.run([*no_sg, "-E", "-o", os.devnull, argv[-1]], capture_output=True, text=True, timeout=300)
    assert (
        p.returncode != 0 and "XK_AOT_SUB_GROUP (the sub-group size of the target device) must be defined" in p.stderr
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
    r = call(ONEAPI_ROOT=str(root))
    assert r.plan is not None and r.cmake_args[0].startswith("-DXKERNELS_SYCL_AOT_PLAN=/")
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
    assert frag.exists() and not (tmp_path / "b" / "gen").exists()  # nothing generated but the fragment
    assert f'set(XK_SYCL_AOT_LIBRARY "{tmp_path}/l/libxkernels_sycl_aot.so")' in frag.read_text()
    assert 'set(XK_SYCL_AOT_STEP_COUNT "1")' in frag.read_text()
    s = r.summary
    assert f"compiler     : {root}/compiler/latest/bin/icpx (Intel(R) oneAPI DPC++/C++ Compiler 2026.1.0" in s
    assert "component layout" in s
    assert "targets      : spir64,nvptx64-nvidia-cuda (default)" in s
    assert "backend opts : -Xsycl-target-backend=nvptx64-nvidia-cuda --offload-arch=sm_75" in s
    assert "FP flags     : " + " ".join(FP) in s
    assert (
        f"launchers    : {repo}/csrc/sycl/aot/launchers.cpp (every kernel table; abi.h xk_aot_library_v1), "
        "sub-group 16" in s
    )
    assert f"library      : {tmp_path}/l/libxkernels_sycl_aot.so (loaded by the extension at run time)" in s
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


# ------------------------------------------------------------------ CMake runs the planned command verbatim


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
    (step,) = r.plan.steps
    assert "-device pvc,bmg-g21" in step.argv  # one argument with a space: must arrive as one
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "dummy.cpp").write_text("int xk_dummy() { return 1; }\n")
    (proj / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.25)
project(aot_wiring LANGUAGES CXX)
set(XK_SUMMARY "")
set(XK_WITH_SYCL ON)
set(OUT_DIR "{libdir}" CACHE PATH "")
list(APPEND CMAKE_MODULE_PATH "{REPO / "cmake"}")
include(OneAPIAOT)
add_library(_C MODULE dummy.cpp)
set_target_properties(_C PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${{OUT_DIR}}")
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
    # Byte for byte ($ORIGIN and the quoted -D strings included): the one planned command, run once.
    assert ran == [list(step.argv[1:])]
    assert '-DXK_AOT_IMPLEMENTATION="icpx 2026.1.0 (spir64,spir64_gen,nvptx64-nvidia-cuda)"' in ran[0]
    assert (libdir / "libxkernels_sycl_aot.so").exists()
    cc = json.loads((tmp_path / "cb" / "compile_commands.json").read_text())
    argv = shlex.split(cc[0]["command"])
    assert "-DXKERNELS_SYCL_AOT=1" in argv
    assert '-DXKERNELS_SYCL_AOT_TARGETS="spir64 spir64_gen:pvc,bmg-g21 nvptx64-nvidia-cuda:sm_75"' in argv
    assert '-DXKERNELS_SYCL_AOT_LIBRARY="libxkernels_sycl_aot.so"' in argv
    # Not linked: the extension dlopens the library from its own directory.
    mod = next(libdir.glob("*_C*.so"))
    dyn = subprocess.run(["readelf", "-d", str(mod)], capture_output=True, text=True, check=True).stdout
    assert "Dynamic section" in dyn and "libxkernels_sycl_aot.so" not in dyn
    # A second build runs nothing: the library is up to date.
    log.unlink()
    subprocess.run(["cmake", "--build", str(tmp_path / "cb")], capture_output=True, check=True, env=env)
    assert not log.exists()
    # A kernel table changes: the library is rebuilt (launchers.cpp instantiates every table).
    tables = repo / "csrc" / "sycl" / "kernels" / "tables.hpp"
    tables.write_text(tables.read_text() + "\n")
    subprocess.run(["cmake", "--build", str(tmp_path / "cb")], capture_output=True, check=True, env=env)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [list(step.argv[1:])]
    # _C built elsewhere than the planned library: the run-time lookup beside _C would miss it.
    other = tmp_path / "elsewhere"
    cfg = subprocess.run(
        ["cmake", "-S", str(proj), "-B", str(tmp_path / "cb2"), "-G", "Ninja", f"-DOUT_DIR={other}", *r.cmake_args],
        capture_output=True,
        text=True,
        env=env,
    )
    assert cfg.returncode != 0
    err = " ".join(cfg.stderr.split())  # CMake wraps long messages
    assert f"{libdir / 'libxkernels_sycl_aot.so'} is not in _C's output directory ({other})" in err
    assert f"--library-dir {other}" in err


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
