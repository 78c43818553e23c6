#!/usr/bin/env bash
# Build Unified Runtime's CUDA adapter (libur_adapter_cuda.so.0, the working part of oneAPI's "CUDA plugin") from
# the source tarballs in ../shared/third_party, never from GitHub, so that the pip SYCL runtime (intel-sycl-rt +
# intel-cmplr-lib-ur 2026.1.2, UR loader 0.12) can reach NVIDIA GPUs. Only the adapter target is built, with the
# Unified Memory Framework linked in statically (the pip wheel's libumf is an older 1.1).
#
# The install is cached per pair of tarballs: $UR_CUDA_CACHE_ROOT/<first 16 hex of sha256(UR tarball, UMF
# tarball)>/ (default ~/.cache/xkernels/ur-cuda-adapter). A finished install carries a .complete stamp; anything
# without it is rebuilt. Prints the install prefix on its last line:
#   UR_CUDA_ADAPTER_DIR=$(scripts/build_ur_cuda_adapter.sh | tail -n 1)
# The prefix holds lib/libur_adapter_cuda.so{,.0,.0.12.0} and BUILD_INFO.txt. Never anything else: the link stubs
# stay in the build tree (below) and are never installed.
#
# Needs:
#   * a CUDA toolkit (cuda.h): CUDA_HOME / CUDA_PATH, nvcc's, or /usr/local/cuda;
#   * nvml.h, which CUDA toolkits without a driver lack: the nvidia-nvml-dev wheel from PyPI (headers only,
#     pinned below), downloaded once with pip into the cache (or NVML_INCLUDE=<dir with nvml.h>);
#   * cmake, ninja, a C/C++ compiler, Debian's libhwloc-dev (UMF needs hwloc >= 2.3; installed with apt-get
#     when missing and run as root).
# The toolkit has no libcuda / libnvidia-ml (they come with the driver), so the adapter is linked against stubs
# generated from cuda.h and nvml.h by scripts/cuda_link_stubs.py: the adapter records NEEDED libcuda.so.1 and
# libnvidia-ml.so.1 and binds to the real driver libraries on a GPU machine.
#
# After the build it checks that the adapter exports every urGet*ProcAddrTable entry point the pip UR loader
# looks up (when the loader is found: UR_LOADER=<path> or <python prefix>/lib/libur_loader.so.0) and fails
# loudly otherwise. Env: UR_TARBALL, UMF_TARBALL, UR_CUDA_CACHE_ROOT, CUDA_HOME, NVML_INCLUDE, PYTHON, JOBS.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
third="$here/../shared/third_party"
PY=${PYTHON:-python3}
NVML_WHEEL_VERSION=13.0.87 # nvidia-nvml-dev: nvml.h of CUDA 13.0 (any 12.x/13.x header has what UR uses)

pick() { # pattern: the one tarball matching it in ../shared/third_party
  local found=""
  for cand in "$third"/$1; do [ -f "$cand" ] && found="$cand"; done
  echo "$found"
}
ur_tar="${UR_TARBALL:-$(pick 'unified-runtime-*.tar.gz')}"
umf_tar="${UMF_TARBALL:-$(pick 'unified-memory-framework-*.tar.gz')}"
[ -n "$ur_tar" ] && [ -f "$ur_tar" ] || { echo "build_ur_cuda_adapter: no unified-runtime tarball (looked in $third; set UR_TARBALL)" >&2; exit 1; }
[ -n "$umf_tar" ] && [ -f "$umf_tar" ] || { echo "build_ur_cuda_adapter: no unified-memory-framework tarball (looked in $third; set UMF_TARBALL)" >&2; exit 1; }

key=$(cat "$ur_tar" "$umf_tar" | sha256sum | cut -c1-16)
root="${UR_CUDA_CACHE_ROOT:-$HOME/.cache/xkernels/ur-cuda-adapter}"
prefix="$root/$key"
if [ -f "$prefix/.complete" ] && [ -f "$prefix/lib/libur_adapter_cuda.so.0" ] && [ -f "$prefix/lib/libur_adapter_cuda.ddi-layout" ]; then
  echo "build_ur_cuda_adapter: cached adapter for $(basename "$ur_tar") + $(basename "$umf_tar") (key $key)" >&2
  echo "$prefix"
  exit 0
fi

# ---- toolchain
cuda=""
cands=("${CUDA_HOME:-}" "${CUDA_PATH:-}")
command -v nvcc >/dev/null 2>&1 && cands+=("$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")")
cands+=(/usr/local/cuda)
for c in "${cands[@]}"; do
  if [ -n "$c" ] && [ -f "$c/include/cuda.h" ]; then cuda="$c"; break; fi
done
[ -n "$cuda" ] || { echo "build_ur_cuda_adapter: no CUDA toolkit with include/cuda.h (tried: ${cands[*]}; set CUDA_HOME)" >&2; exit 1; }

need_pkgs=()
for p in libhwloc-dev pkg-config cmake ninja-build; do
  # grep without -q reads all its input: with pipefail, -q exiting early could SIGPIPE the writer and fail the pipe.
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "build_ur_cuda_adapter: missing Debian packages: ${need_pkgs[*]} (install them as root)" >&2; exit 1
  fi
  echo "build_ur_cuda_adapter: apt-get install ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi

nvml_inc="${NVML_INCLUDE:-}"
if [ -z "$nvml_inc" ]; then
  nvml_cache="$root/nvml-$NVML_WHEEL_VERSION"
  if [ ! -f "$nvml_cache/nvidia/cu13/include/nvml.h" ]; then
    dl=$(mktemp -d "${TMPDIR:-/tmp}/nvml-wheel.XXXXXX")
    echo "build_ur_cuda_adapter: pip download nvidia-nvml-dev==$NVML_WHEEL_VERSION (nvml.h)" >&2
    "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$dl" "nvidia-nvml-dev==$NVML_WHEEL_VERSION" >&2
    rm -rf "$nvml_cache" && mkdir -p "$nvml_cache"
    "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$(ls "$dl"/*.whl)" "$nvml_cache"
    rm -rf "$dl"
  fi
  nvml_inc="$nvml_cache/nvidia/cu13/include"
fi
[ -f "$nvml_inc/nvml.h" ] || { echo "build_ur_cuda_adapter: no nvml.h in $nvml_inc" >&2; exit 1; }

# ---- build
t0=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/ur-cuda-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar xzf "$ur_tar" -C "$work"
tar xzf "$umf_tar" -C "$work"
ur_src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'unified-runtime-*' | head -n 1)
umf_src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'unified-memory-framework-*' | head -n 1)

# Link-only driver stand-ins, inside the build tree: deleted with it, never installed.
"$PY" "$here/scripts/cuda_link_stubs.py" --cuda-include "$cuda/include" --nvml-include "$nvml_inc" --out "$work/stubs" >&2

cmake -S "$ur_src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DUR_BUILD_ADAPTER_CUDA=ON -DUR_BUILD_TESTS=OFF -DUR_BUILD_EXAMPLES=OFF -DUR_BUILD_TOOLS=OFF \
  -DUR_ENABLE_SANITIZER=OFF -DCMAKE_SKIP_RPATH=ON \
  -DUMF_BUILD_SHARED_LIBRARY=OFF -DUMF_BUILD_LEVEL_ZERO_PROVIDER=OFF -DUMF_BUILD_CUDA_PROVIDER=ON \
  -DUMF_CUDA_INCLUDE_DIR="$cuda/include" \
  -DFETCHCONTENT_SOURCE_DIR_UNIFIED-MEMORY-FRAMEWORK="$umf_src" -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  -DCUDAToolkit_ROOT="$cuda" \
  -DCUDA_cuda_driver_LIBRARY="$work/stubs/libcuda.so" -DCUDA_nvml_LIBRARY="$work/stubs/libnvidia-ml.so" \
  -DCMAKE_CXX_FLAGS="-isystem $nvml_inc" >&2
ninja -C "$work/build" -j "${JOBS:-$(nproc)}" ur_adapter_cuda >&2

lib="$work/build/lib/libur_adapter_cuda.so.0.12.0"
[ -f "$lib" ] || lib=$(find "$work/build/lib" -name 'libur_adapter_cuda.so.*.*' | head -n 1)
[ -f "$lib" ] || { echo "build_ur_cuda_adapter: the build produced no libur_adapter_cuda.so" >&2; exit 1; }

# ---- checks: what it needs, what it exports
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
for must in libcuda.so.1 libnvidia-ml.so.1; do
  case " $needed " in *" $must "*) ;; *) echo "build_ur_cuda_adapter: $lib does not need $must (NEEDED: $needed)" >&2; exit 1 ;; esac
done
case " $needed " in *" libumf.so"*) echo "build_ur_cuda_adapter: UMF was linked dynamically (NEEDED: $needed)" >&2; exit 1 ;; esac
if readelf -d "$lib" | grep -E "RPATH|RUNPATH" >/dev/null; then  # no grep -q under pipefail (SIGPIPE)
  echo "build_ur_cuda_adapter: $lib carries a run path (it must not point at the link stubs): $(readelf -d "$lib" | grep -E "RPATH|RUNPATH")" >&2
  exit 1
fi
exports=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u)
loader="${UR_LOADER:-$("$PY" -c 'import sys; print(sys.prefix)')/lib/libur_loader.so.0}"
if [ -f "$loader" ]; then
  wanted=$(strings -n 8 "$loader" | grep -E '^urGet[A-Za-z0-9]+ProcAddrTable$' | sort -u)
  [ -n "$wanted" ] || { echo "build_ur_cuda_adapter: found no urGet*ProcAddrTable names in $loader" >&2; exit 1; }
  missing=$(comm -23 <(echo "$wanted") <(echo "$exports"))
  if [ -n "$missing" ]; then
    echo "build_ur_cuda_adapter: the adapter lacks entry points the UR loader $loader looks up: $missing" >&2
    exit 1
  fi
  echo "build_ur_cuda_adapter: exports all $(echo "$wanted" | wc -l) urGet*ProcAddrTable entry points of $loader" >&2
else
  echo "build_ur_cuda_adapter: no pip UR loader at $loader: export check skipped (set UR_LOADER)" >&2
fi

# The loader/adapter ABI (docs/oneapi.md): the DDI table layout of this UR source, stamped beside the library.
# xkernels points the SYCL runtime only at an adapter whose stamp equals the runtime's include/unified-runtime/ur_ddi.h.
layout=$("$PY" "$here/python/xkernels/_ur_cuda.py" --ddi-digest "$ur_src/include/unified-runtime/ur_ddi.h")
runtime_ddi="$(dirname "$(dirname "$loader")")/include/unified-runtime/ur_ddi.h"
abi_note="no runtime ur_ddi.h at $runtime_ddi to compare"
if [ -f "$runtime_ddi" ]; then
  have=$("$PY" "$here/python/xkernels/_ur_cuda.py" --ddi-digest "$runtime_ddi")
  if [ "$have" = "$layout" ]; then
    abi_note="matches the runtime at $runtime_ddi"
  else
    abi_note="DIFFERS from the runtime at $runtime_ddi ($have): that runtime's loader cannot use this adapter"
  fi
fi
echo "build_ur_cuda_adapter: UR ABI (DDI layout) $layout: $abi_note" >&2

rm -rf "$prefix"
mkdir -p "$prefix/lib"
echo "$layout $(basename "$ur_tar")" >"$prefix/lib/libur_adapter_cuda.ddi-layout"
cp "$lib" "$prefix/lib/"
strip --strip-unneeded "$prefix/lib/$(basename "$lib")"
ln -s "$(basename "$lib")" "$prefix/lib/libur_adapter_cuda.so.0"
ln -s libur_adapter_cuda.so.0 "$prefix/lib/libur_adapter_cuda.so"
{
  echo "libur_adapter_cuda built by scripts/build_ur_cuda_adapter.sh on $(date -u +%FT%TZ)"
  echo "unified-runtime: $(basename "$ur_tar")"
  echo "unified-memory-framework: $(basename "$umf_tar") (static)"
  echo "cuda headers: $cuda/include ($(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda/include/cuda.h"))"
  echo "nvml.h: $nvml_inc"
  echo "NEEDED: $needed"
  echo "UR ABI (DDI layout): $layout; $abi_note"
  echo "build seconds: $(($(date +%s) - t0)) on $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'))"
} >"$prefix/BUILD_INFO.txt"
touch "$prefix/.complete"
echo "build_ur_cuda_adapter: installed $(basename "$lib") into $prefix/lib ($(($(date +%s) - t0)) s)" >&2
echo "$prefix"
