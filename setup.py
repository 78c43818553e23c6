"""Build driver: setuptools hands the native extension to CMake (Ninja generator).

Configuration comes from the environment (all optional):
  XKERNELS_SYCL=auto|on|off   SYCL backend (auto: on when the SYCL runtime headers are installed)
  XKERNELS_CUDA=auto|on|off   native CUDA backend (auto: nvcc found AND torch built with CUDA)
  XKERNELS_ACPP=auto|on|off   acpp conformance backend: the kernels compiled by AdaptiveCpp (auto: acpp found
                              as $ACPP_ROOT/bin/acpp or on PATH)
  XKERNELS_BUILD_TYPE=Release|Debug|RelWithDebInfo
  XKERNELS_SANITIZE=address,undefined   sanitizer test build
  XKERNELS_SYCL_AOT=auto|on|off        kernels compiled ahead of time by icpx when ONEAPI_ROOT is set or
                              icpx is on PATH (auto); XKERNELS_SYCL_TARGETS, XKERNELS_SYCL_AOT_DEVICES,
                              XKERNELS_SYCL_CUDA_ARCH choose the device images (docs/oneapi.md)
  CMAKE_ARGS                  extra arguments passed to CMake verbatim
"""
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from buildtools import oneapi  # noqa: E402  (plain Python: plans the oneAPI ahead-of-time kernels)


def _sycl_prefix():
    """Prefix holding include/sycl/sycl.hpp and lib/libsycl.so from the intel-sycl-rt wheel."""
    candidates = [os.environ.get("XKERNELS_SYCL_ROOT"), sys.prefix, sysconfig.get_config_var("prefix")]
    for c in candidates:
        if c and (Path(c) / "include" / "sycl" / "sycl.hpp").exists() and (Path(c) / "lib" / "libsycl.so").exists():
            return str(Path(c))
    return ""


# The torch range xkernels declares: 2.11 through 2.15, on Python 3.10 through 3.13. Which combinations
# have been built and tested: docs/compatibility.md (scripts/check_torch_versions.sh).
TESTED_TORCH = ">=2.11,<2.16"

# Runtime dependencies besides torch. The SYCL runtime wheels are what the extension loads: the SYCL
# runtime with its run-time kernel compiler, Unified Runtime (adapters), and Intel's OpenCL CPU runtime.
# 2026.2.0's intel-cmplr-lib-ur ships no OpenCL adapter (no CPU device), so it is excluded. See the
# shared SYCL notes.
RUNTIME_REQUIRES = [
    "intel-sycl-rt>=2025.3.3,!=2026.2.*",
    "intel-cmplr-lib-ur>=2025.3.3,!=2026.2.*",
    "intel-opencl-rt>=2025.3.3",
    "numpy",
    "rich>=13",
]


def _torch_requirement():
    """torch pinned to the version in the build environment: the extension is compiled against that torch's C++
    API and ABI, which change between releases, so a wheel runs with exactly that version (any build of it: CPU
    or CUDA, the local label is not pinned). Without torch (metadata of a source distribution) the tested range."""
    try:
        import torch
    except ImportError:
        return f"torch{TESTED_TORCH}"
    version = torch.__version__.split("+")[0]
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # packaging is only needed for this warning
        SpecifierSet = None
    if SpecifierSet is not None and version not in SpecifierSet(TESTED_TORCH):
        print(f"xkernels: WARNING: building against torch {version}, outside the tested range {TESTED_TORCH} "
              "(docs/compatibility.md)", flush=True)
    return f"torch=={version}"


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import torch  # the installed torch; see pyproject.toml for why it is not a build requirement

        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_temp = Path(self.build_temp).resolve() / ext.name
        build_temp.mkdir(parents=True, exist_ok=True)
        cfg = os.environ.get("XKERNELS_BUILD_TYPE", "Release")
        args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DCMAKE_BUILD_TYPE={cfg}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DXKERNELS_SYCL={os.environ.get('XKERNELS_SYCL', 'auto').upper()}",
            f"-DXKERNELS_SYCL_ROOT={_sycl_prefix()}",
            f"-DXKERNELS_CUDA={os.environ.get('XKERNELS_CUDA', 'auto').upper()}",
            f"-DXKERNELS_ACPP={os.environ.get('XKERNELS_ACPP', 'auto').upper()}",
            f"-DXKERNELS_ACPP_ROOT={os.environ.get('ACPP_ROOT', '')}",
            f"-DXKERNELS_TORCH_CUDA_VERSION={torch.version.cuda or ''}",
            f"-DXKERNELS_TORCH_XPU={'ON' if getattr(torch.version, 'xpu', None) else 'OFF'}",
            f"-DXKERNELS_SANITIZE={os.environ.get('XKERNELS_SANITIZE', '')}",
            f"-DXKERNELS_VERSION={self.distribution.get_version()}",
            "-G", "Ninja",
        ]
        try:
            aot = oneapi.configure_for_setup(os.environ, ROOT, build_temp / "oneapi_aot", out_dir, _sycl_prefix())
        except oneapi.OneAPIError as e:
            raise SystemExit(f"xkernels: oneAPI ahead-of-time build: ERROR\n{e}") from None
        print(aot.summary, flush=True)
        args += aot.cmake_args
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_temp), *args], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_temp), "--config", cfg, "-j", jobs], check=True)


setup(
    install_requires=[_torch_requirement(), *RUNTIME_REQUIRES],
    ext_modules=[CMakeExtension("xkernels._C")],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"xkernels": ["py.typed"]},
    zip_safe=False,
)
