"""The kernel provider's choice between ahead-of-time images and run-time compilation
(csrc/sycl/provider_choice.cpp) and the CUDA dispatch key's choice between native CUDA and SYCL
(csrc/include/xkernels/cuda_key_policy.h): pure C++ units, compiled here with the host compiler
into a small driver (tests/cpp/policy_cli.cpp) and run. No SYCL runtime, device or torch needed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RTC_VAR = "SYCL_JIT_AMDGCN_PTX_TARGET_CPU"


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    out = tmp_path_factory.mktemp("policy") / "policy_cli"
    cmd = [
        cxx,
        "-std=c++17",
        "-O0",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{REPO / 'csrc' / 'sycl'}",
        f"-I{REPO / 'csrc' / 'include'}",
        str(REPO / "csrc" / "sycl" / "provider_choice.cpp"),
        str(REPO / "tests" / "cpp" / "policy_cli.cpp"),
        "-o",
        str(out),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"compiling the policy driver failed:\n{p.stdout}{p.stderr}"
    return out


def run(cli: Path, *args: str) -> tuple[int, dict[str, list[str]]]:
    p = subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=30)
    out: dict[str, list[str]] = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition("=")
        out.setdefault(k, []).append(v)
    return p.returncode, out


def provider(cli: Path, targets: str, backend: str, *, gpu=False, cpu=False, arch="", cc=""):
    args = ["provider", "--targets", targets, "--backend", backend]
    if gpu:
        args.append("--gpu")
    if cpu:
        args.append("--cpu")
    if arch:
        args += ["--arch", arch]
    if cc:
        args += ["--cc", cc]
    code, out = run(cli, *args)
    assert code == 0, out
    return out


# ---------------------------------------------------------------- provider: NVIDIA (SYCL through the CUDA plugin)

CUDA_AOT = "spir64 nvptx64-nvidia-cuda:sm_75"


@pytest.mark.parametrize(
    "cc,source,image,env",
    [
        ("9.0", "aot-portable", "nvptx64-nvidia-cuda:sm_75", []),  # PTX sm_75, JIT-finalised by the driver
        ("7.5", "aot-native", "nvptx64-nvidia-cuda:sm_75", []),  # exactly the image's architecture
        ("7.0", "run-time-compile", "", [f"{RTC_VAR}=sm_70"]),  # image too new for the GPU
    ],
)
def test_cuda_device_against_ptx_image(cli, cc, source, image, env):
    out = provider(cli, CUDA_AOT, "ext_oneapi_cuda", gpu=True, cc=cc)
    assert out["backend"] == ["cuda"]
    assert out["source"] == [source]
    assert out["image"] == [image]
    assert out.get("env", []) == env


def test_cuda_image_newer_than_device_says_why(cli):
    out = provider(cli, CUDA_AOT, "cuda", gpu=True, cc="7.0")
    assert "sm_75, newer than this GPU (sm_70)" in out["reason"][0]
    assert out["describe"][0].endswith(f"[{RTC_VAR}=sm_70]")


def test_cuda_without_nvidia_image_compiles_for_its_compute_capability(cli):
    out = provider(cli, "spir64 spir64_gen:pvc", "ext_oneapi_cuda", gpu=True, cc="9.0")
    assert out["source"] == ["run-time-compile"]
    assert out["env"] == [f"{RTC_VAR}=sm_90"]
    assert "no NVIDIA image (targets: spir64, spir64_gen:pvc)" in out["reason"][0]


def test_build_without_aot_library_compiles_at_run_time(cli):
    out = provider(cli, "", "ext_oneapi_cuda", gpu=True, cc="8.6")
    assert out["source"] == ["run-time-compile"]
    assert out["env"] == [f"{RTC_VAR}=sm_86"]
    assert out["reason"][0].startswith("this build has no ahead-of-time kernels")


@pytest.mark.parametrize(
    "cc,source,env", [("9.0", "aot-native", []), ("8.0", "run-time-compile", [f"{RTC_VAR}=sm_80"])]
)
def test_architecture_specific_nvidia_target_needs_exact_match(cli, cc, source, env):
    out = provider(cli, "spir64 nvidia_gpu_sm_90", "cuda", gpu=True, cc=cc)
    assert out["source"] == [source]
    assert out.get("env", []) == env
    assert out["image"] == (["nvidia_gpu_sm_90"] if source == "aot-native" else [""])


def test_cuda_compute_capability_from_architecture_name(cli):
    out = provider(cli, "spir64", "cuda", gpu=True, arch="nvidia_gpu_sm_86")
    assert out["env"] == [f"{RTC_VAR}=sm_86"]


def test_cuda_unknown_compute_capability(cli):
    with_ptx = provider(cli, CUDA_AOT, "cuda", gpu=True)
    assert with_ptx["source"] == ["aot-portable"]
    assert "compute capability is unknown" in with_ptx["reason"][0]
    without = provider(cli, "spir64", "cuda", gpu=True)
    assert without["source"] == ["run-time-compile"]
    assert "env" not in without  # nothing to set: the runtime's default architecture applies


@pytest.mark.parametrize("ccs,expected", [(["9.0", "8.6", "0.0"], "sm_86"), (["9.0"], "sm_90"), (["0.0"], "")])
def test_one_ptx_architecture_per_process_is_the_lowest(cli, ccs, expected):
    code, out = run(cli, "ptx-target", *ccs)
    assert code == 0
    assert out["ptx_target"] == [expected]


def test_run_time_environment_is_set_unless_the_user_set_it(cli, monkeypatch):
    monkeypatch.delenv(RTC_VAR, raising=False)
    code, out = run(cli, "apply-env", RTC_VAR, "sm_90")
    assert code == 0
    assert out["applied"] == [f"{RTC_VAR}=sm_90 (set)"]
    assert out["now"] == [f"{RTC_VAR}=sm_90"]
    monkeypatch.setenv(RTC_VAR, "sm_80")
    _, out = run(cli, "apply-env", RTC_VAR, "sm_90")
    assert out["applied"] == [f"{RTC_VAR}=sm_80 (kept the user's value; wanted sm_90)"]
    assert out["now"] == [f"{RTC_VAR}=sm_80"]


# ---------------------------------------------------------------- provider: Intel GPUs and CPUs


@pytest.mark.parametrize(
    "backend,arch,targets,source,image",
    [
        ("ext_oneapi_level_zero", "intel_gpu_pvc", "spir64 spir64_gen:pvc,bmg-g21", "aot-native", "spir64_gen:pvc"),
        ("level_zero", "intel_gpu_bmg_g21", "spir64 spir64_gen:pvc,bmg-g21", "aot-native", "spir64_gen:bmg-g21"),
        ("level_zero", "intel_gpu_acm_g10", "spir64_gen:dg2-g10", "aot-native", "spir64_gen:dg2-g10"),  # alias
        ("level_zero", "intel_gpu_lnl_m", "spir64 spir64_gen:pvc", "aot-portable", "spir64"),
        ("opencl", "intel_gpu_pvc", "spir64", "aot-portable", "spir64"),
        ("level_zero", "intel_gpu_pvc", "spir64 intel_gpu_pvc", "aot-native", "intel_gpu_pvc"),
        ("level_zero", "intel_gpu_pvc", "nvptx64-nvidia-cuda:sm_75", "run-time-compile", ""),
        ("level_zero", "", "spir64_gen:pvc", "run-time-compile", ""),  # unknown architecture, no SPIR-V
    ],
)
def test_intel_gpu(cli, backend, arch, targets, source, image):
    out = provider(cli, targets, backend, gpu=True, arch=arch)
    assert out["source"] == [source]
    assert out["image"] == [image]
    assert "env" not in out


def test_intel_gpu_portable_reason_names_missing_native_image(cli):
    out = provider(cli, "spir64 spir64_gen:pvc", "level_zero", gpu=True, arch="intel_gpu_bmg_g21")
    assert out["reason"] == [
        "ahead-of-time SPIR-V, finalised by the Level Zero driver at load (no native image for bmg-g21)"
    ]


@pytest.mark.parametrize(
    "targets,source,image",
    [
        ("spir64", "aot-portable", "spir64"),
        ("spir64 spir64_x86_64", "aot-native", "spir64_x86_64"),
        ("spir64_gen:pvc", "run-time-compile", ""),
        ("", "run-time-compile", ""),
    ],
)
def test_opencl_cpu(cli, targets, source, image):
    out = provider(cli, targets, "opencl", cpu=True)
    assert out["source"] == [source]
    assert out["image"] == [image]


def test_hip_and_other_backends_compile_at_run_time(cli):
    hip = provider(cli, CUDA_AOT, "ext_oneapi_hip", gpu=True, arch="amd_gpu_gfx90a")
    assert hip["source"] == ["run-time-compile"]
    assert hip["env"] == [f"{RTC_VAR}=gfx90a"]
    other = provider(cli, CUDA_AOT, "native_cpu", cpu=True)
    assert other["backend"] == ["other"]
    assert other["source"] == ["run-time-compile"]


@pytest.mark.parametrize(
    "spec,message",
    [
        ("spir64_gen", "'spir64_gen' lists no devices"),
        ("nvptx64-nvidia-cuda:sm_75,sm_80", "more than one architecture"),
        ("spir64 spir64", "target 'spir64' appears twice"),
        (":pvc", "has no target"),
        ("spir64_gen:pvc,", "empty architecture"),
    ],
)
def test_bad_target_spec_is_rejected(cli, spec, message):
    code, out = run(cli, "provider", "--targets", spec, "--backend", "level_zero", "--gpu")
    assert code == 2
    assert message in out["error"][0]


def test_planner_spec_round_trips_into_the_provider(cli, tmp_path):
    """The spec the build writes into the library (buildtools/oneapi.py) is what the provider parses."""
    from test_oneapi_build import fake_cuda_toolkit, fake_oneapi, fake_repo, plan_env

    from buildtools import oneapi

    root = fake_oneapi(tmp_path / "oneapi", cuda_adapter=True, ocloc=True)
    cuda = fake_cuda_toolkit(tmp_path / "cuda")
    repo = fake_repo(tmp_path / "repo")
    env = plan_env(tmp_path, ONEAPI_ROOT=str(root), CUDA_PATH=str(cuda), XKERNELS_SYCL_AOT_DEVICES="pvc,bmg-g21")
    plan = oneapi.make_plan(env, repo, tmp_path / "b", tmp_path / "l", "", system_cuda_dirs=())
    spec = plan.targets.provider_spec
    assert spec == "spir64 spir64_gen:pvc,bmg-g21 nvptx64-nvidia-cuda:sm_75"
    assert provider(cli, spec, "level_zero", gpu=True, arch="intel_gpu_bmg_g21")["image"] == ["spir64_gen:bmg-g21"]
    assert provider(cli, spec, "cuda", gpu=True, cc="9.0")["image"] == ["nvptx64-nvidia-cuda:sm_75"]


# ---------------------------------------------------------------- CUDA dispatch key: native CUDA vs SYCL


def expected_choice(requested: str, native: bool, sycl_built: bool, sees: bool) -> str:
    """The policy, restated: explicit requests are honoured or raise; 'auto' prefers native CUDA and
    falls back to SYCL-on-CUDA; 'reference' never runs CUDA tensors."""
    sycl_ok = sycl_built and sees
    if requested == "cuda":
        return "cuda" if native else "error"
    if requested == "sycl":
        return "sycl" if sycl_ok else "error"
    if requested == "auto":
        return "cuda" if native else ("sycl" if sycl_ok else "error")
    return "error"


@pytest.mark.parametrize(
    "requested,native,sycl_built,sees",
    list(itertools.product(["auto", "cuda", "sycl", "reference"], [0, 1], [0, 1], [0, 1])),
)
def test_cuda_key_choice_table(cli, requested, native, sycl_built, sees):
    code, out = run(cli, "cuda-key", requested, str(native), str(sycl_built), str(sees))
    assert code == 0
    assert out["choice"] == [expected_choice(requested, bool(native), bool(sycl_built), bool(sees))]
    if out["choice"] == ["error"]:
        assert out["message"][0].startswith("xkernels.layer_norm: ")
        assert "cuda:1" in out["message"][0]


@pytest.mark.parametrize(
    "args,choice,fragments",
    [
        (("auto", "1", "1", "1"), "cuda", [""]),
        (
            ("auto", "0", "1", "1"),
            "sycl",
            ["native CUDA backend is unavailable: nvcc was not found at build time", "running the SYCL kernels"],
        ),
        (
            ("auto", "0", "1", "0"),
            "error",
            [
                "no backend can run tensors on cuda:1",
                "nvcc was not found",
                "SYCL runtime sees no CUDA device (no ext_oneapi_cuda platform)",
                "libur_adapter_cuda.so",
            ],
        ),
        (("auto", "0", "0", "0"), "error", ["built without the SYCL backend"]),
        (("cuda", "0", "1", "1"), "error", ["backend 'cuda' was requested", 'xkernels.use_backend("sycl")']),
        (("sycl", "1", "1", "1"), "sycl", [""]),  # explicit SYCL wins over the native default
        (
            ("sycl", "1", "1", "0"),
            "error",
            ["backend 'sycl' was requested for tensors on cuda:1", "oneAPI CUDA plugin"],
        ),
        (("sycl", "1", "0", "0"), "error", ["xkernels was built without the SYCL backend"]),
        (("reference", "1", "1", "1"), "error", ["runs CPU tensors only"]),
        (("bogus", "1", "1", "1"), "error", ["unknown backend 'bogus'"]),
    ],
)
def test_cuda_key_messages(cli, args, choice, fragments):
    code, out = run(cli, "cuda-key", *args)
    assert code == 0
    assert out["choice"] == [choice]
    for f in fragments:
        assert f in out["message"][0]
    if choice == "cuda" or args[0] == "sycl" and choice == "sycl":
        assert out["message"] == [""]  # the default (or the explicit choice) ran: no fallback to report


def test_cuda_key_error_does_not_suggest_sycl_when_it_cannot_run(cli):
    _, out = run(cli, "cuda-key", "cuda", "0", "1", "0")
    assert out["choice"] == ["error"]
    assert "use_backend" not in out["message"][0]


# ---------------------------------------------------------------- on the devices the installed runtime has

SYCL_PREFIX = Path(sys.prefix)


@pytest.fixture(scope="module")
def device_probe(tmp_path_factory) -> Path:
    if (
        not (SYCL_PREFIX / "include" / "sycl" / "sycl.hpp").exists()
        or not (SYCL_PREFIX / "lib" / "libsycl.so").exists()
    ):
        pytest.skip("SYCL runtime (intel-sycl-rt) not installed")
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    out = tmp_path_factory.mktemp("probe") / "provider_device_probe"
    cmd = [
        cxx,
        "-std=c++17",
        "-O0",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING",
        f"-I{REPO / 'csrc' / 'sycl'}",
        "-isystem",
        str(SYCL_PREFIX / "include"),
        str(REPO / "csrc" / "sycl" / "provider_choice.cpp"),
        str(REPO / "tests" / "cpp" / "provider_device_probe.cpp"),
        f"-L{SYCL_PREFIX / 'lib'}",
        "-lsycl",
        f"-Wl,-rpath,{SYCL_PREFIX / 'lib'}",
        "-o",
        str(out),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


def probe(exe: Path, spec: str) -> dict[str, list[str]]:
    env = dict(os.environ)
    ocl = SYCL_PREFIX / "lib" / "libintelocl.so"
    if ocl.exists():
        env["OCL_ICD_FILENAMES"] = str(ocl)
    p = subprocess.run([str(exe), spec], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    out: dict[str, list[str]] = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition("=")
        out.setdefault(k, []).append(v)
    return out


def test_architecture_names_come_from_the_runtime(device_probe):
    out = probe(device_probe, "spir64")
    # An alias maps to its primary name; NVIDIA names carry the compute capability.
    assert out["name"] == ["intel_gpu_acm_g10", "nvidia_gpu_sm_90", "x86_64", "unknown"]


@pytest.mark.skipif(not (SYCL_PREFIX / "lib" / "libintelocl.so").exists(), reason="intel-opencl-rt not installed")
@pytest.mark.parametrize(
    "spec,source,image",
    [
        ("spir64", "aot-portable", "spir64"),
        ("spir64 spir64_x86_64", "aot-native", "spir64_x86_64"),
        ("nvptx64-nvidia-cuda:sm_75", "run-time-compile", ""),
        ("", "run-time-compile", ""),
    ],
)
def test_choice_for_the_real_opencl_cpu_device(device_probe, spec, source, image):
    """describe_device() reads backend, kind and architecture from the runtime; the choice follows."""
    devices = [d.split("|") for d in probe(device_probe, spec).get("device", [])]
    cpus = [d for d in devices if d[0] == "opencl" and d[1] == "1"]
    assert cpus, f"no OpenCL CPU device among {devices}"
    for _backend, _is_cpu, is_gpu, arch, got_source, got_image in cpus:
        assert is_gpu == "0"
        assert got_source == source and got_image == image, (arch, got_source, got_image)


# ---------------------------------------------------------------- SYCL on CUDA tensors: torch's cuda:N -> SYCL device

U0, U1, U2 = "00" * 16, "ab" * 16, "0123456789abcdef" * 2


def cuda_match(cli: Path, index: int, torch_uuid: str, *devs: str) -> dict[str, list[str]]:
    code, out = run(cli, "cuda-match", str(index), torch_uuid, *devs)
    assert code == 0, out
    return out


def test_cuda_match_by_uuid_ignores_a_different_order(cli):
    # torch's cuda:0 is the runtime's second CUDA device (e.g. CUDA_VISIBLE_DEVICES honoured by one side only)
    out = cuda_match(cli, 0, U1, f"u:{U0}", f"u:{U1}")
    assert out["index"] == ["1"] and out["by_uuid"] == ["1"] and out["why"] == [""]


def test_cuda_match_uuid_is_case_insensitive(cli):
    out = cuda_match(cli, 1, U2.upper(), f"u:{U0}", f"u:{U1}", f"u:{U2}")
    assert out["index"] == ["2"] and out["by_uuid"] == ["1"]


def test_cuda_match_by_index_when_a_side_has_no_uuid(cli):
    assert cuda_match(cli, 1, "-", f"u:{U0}", f"u:{U1}")["index"] == ["1"]
    out = cuda_match(cli, 1, U0, "u:", "u:")  # the runtime reports no UUIDs: ordinal
    assert out["index"] == ["1"] and out["by_uuid"] == ["0"]


@pytest.mark.parametrize(
    "index,uuid,devs,fragments",
    [
        (0, U0, [], ["lists no CUDA device", "libur_adapter_cuda.so"]),
        (2, "-", ["u:", "u:"], ["lists 2 CUDA device(s), none with index 2", "cuda:2"]),
        (
            0,
            U2,
            [f"u:{U0}", f"u:{U1}"],
            ["none of the SYCL runtime's 2 CUDA device(s) has the UUID of cuda:0", U2, "CUDA_VISIBLE_DEVICES"],
        ),
        (
            0,
            U1,
            [f"u:{U0}", f"x:{U1}"],
            ["CUDA device 1 (matched to cuda:0 by UUID) is unusable", "querying the device failed"],
        ),
        (0, "-", ["x:", "u:"], ["CUDA device 0 (matched to cuda:0 by index) is unusable"]),
    ],
)
def test_cuda_match_errors_say_why(cli, index, uuid, devs, fragments):
    out = cuda_match(cli, index, uuid, *devs)
    assert out["index"] == ["-1"]
    for f in fragments:
        assert f in out["why"][0]
