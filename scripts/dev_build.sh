#!/usr/bin/env bash
# In-place development build: compiles the extension into python/xkernels/ so that
#   PYTHONPATH=python pytest tests
# runs against the working tree. Usage: scripts/dev_build.sh [build-dir]  (env as for setup.py)
# XKERNELS_OUTPUT_DIR=<dir> puts the extension there instead (e.g. a sanitizer build next to a
# copy of the Python package, leaving python/xkernels/ alone).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build/dev}
PY=${PYTHON:-python}
TORCH_PREFIX=$($PY -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
TORCH_CUDA=$($PY -c 'import torch; print(torch.version.cuda or "")')
TORCH_XPU=$($PY -c 'import torch; print("ON" if getattr(torch.version, "xpu", None) else "OFF")')
SYCL_ROOT=${XKERNELS_SYCL_ROOT:-$($PY -c 'import sys, os; p=sys.prefix; print(p if os.path.exists(os.path.join(p,"include/sycl/sycl.hpp")) else "")')}
# oneAPI ahead-of-time kernels (docs/oneapi.md): prints its summary, emits CMake arguments, fails loudly.
mkdir -p "$BUILD_DIR"
AOT_ARGS=$($PY -m buildtools.oneapi --build-dir "$BUILD_DIR/oneapi_aot" --library-dir "${XKERNELS_OUTPUT_DIR:-$PWD/python/xkernels}" \
  --host-sycl-prefix "$SYCL_ROOT")
mapfile -t AOT_ARGS_ARR <<<"$AOT_ARGS"
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="${XKERNELS_BUILD_TYPE:-Release}" \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="${XKERNELS_OUTPUT_DIR:-$PWD/python/xkernels}" \
  -DPython_EXECUTABLE="$(command -v $PY)" \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DXKERNELS_SYCL="${XKERNELS_SYCL:-AUTO}" -DXKERNELS_SYCL_ROOT="$SYCL_ROOT" \
  -DXKERNELS_CUDA="${XKERNELS_CUDA:-AUTO}" -DXKERNELS_TORCH_CUDA_VERSION="$TORCH_CUDA" \
  -DXKERNELS_ACPP="${XKERNELS_ACPP:-AUTO}" -DXKERNELS_ACPP_ROOT="${ACPP_ROOT:-}" \
  -DXKERNELS_TORCH_XPU="$TORCH_XPU" -DXKERNELS_SANITIZE="${XKERNELS_SANITIZE:-}" \
  -DXKERNELS_VERSION=0.1.0 "${AOT_ARGS_ARR[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
