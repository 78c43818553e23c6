#!/usr/bin/env bash
# Compile check of the native CUDA backend that needs neither a GPU nor a CUDA build of torch.
#
#   1. kernels: every csrc/cuda/kernels/*.cuh through the torch-free TUs csrc/cuda/compile_check/*_kernels.cu
#      (all kernel instantiations the host wrappers launch), for each architecture, warnings as errors,
#      with ptxas' register / spill report;
#   2. floating-point policy on the generated PTX: no approximate division / sqrt / reciprocal and no
#      flush-to-zero instructions anywhere;
#   3. kernels on the CPU: csrc/cuda/compile_check/kernels_cpu_test.cpp, built with the host C++ compiler
#      and run: the implicit-GEMM index mappings, and the kernels themselves (SIMT GEMM with split-K,
#      column sums, layer_norm; the WMMA GEMM against a functional model of nvcuda::wmma) executed by
#      a CPU simulator of blocks / barriers / warp shuffles (compile_check/cpu_sim.h);
#   4. host wrappers: every csrc/cuda/*.cu against the installed torch's headers (host and device code;
#      for the last architecture only, since step 1 already compiles the same kernel instantiations for
#      every architecture), and csrc/cuda/*.cpp (registration) with the host C++ compiler. A CPU-only torch wheel ships ATen/cuda and c10/cuda headers but not the
#      generated c10/cuda/impl/cuda_cmake_macros.h; when it is missing the TUs are compiled with
#      -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE (that header only defines C10_CUDA_BUILD_SHARED_LIBS, which
#      matters for Windows DLL exports).
# Nothing is linked against torch's CUDA libraries and nothing runs on a GPU.
#
# Usage: scripts/check_cuda_compile.sh [--force]
#   NVCC                   nvcc to use (default: PATH, then $CUDA_HOME/bin, /usr/local/cuda/bin)
#   PYTHON                 python with torch installed (default: python3)
#   XK_CUDA_CHECK_ARCHS    SM architectures (default: "80 90")
#   XK_CUDA_CHECK_JOBS     parallel nvcc jobs (default: number of CPUs)
#   XK_CUDA_CHECK_DIR      output directory (default: build/cuda-compile-check)
# A successful run is remembered (hash of sources, flags, nvcc and torch); an unchanged tree
# re-checks instantly unless --force. Exit status is non-zero if anything fails to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

NVCC=${NVCC:-$(command -v nvcc || true)}
for cand in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
  [[ -z "$NVCC" && -x "$cand" ]] && NVCC=$cand
done
if [[ -z "$NVCC" ]]; then
  echo "check_cuda_compile: nvcc not found (set NVCC or CUDA_HOME)" >&2
  exit 2
fi
PY=${PYTHON:-python3}
ARCHS=${XK_CUDA_CHECK_ARCHS:-80 90}
JOBS=${XK_CUDA_CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}
OUT=${XK_CUDA_CHECK_DIR:-build/cuda-compile-check}
mkdir -p "$OUT/obj" "$OUT/logs"

TORCH_INFO=$($PY - <<'PY'
import os, torch
inc = os.path.join(os.path.dirname(torch.__file__), "include")
print(inc)
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__, torch.version.cuda or "cpu")
PY
) || { echo "check_cuda_compile: cannot import torch with $PY (set PYTHON)" >&2; exit 2; }
TORCH_INC=$(sed -n 1p <<<"$TORCH_INFO")
TORCH_ABI=$(sed -n 2p <<<"$TORCH_INFO")
TORCH_VER=$(sed -n 3p <<<"$TORCH_INFO")
NVCC_VER=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')

# The nvcc floating-point flags (cmake/fp_flags.txt, "nvcc:") and the other flags (cmake/cuda_nvcc_flags.txt).
read -r -a FP_FLAGS < <(sed -n 's/^nvcc:[[:space:]]*//p' cmake/fp_flags.txt)
[ ${#FP_FLAGS[@]} -gt 0 ] || { echo "check_cuda_compile: cmake/fp_flags.txt has no 'nvcc:' line" >&2; exit 2; }
mapfile -t FLAGS < <(grep -v '^#' cmake/cuda_nvcc_flags.txt | sed '/^[[:space:]]*$/d')
FLAGS=("${FP_FLAGS[@]}" "${FLAGS[@]}")
GENCODE=()
for a in $ARCHS; do GENCODE+=(-gencode "arch=compute_${a},code=sm_${a}"); done
LAST_ARCH=${ARCHS##* }
COMMON=(-std=c++20 "${FLAGS[@]}" -Xcompiler=-fPIC,-ffp-contract=off -I csrc/cuda)
# CUDA's include directory, for host-compiler builds of the kernel headers (step 3).
CUDA_INC=""
for cand in "$("$NVCC" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/.*INCLUDES="-I\([^"]*\)".*/\1/p' | head -1)" \
            "${CUDA_HOME:-}/include" "$(dirname "$(readlink -f "$NVCC")")/../include" /usr/local/cuda/include; do
  if [[ -n "$cand" && -f "$cand/cuda_runtime.h" ]]; then CUDA_INC=$cand; break; fi
done
if [[ -z "$CUDA_INC" ]]; then
  echo "check_cuda_compile: CUDA include directory (cuda_runtime.h) not found next to $NVCC" >&2
  exit 2
fi
CXX=${CXX:-c++}

STAMP=$( { cat "$0" cmake/cuda_nvcc_flags.txt cmake/fp_flags.txt; find csrc/cuda csrc/include -type f | sort | xargs cat;
           echo "$NVCC_VER $TORCH_VER $TORCH_INC $ARCHS"; } | sha256sum | cut -d' ' -f1)
if [[ $FORCE == 0 && -f "$OUT/PASS" && "$(cat "$OUT/PASS")" == "$STAMP" ]]; then
  echo "check_cuda_compile: sources unchanged since the last successful check ($OUT/summary.txt):"
  cat "$OUT/summary.txt"
  exit 0
fi
rm -rf "$OUT/PASS" "$OUT/ptx" "$OUT/logs"
mkdir -p "$OUT/ptx" "$OUT/logs"

# Every kernel header must be reached by a torch-free TU.
missing=0
for h in csrc/cuda/kernels/*.cuh; do
  name=$(basename "$h")
  if ! grep -lq "kernels/${name}\"" csrc/cuda/compile_check/*.cu csrc/cuda/compile_check/*.cuh; then
    echo "check_cuda_compile: $h is not included by any csrc/cuda/compile_check/ file" >&2
    missing=1
  fi
done
[[ $missing == 0 ]] || exit 1

TORCH_DEFS=(-DXKERNELS_WITH_CUDA "-D_GLIBCXX_USE_CXX11_ABI=${TORCH_ABI}")
TORCH_NOTE="torch headers complete"
if [[ ! -f "$TORCH_INC/c10/cuda/impl/cuda_cmake_macros.h" ]]; then
  TORCH_DEFS+=(-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE)
  TORCH_NOTE="torch $TORCH_VER lacks c10/cuda/impl/cuda_cmake_macros.h: compiled with -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"
fi
TORCH_INCS=(-I "$TORCH_INC" -I "$TORCH_INC/torch/csrc/api/include" -I csrc/include)

echo "check_cuda_compile: nvcc $NVCC_VER ($NVCC), torch $TORCH_VER, sm: $ARCHS, jobs: $JOBS"
echo "  $TORCH_NOTE"

# ---- jobs -------------------------------------------------------------------------------
declare -a NAMES=() PIDS=()
start_job() {  # name, command...
  local name=$1; shift
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
  ( s=$(date +%s); if "$@" >"$OUT/logs/$name.log" 2>&1; then echo "ok $(( $(date +%s) - s ))" >"$OUT/logs/$name.status";
    else echo "FAILED $(( $(date +%s) - s ))" >"$OUT/logs/$name.status"; fi ) &
  NAMES+=("$name"); PIDS+=($!)
}

for tu in csrc/cuda/compile_check/*_kernels.cu; do
  name=kernels-$(basename "$tu" .cu)
  start_job "$name" "$NVCC" "${COMMON[@]}" "${GENCODE[@]}" -Werror all-warnings -Xptxas -v --keep \
    --keep-dir "$OUT/ptx" -c "$tu" -o "$OUT/obj/$name.o"
done
start_job cpu-kernel-test bash -c "\"$CXX\" -std=c++20 -O1 -pthread -Wall -Wextra -Wno-unknown-pragmas -Werror \
  -ffp-contract=off -I csrc/cuda -I \"$CUDA_INC\" csrc/cuda/compile_check/kernels_cpu_test.cpp \
  -o \"$OUT/obj/kernels_cpu_test\" && \"$OUT/obj/kernels_cpu_test\""
for tu in csrc/cuda/*.cu; do
  name=host-$(basename "$tu" .cu)
  start_job "$name" "$NVCC" "${COMMON[@]}" -gencode "arch=compute_${LAST_ARCH},code=sm_${LAST_ARCH}" \
    -Werror all-warnings "${TORCH_DEFS[@]}" "${TORCH_INCS[@]}" -c "$tu" -o "$OUT/obj/$name.o"
done
for src in csrc/cuda/*.cpp; do
  name=cxx-$(basename "$src" .cpp)
  # -O2 as in the Release build: at -O0 g++ reports a false -Wreturn-type in entry.h's XK_CALL_BACKEND switch.
  # -DXKERNELS_WITH_SYCL: also the code paths of a build with both backends (SYCL on CUDA tensors).
  start_job "$name" "$CXX" -std=c++20 -O2 -fPIC -Wall -Wextra -Wno-unused-parameter -Werror -ffp-contract=off \
    "${TORCH_DEFS[@]}" -DXKERNELS_WITH_SYCL "${TORCH_INCS[@]}" -I "$CUDA_INC" -c "$src" -o "$OUT/obj/$name.o"
done
for p in "${PIDS[@]}"; do wait "$p" || true; done

# ---- report -------------------------------------------------------------------------------
fail=0
{
  echo "nvcc $NVCC_VER, torch $TORCH_VER, architectures: $ARCHS"
  echo "$TORCH_NOTE"
  for name in "${NAMES[@]}"; do
    read -r st secs <"$OUT/logs/$name.status"
    extra=""
    if [[ $name == kernels-* ]]; then
      n=$(grep -c "Compiling entry function" "$OUT/logs/$name.log" || true)
      spills=$(grep -E "[1-9][0-9]* bytes spill stores" -c "$OUT/logs/$name.log" || true)
      maxreg=$(grep -o "Used [0-9]* registers" "$OUT/logs/$name.log" | awk '{print $2}' | sort -n | tail -1)
      extra="  ($n kernel builds, max ${maxreg:-0} registers, $spills with spills)"
    elif [[ $name == cpu-kernel-test ]]; then
      extra="  ($(tail -1 "$OUT/logs/$name.log"))"
    elif [[ $name == host-* ]]; then
      extra="  (sm_${LAST_ARCH})"
    fi
    printf '  %-8s %4ss  %s%s\n' "$st" "$secs" "$name" "$extra"
    [[ $st == ok ]] || fail=1
  done
} | tee "$OUT/summary.txt"
for name in "${NAMES[@]}"; do
  read -r st _ <"$OUT/logs/$name.status"
  if [[ $st != ok ]]; then
    fail=1
    echo; echo "---- $name ($OUT/logs/$name.log), last 60 lines:"; tail -60 "$OUT/logs/$name.log"
  fi
done

# Floating-point policy on the PTX of every kernel.
shopt -s nullglob
ptx=("$OUT"/ptx/*.ptx)
if (( ${#ptx[@]} == 0 )); then
  echo "check_cuda_compile: no PTX was kept; cannot check the floating-point policy" >&2
  fail=1
else
  bad=$(grep -nE '\.(approx|ftz)\b|div\.full' "${ptx[@]}" || true)
  if [[ -n "$bad" ]]; then
    echo "check_cuda_compile: approximate or flush-to-zero instructions in the PTX (FP policy violated):" >&2
    head -20 <<<"$bad" >&2
    fail=1
  else
    echo "  ok        PTX of ${#ptx[@]} file(s): no .approx / .ftz / div.full instructions" | tee -a "$OUT/summary.txt"
  fi
fi
rm -f "$OUT"/ptx/*.ii "$OUT"/ptx/*.cubin "$OUT"/ptx/*.fatbin* "$OUT"/ptx/*.cudafe* "$OUT"/ptx/*.module_id "$OUT"/ptx/*.reg.c 2>/dev/null || true

if [[ $fail != 0 ]]; then
  echo "check_cuda_compile: FAILED" >&2
  exit 1
fi
echo "$STAMP" >"$OUT/PASS"
echo "check_cuda_compile: all CUDA sources compile (nothing ran on a GPU)"
