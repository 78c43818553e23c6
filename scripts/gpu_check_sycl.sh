#!/usr/bin/env bash
# SYCL mode of scripts/gpu_check.sh: xkernels' SYCL kernels on an NVIDIA GPU through the pip SYCL runtime and
# Unified Runtime's CUDA adapter built from source, for a GPU machine that has torch with CUDA but no SYCL wheels
# (docs/oneapi.md, "NVIDIA GPUs"). Everything SYCL comes from the bundle of scripts/make_sycl_cuda_bundle.sh
# (.sycl-cuda-bundle/xkernels-sycl-cuda-*.tar.xz, git-ignored: carry that path to the GPU machine).
#
#   1. unpack the bundle into $SYCL_CUDA_PREFIX (default /tmp/xk-sycl-cuda)                          ~10 s
#   2. the UR loader of the bundle lists its adapters, platforms and devices (scripts/ur_loader_probe.py --log):
#      the CUDA adapter must show the GPU                                                      GPU_CHECK_PROBE_S=30
#   3. build xkernels (scripts/dev_build.sh) with SYCL against the bundle (XKERNELS_SYCL_ROOT) and native CUDA
#      when torch has CUDA, into a copy of the package at $SYCL_CUDA_PREFIX-pkg (PYTHONPATH)  GPU_CHECK_BUILD_S=200
#   4. python -m xkernels info: the SYCL devices, "SYCL on CUDA", the run-time compiler's PTX target
#   --- the steps below need a GPU; --dry-run stops here ---
#   5. tests/test_sycl_on_cuda.py (every op forward+backward with use_backend("sycl") on CUDA tensors, stream order,
#      dispatch record), XKERNELS_REQUIRE_BACKENDS=cuda,sycl (fails, never skips, without the device) GPU_CHECK_TEST_S=120
#   6. python -m xkernels check --device cuda --backends sycl --quick (every op x dtype vs the float64 oracle)
#                                                                                               GPU_CHECK_CHECK_S=120
#   7. python -m xkernels parity examples/model_parity.py:make --configs cpu,cuda+optimize+backend=sycl   GPU_CHECK_PARITY_S=60
# The caps add up to about 9 minutes, so one 600 s command covers the whole run. On this project's GPU machines:
#   run(command="PYTHON=python3 scripts/gpu_check.sh --sycl $OUT/sycl", carry=[".sycl-cuda-bundle"], timeout_s=600)
# Usage: scripts/gpu_check.sh --sycl [--dry-run] OUTDIR   (env: PYTHON, SYCL_CUDA_BUNDLE, SYCL_CUDA_PREFIX, caps)
# OUTDIR receives env.txt, probe.log, build.log, info.log, test-sycl-on-cuda.log, junit-sycl-on-cuda.xml,
# check.log, parity.log, summary.txt. Exit status: non-zero when a step fails (with --dry-run: when a step
# before the GPU steps fails).
set -uo pipefail
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY=1
  shift
fi
OUT=${1:?usage: scripts/gpu_check.sh --sycl [--dry-run] OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
SRC=$PWD
PY=${PYTHON:-python}
export PATH="$($PY -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
JOBS=$(nproc)
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start))s] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"
rc_all=0
fail() {
  stamp "FAILED: $*"
  rc_all=1
}

{
  date -u
  uname -a
  nvidia-smi || true
  gcc --version | head -n 1
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu",
torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
  git rev-parse HEAD 2>/dev/null || true
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# ---- 1. the bundle
bundle=${SYCL_CUDA_BUNDLE:-$(ls -t .sycl-cuda-bundle/xkernels-sycl-cuda-*.tar.xz 2>/dev/null | head -n 1)}
if [[ -z "$bundle" || ! -f "$bundle" ]]; then
  stamp "no SYCL-on-CUDA bundle (make it with scripts/make_sycl_cuda_bundle.sh, carry .sycl-cuda-bundle/)"
  exit 1
fi
P=${SYCL_CUDA_PREFIX:-/tmp/xk-sycl-cuda}
rm -rf "$P" && mkdir -p "$P"
stamp "unpack $bundle ($(stat -c %s "$bundle") bytes) into $P"
if ! xz -dc -T0 "$bundle" | tar -C "$P" -xf - --strip-components=1; then
  fail "unpacking the bundle"
  exit 1
fi
head -n 4 "$P/MANIFEST.txt" | tee -a "$OUT/summary.txt"
export XKERNELS_SYCL_ROOT=$P
export LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- 2. what the UR loader sees
stamp "UR loader probe (scripts/ur_loader_probe.py --log)"
timeout "${GPU_CHECK_PROBE_S:-30}" $PY scripts/ur_loader_probe.py --loader "$P/lib/libur_loader.so.0" --log >"$OUT/probe.log" 2>&1
probe_rc=$?
grep -vE "^<LOADER>\[(DEBUG)\]" "$OUT/probe.log" | grep -iE "cuda|adapter|platform|device|error|fail" | head -20
grep -qE "^    NVIDIA CUDA BACKEND: [1-9][0-9]* device" "$OUT/probe.log" && cuda_dev=1 || cuda_dev=0
stamp "probe exit status $probe_rc; CUDA devices through the adapter: $([[ $cuda_dev == 1 ]] && echo yes || echo no)"
[[ $probe_rc == 0 ]] || fail "the UR loader probe"

# ---- 3. build
TORCH_CUDA=$($PY -c 'import torch; print(torch.version.cuda or "")')
if [[ -n "$TORCH_CUDA" && -z "${TORCH_CUDA_ARCH_LIST:-}" ]]; then
  TORCH_CUDA_ARCH_LIST=$($PY -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null || echo "9.0")
  export TORCH_CUDA_ARCH_LIST
fi
export XKERNELS_SYCL=ON XKERNELS_CUDA=$([[ -n "$TORCH_CUDA" ]] && echo ON || echo OFF) XKERNELS_ACPP=off
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$JOBS}
stamp "build: XKERNELS_SYCL=ON (runtime: the bundle) XKERNELS_CUDA=$XKERNELS_CUDA TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-}"
# Into a copy of the package outside the source tree, so python/xkernels (a build against another runtime) is untouched.
PKG=${P}-pkg
rm -rf "$PKG" && mkdir -p "$PKG"
cp -r python/xkernels "$PKG/"
rm -rf "$PKG"/xkernels/*.so "$PKG"/xkernels/__pycache__
if ! PYTHON=$PY XKERNELS_OUTPUT_DIR="$PKG/xkernels" timeout "${GPU_CHECK_BUILD_S:-200}" scripts/dev_build.sh build/sycl-cuda \
  >"$OUT/build.log" 2>&1; then
  grep -iE -B2 -A6 "error" "$OUT/build.log" | tail -40
  fail "build (see build.log)"
  exit 1
fi
grep -E "^-- +(SYCL|CUDA backend|torch)" "$OUT/build.log" | tee -a "$OUT/summary.txt"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
$PY -c 'import xkernels, sys; print("xkernels from", xkernels.__file__)' | tee -a "$OUT/summary.txt"

# ---- 4. info
stamp "python -m xkernels info"
(cd "$OUT" && COLUMNS=200 timeout 120 $PY -m xkernels info) >"$OUT/info.log" 2>&1 || fail "xkernels info"
grep -E "SYCL runtime|SYCL on CUDA|run-time compiler environment|^\| *sycl|sycl " "$OUT/info.log" | head -12 | tee -a "$OUT/summary.txt"
(cd "$OUT" && timeout 120 $PY -m xkernels info --json >"$OUT/info.json" 2>/dev/null) || true

if [[ $DRY == 1 ]]; then
  stamp "dry run: stopping before the steps that need a GPU (tests, check, parity)"
  stamp "done (exit $rc_all)"
  exit $rc_all
fi

# ---- 5. tests
export XKERNELS_REQUIRE_BACKENDS=cuda,sycl
stamp "tests: tests/test_sycl_on_cuda.py"
(cd "$SRC" && timeout "${GPU_CHECK_TEST_S:-120}" $PY -m pytest tests/test_sycl_on_cuda.py -q -rfEs -p no:cacheprovider \
  --junitxml="$OUT/junit-sycl-on-cuda.xml") >"$OUT/test-sycl-on-cuda.log" 2>&1
test_rc=$?
tail -n 15 "$OUT/test-sycl-on-cuda.log"
stamp "tests exit status $test_rc"
[[ $test_rc == 0 ]] || fail "tests/test_sycl_on_cuda.py"

# ---- 6. check: every op x dtype on cuda with the sycl backend
stamp "python -m xkernels check --device cuda --backends sycl --quick"
(cd "$OUT" && timeout "${GPU_CHECK_CHECK_S:-120}" $PY -m xkernels check --device cuda --backends sycl --quick \
  --json "$OUT/check.json") >"$OUT/check.log" 2>&1
check_rc=$?
tail -n 25 "$OUT/check.log"
stamp "check exit status $check_rc"
[[ $check_rc == 0 ]] || fail "xkernels check on cuda with sycl"

# ---- 7. parity of a model: CPU vs CUDA with the sycl backend
stamp "python -m xkernels parity examples/model_parity.py:make --configs cpu,cuda+optimize+backend=sycl"
(cd "$SRC" && timeout "${GPU_CHECK_PARITY_S:-60}" $PY -m xkernels parity examples/model_parity.py:make \
  --configs cpu,cuda+optimize+backend=sycl --json "$OUT/parity.json") >"$OUT/parity.log" 2>&1
parity_rc=$?
tail -n 25 "$OUT/parity.log"
stamp "parity exit status $parity_rc"
[[ $parity_rc == 0 ]] || fail "xkernels parity cpu vs cuda+optimize+sycl"

(cd "$OUT" && timeout 60 $PY -m xkernels info) >"$OUT/info-after.log" 2>&1 || true
grep -E "kernels from|run-time|cuda" "$OUT/info-after.log" | head -12 | tee -a "$OUT/summary.txt"
stamp "done (exit $rc_all)"
exit $rc_all
