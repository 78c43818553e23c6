#!/usr/bin/env bash
# GPU validation of the native CUDA backend, for a machine with an NVIDIA GPU and a CUDA build of torch,
# sized for one H200 (16 cores): every step has a time cap (defaults below, about 9 minutes in all):
#   1. build and install xkernels with XKERNELS_CUDA=ON (pip install --no-build-isolation --no-deps .),
#      for this GPU's architecture only (TORCH_CUDA_ARCH_LIST; override to build more)     GPU_CHECK_BUILD_S=200
#   2. bad input on cuda: scripts/probes/cuda_error_probe.py (each call in a child process)  GPU_CHECK_PROBE_S=60
#   3. every cuda-parametrized test of the suite (-k cuda, which includes tests/test_cuda.py), in parallel
#      (pytest-xdist, one worker per core), XKERNELS_REQUIRE_BACKENDS=cuda, a junit file and a per-cause
#      summary (scripts/junit_summary.py)                                                    GPU_CHECK_TEST_S=200
#   4. the rest of the suite (-k "not cuda"), when GPU_CHECK_REST=1                          GPU_CHECK_REST_S=150
#   5. benchmark the CUDA backend against torch, all three ops (benchmarks/bench_cuda.py)   GPU_CHECK_BENCH_S=110
# Usage: scripts/gpu_check.sh OUTDIR     (env: PYTHON, XKERNELS_SYCL [default OFF], TORCH_CUDA_ARCH_LIST, the caps)
#        scripts/gpu_check.sh --sycl [--dry-run] OUTDIR   SYCL kernels on the GPU through the pip SYCL runtime and
#        Unified Runtime's CUDA adapter, from the bundle of scripts/make_sycl_cuda_bundle.sh (scripts/gpu_check_sycl.sh)
# OUTDIR receives env.txt, build.log, probe.log, test.log, junit.xml, causes.txt, bench.log, bench_cuda.csv,
# summary.txt. Exit status: non-zero if the build or any test fails (the probe and the benchmark only report).
set -uo pipefail
if [[ "${1:-}" == "--sycl" ]]; then
  shift
  exec "$(dirname "$0")/gpu_check_sycl.sh" "$@"
fi
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
SRC=$PWD
PY=${PYTHON:-python}
export PATH="$($PY -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"  # cmake / ninja of that environment
JOBS=$(nproc)
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start))s] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

{
  date -u
  uname -a
  nvidia-smi || true
  (command -v nvcc && nvcc --version) || echo "nvcc: not on PATH"
  gcc --version | head -n 1
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu",
torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
  git rev-parse HEAD 2>/dev/null || true
  git status --short 2>/dev/null | head -20 || true
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [[ -z "${TORCH_CUDA_ARCH_LIST:-}" ]]; then
  TORCH_CUDA_ARCH_LIST=$($PY -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || echo "8.0;9.0")
fi
export TORCH_CUDA_ARCH_LIST XKERNELS_CUDA=ON XKERNELS_SYCL=${XKERNELS_SYCL:-OFF}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$JOBS}
stamp "build: XKERNELS_CUDA=ON XKERNELS_SYCL=$XKERNELS_SYCL TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
if ! timeout "${GPU_CHECK_BUILD_S:-200}" $PY -m pip install --no-build-isolation --no-deps -v . >"$OUT/build.log" 2>&1; then
  grep -iE -A2 "^-- |error" "$OUT/build.log" | tail -40
  stamp "BUILD FAILED (see build.log)"
  exit 1
fi
grep -E "^-- +(CUDA backend|cuBLASLt|torch|SYCL)" "$OUT/build.log" | tee -a "$OUT/summary.txt"
# Also place the built library in the source tree (python/xkernels, git-ignored), so the tests
# import a complete package whichever of the two a conftest puts first on sys.path.
SO=$(cd "$OUT" && $PY -c 'import xkernels._C as c; print(c.__file__)') || {
  stamp "installed xkernels does not import"
  exit 1
}
cp -f "$SO" python/xkernels/
$PY -c 'import sys; sys.path.insert(0, "python"); import xkernels; print("xkernels", xkernels.__version__,
"cuda backend:", xkernels.backends()["cuda"])' | tee -a "$OUT/summary.txt"

stamp "probe: bad input on cuda (each call in a child process)"
(cd "$OUT" && timeout "${GPU_CHECK_PROBE_S:-60}" $PY "$SRC/scripts/probes/cuda_error_probe.py" --gdb --native-backtrace) \
  >"$OUT/probe.log" 2>&1
stamp "probe exit status $?: $(tail -n 1 "$OUT/probe.log")"
if [[ "${GPU_CHECK_CPU_PROBE:-0}" == 1 ]]; then
  # The same probe against a CPU-only build (no .cu files) with GPU_CHECK_CPU_PROBE_STD (default 17): tells a
  # fault of this compiler from one of the CUDA build's mix of translation units.
  std=${GPU_CHECK_CPU_PROBE_STD:-17}
  stamp "probe: CPU-only build, C++$std"
  mkdir -p "$OUT/cpu_pkg"
  cp -r python/xkernels "$OUT/cpu_pkg/"
  rm -f "$OUT"/cpu_pkg/xkernels/_C*.so
  if (XKERNELS_CUDA=OFF XKERNELS_SYCL=OFF XKERNELS_ACPP=off XKERNELS_OUTPUT_DIR="$OUT/cpu_pkg/xkernels" PYTHON=$PY \
    CMAKE_ARGS="-DCMAKE_CXX_STANDARD=$std" timeout 150 scripts/dev_build.sh "$OUT/cpu_build") >"$OUT/cpu_build.log" 2>&1; then
    (cd "$OUT" && PYTHONPATH="$OUT/cpu_pkg" timeout 60 $PY "$SRC/scripts/probes/cuda_error_probe.py" --native-backtrace) \
      >"$OUT/probe_cpu.log" 2>&1
    stamp "CPU-only probe: $(tail -n 1 "$OUT/probe_cpu.log")"
  else
    stamp "CPU-only build failed (cpu_build.log)"
  fi
  rm -rf "$OUT/cpu_build" "$OUT/cpu_pkg"
fi

export XKERNELS_REQUIRE_BACKENDS=cuda
test_rc=0
run_tests() { # name, cap, pytest selection...
  local name=$1 cap=$2
  shift 2
  stamp "tests ($name): pytest $* -n $JOBS"
  (cd "$SRC" && timeout "$cap" $PY -m pytest tests "$@" -n "$JOBS" -q -rfE -p no:cacheprovider \
    --junitxml="$OUT/junit-$name.xml") >"$OUT/test-$name.log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/test-$name.log"
  if [[ -f "$OUT/junit-$name.xml" ]]; then
    $PY scripts/junit_summary.py "$OUT/junit-$name.xml" >"$OUT/causes-$name.txt"
    head -n 40 "$OUT/causes-$name.txt"
  else
    echo "no junit file (timed out or crashed: exit $rc)" | tee "$OUT/causes-$name.txt"
  fi
  stamp "tests ($name) exit status $rc"
  [[ $rc -eq 0 ]] || test_rc=$rc
}
run_tests cuda "${GPU_CHECK_TEST_S:-200}" -k cuda
if [[ "${GPU_CHECK_REST:-0}" == 1 ]]; then
  run_tests rest "${GPU_CHECK_REST_S:-150}" -k "not cuda"
fi

stamp "benchmark vs torch (all three ops; shapes interleaved so a time cut keeps each op)"
(cd "$OUT" && timeout "${GPU_CHECK_BENCH_S:-110}" $PY "$SRC/benchmarks/bench_cuda.py" --csv "$OUT/bench_cuda.csv" \
  --quick --repeats 7 --min-time 0.05 --max-seconds $((${GPU_CHECK_BENCH_S:-110} - 25))) 2>&1 | tee "$OUT/bench.log"
stamp "benchmark exit status ${PIPESTATUS[0]}"
stamp "done"
exit $test_rc
