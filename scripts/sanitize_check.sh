#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer check of the C++ reference kernels and host code.
#
# Builds the extension with XKERNELS_SANITIZE=address,undefined (SYCL off: the SYCL runtime and
# its JIT are not ours to instrument) into a scratch copy of the Python package, then runs the
# reference-backend op tests against it with libasan preloaded (CPython itself is not
# instrumented). Fails on any sanitizer report. python/xkernels/ is left untouched.
#
#   scripts/sanitize_check.sh                 # default test selection (a few minutes)
#   scripts/sanitize_check.sh tests/test_layer_norm.py -k forward   # any pytest arguments
#
# Environment: SANITIZE_BUILD_DIR (default build/sanitize), SANITIZE_OUT (default: a temp dir),
# CMAKE_BUILD_PARALLEL_LEVEL (build jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
BUILD_DIR=${SANITIZE_BUILD_DIR:-build/sanitize}
OUT=${SANITIZE_OUT:-$(mktemp -d -t xk-sanitize-XXXXXX)}
PKG="$OUT/xkernels"
LOG="$OUT/sanitizer.log"
mkdir -p "$PKG"
cp python/xkernels/*.py python/xkernels/py.typed "$PKG/" 2>/dev/null || cp python/xkernels/*.py "$PKG/"
for sub in python/xkernels/*/; do [ -d "$sub" ] && cp -r "$sub" "$PKG/"; done
rm -f "$PKG"/_C*.so

echo "== building the sanitizer build into $PKG (build dir $BUILD_DIR)"
XKERNELS_SANITIZE=address,undefined XKERNELS_SYCL=OFF XKERNELS_CUDA=OFF XKERNELS_ACPP=OFF XKERNELS_BUILD_TYPE=RelWithDebInfo \
  XKERNELS_OUTPUT_DIR="$PKG" scripts/dev_build.sh "$BUILD_DIR"
SO=$(ls "$PKG"/_C*.so)
# grep reads the whole listing (no -q): with pipefail, -q exiting at the first match could kill ldd with SIGPIPE
# and fail the pipeline although libasan is there.
ldd "$SO" | grep libasan >/dev/null || { echo "sanitize_check: $SO is not linked against libasan"; exit 1; }

LIBASAN=$(${CXX:-c++} -print-file-name=libasan.so)
[ -e "$LIBASAN" ] || { echo "sanitize_check: libasan.so not found ($LIBASAN)"; exit 1; }
# libstdc++ preloaded right after libasan: CPython does not link it, and ASan's __cxa_throw interceptor
# resolves the real function when ASan starts; with libstdc++ only dlopen'ed later (by torch) the first
# C++ exception aborts in "CHECK failed: ... real___cxa_throw != 0".
LIBSTDCXX=$(${CXX:-c++} -print-file-name=libstdc++.so.6)
[ -e "$LIBSTDCXX" ] || { echo "sanitize_check: libstdc++.so.6 not found ($LIBSTDCXX)"; exit 1; }

if [ $# -eq 0 ]; then
  set -- tests/test_layer_norm.py tests/test_fused_linear_relu.py tests/test_conv2d.py tests/test_validation.py \
         tests/test_hostile.py tests/test_fuzz.py
fi

echo "== running the reference-backend tests under ASan/UBSan: $*"
# detect_leaks=0: CPython and torch keep allocations alive at exit by design.
# halt_on_error / abort_on_error: the first report kills the process (the test run fails), and
# every report is also written to $LOG.* and grepped below (child processes included).
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:log_path=$LOG:log_exe_name=0:detect_odr_violation=0"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$LOG"
export XKERNELS_BACKEND=reference XKERNELS_FUZZ_EXAMPLES=${XKERNELS_FUZZ_EXAMPLES:-40}
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev}
# This build has no SYCL backend, so nothing for launch checking (tests/conftest.py) to check.
unset XKERNELS_LAUNCH_CHECKING
set +e
LD_PRELOAD="$LIBASAN:$LIBSTDCXX" PYTHONPATH="$OUT:$ROOT/tests" "$PY" -m pytest -q -p no:cacheprovider -x "$@"
rc=$?
set -e
reports=$(cat "$LOG".* 2>/dev/null | grep -E "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" || true)
if [ -n "$reports" ]; then
  echo "== sanitizer reports:"; cat "$LOG".*
  echo "sanitize_check: FAILED (sanitizer reports above)"; exit 1
fi
if [ $rc -ne 0 ]; then echo "sanitize_check: FAILED (pytest exit code $rc)"; exit $rc; fi
echo "sanitize_check: OK (no ASan/UBSan reports)"
