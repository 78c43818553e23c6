#!/usr/bin/env bash
# GPU validation of the native CUDA backend, for a machine with an NVIDIA GPU and a CUDA build
# of torch (sized for one H200 in under 8 minutes):
#   1. build and install xkernels with XKERNELS_CUDA=ON (pip install --no-build-isolation --no-deps .),
#      for this GPU's architecture only (TORCH_CUDA_ARCH_LIST; override to build more);
#   2. run tests/test_cuda.py (marked cuda);
#   3. benchmark the CUDA kernels against torch (cuBLAS / cuDNN / aten) and print the ratios.
# Usage: scripts/gpu_check.sh OUTDIR     (env: PYTHON, XKERNELS_SYCL [default OFF], TORCH_CUDA_ARCH_LIST,
#        GPU_CHECK_BUILD_S / GPU_CHECK_TEST_S / GPU_CHECK_BENCH_S time limits in seconds)
# OUTDIR receives env.txt, build.log, test.log, junit.xml, bench.log, bench_cuda.csv, summary.txt.
# Exit status: non-zero if the build or any test fails (the benchmark only reports).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

{
  date -u; uname -a; nvidia-smi || true; (command -v nvcc && nvcc --version) || echo "nvcc: not on PATH"
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu",
torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
  git rev-parse HEAD 2>/dev/null || true
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [[ -z "${TORCH_CUDA_ARCH_LIST:-}" ]]; then
  TORCH_CUDA_ARCH_LIST=$($PY -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || echo "8.0;9.0")
fi
export TORCH_CUDA_ARCH_LIST XKERNELS_CUDA=ON XKERNELS_SYCL=${XKERNELS_SYCL:-OFF}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
stamp "build: XKERNELS_CUDA=ON XKERNELS_SYCL=$XKERNELS_SYCL TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
if ! timeout "${GPU_CHECK_BUILD_S:-300}" $PY -m pip install --no-build-isolation --no-deps -v . >"$OUT/build.log" 2>&1; then
  grep -E "^-- |error" "$OUT/build.log" | tail -40
  stamp "BUILD FAILED (see build.log)"
  exit 1
fi
grep -E "^-- +(CUDA backend|torch|SYCL)" "$OUT/build.log" | tee -a "$OUT/summary.txt"
# Also place the built library in the source tree (python/xkernels, git-ignored), so the tests
# import a complete package whichever of the two a conftest puts first on sys.path.
SO=$(cd "$OUT" && $PY -c 'import xkernels._C as c; print(c.__file__)') || { stamp "installed xkernels does not import"; exit 1; }
cp -f "$SO" python/xkernels/
$PY -c 'import sys; sys.path.insert(0, "python"); import xkernels; print("xkernels", xkernels.__version__,
"cuda backend:", xkernels.backends()["cuda"])' | tee -a "$OUT/summary.txt"

# Run from outside the source tree so that the installed package (with _C) is imported.
stamp "tests: tests/test_cuda.py -m cuda"
( cd "$OUT" && timeout "${GPU_CHECK_TEST_S:-200}" $PY -m pytest "$OLDPWD/tests/test_cuda.py" -m cuda -q -rs \
    -p no:cacheprovider --junitxml="$OUT/junit.xml" ) >"$OUT/test.log" 2>&1
test_rc=$?
tail -25 "$OUT/test.log"
stamp "tests exit status $test_rc"

stamp "benchmark vs torch"
( cd "$OUT" && timeout "${GPU_CHECK_BENCH_S:-150}" $PY "$OLDPWD/benchmarks/bench_cuda.py" --csv "$OUT/bench_cuda.csv" \
    --max-seconds $(( ${GPU_CHECK_BENCH_S:-150} - 30 )) ) 2>&1 | tee "$OUT/bench.log"
stamp "benchmark exit status ${PIPESTATUS[0]}"
stamp "done"
exit $test_rc
