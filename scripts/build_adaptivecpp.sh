#!/usr/bin/env bash
# Build AdaptiveCpp (the second SYCL implementation, used as the `acpp` conformance
# backend) from the source tarball in ../shared/third_party, never from the network.
#
# The install is cached per tarball: $ACPP_CACHE_ROOT/<first 16 hex of the tarball's
# sha256>/ (default ~/.cache/xkernels/adaptivecpp). A finished install carries a
# .complete stamp; anything without it is rebuilt. Prints the install prefix on its
# last line (use: ACPP_ROOT=$(scripts/build_adaptivecpp.sh | tail -n 1)).
#
# Needs Debian's LLVM 19 (clang, libclang, libomp) and Boost.Context/Fiber; installs
# them with apt-get when missing and run as root.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tarball="${ACPP_TARBALL:-}"
if [ -z "$tarball" ]; then
  for cand in "$here/../shared/third_party"/AdaptiveCpp-*.tar.gz; do
    [ -f "$cand" ] && tarball="$cand"
  done
fi
[ -n "$tarball" ] && [ -f "$tarball" ] || { echo "build_adaptivecpp: no AdaptiveCpp tarball (looked in $here/../shared/third_party; set ACPP_TARBALL)" >&2; exit 1; }

key=$(sha256sum "$tarball" | cut -c1-16)
root="${ACPP_CACHE_ROOT:-$HOME/.cache/xkernels/adaptivecpp}"
prefix="$root/$key"
if [ -f "$prefix/.complete" ] && [ -x "$prefix/bin/acpp" ]; then
  echo "build_adaptivecpp: cached install for $(basename "$tarball") (sha256 $key)" >&2
  echo "$prefix"
  exit 0
fi

need_pkgs=()
for p in llvm-19-dev libclang-19-dev clang-19 libomp-19-dev libboost-context-dev libboost-fiber-dev ninja-build cmake; do
  # grep without -q reads all its input: with pipefail, -q exiting early could SIGPIPE the writer and fail the pipe.
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "build_adaptivecpp: missing Debian packages: ${need_pkgs[*]} (install them as root)" >&2; exit 1
  fi
  echo "build_adaptivecpp: apt-get install ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/acpp-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
rm -rf "$prefix"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DLLVM_DIR=/usr/lib/llvm-19/cmake -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_COMPILER=clang-19 \
  -DWITH_OPENCL_BACKEND=OFF -DWITH_LEVEL_ZERO_BACKEND=OFF -DWITH_CUDA_BACKEND=OFF -DWITH_ROCM_BACKEND=OFF >&2
ninja -C "$work/build" -j "$(nproc)" >&2
ninja -C "$work/build" install >&2
touch "$prefix/.complete"
echo "build_adaptivecpp: installed $(basename "$tarball") into $prefix" >&2
echo "$prefix"
