#!/usr/bin/env bash
# Pack what a GPU machine without SYCL wheels needs to run xkernels' SYCL kernels on an NVIDIA GPU from the pip
# SYCL runtime (docs/oneapi.md, "NVIDIA GPUs"), as one xz-compressed tarball under 40 MB:
#   lib/      libsycl.so.9 and libsycl-jit (the run-time kernel compiler, with the NVPTX backend; plus the wheel's
#             nvptx64 device-library files, 90 KB), the UR loader (libsvml, which they list but never call, is an
#             empty placeholder),
#             Intel's math libraries they need (libimf, libsvml, libirng, libintlc), libhwloc.so.15 (from tcmlib),
#             and Unified Runtime's CUDA adapter built by scripts/build_ur_cuda_adapter.sh with its ABI stamp;
#   include/  the SYCL runtime's headers (sycl/, CL/, std/, unified-runtime/, xpti/), to build xkernels against;
#   MANIFEST.txt  versions, files, sizes and sha256.
# The runtime is the oneAPI release whose Unified Runtime ABI equals the adapter's (the script checks the stamp
# against the wheel's include/unified-runtime/ur_ddi.h and stops when they differ): for the UR snapshot in
# ../shared/third_party that is 2026.2.0 (SYCL_CUDA_RUNTIME_VERSION to override). Wheels come from PyPI with pip
# (cached in ~/.cache/xkernels/wheels).
# The driver link stubs are never packed: the adapter binds to the GPU machine's libcuda.so.1.
#
# Usage: scripts/make_sycl_cuda_bundle.sh [OUT_DIR]   (default .sycl-cuda-bundle, git-ignored)
# Prints the bundle's path on its last line. scripts/gpu_check.sh --sycl unpacks it.
# Env: PYTHON, SYCL_CUDA_RUNTIME_VERSION, TCMLIB_VERSION, BUNDLE_MAX_MB (40),
#      BUNDLE_XZ_FLAGS (default "-T0 --x86 --lzma2=preset=9": the x86 branch filter, then LZMA2 at level 9).
# The libraries are packed stripped (strip --strip-unneeded: no static symbol tables; the dynamic ones stay).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
PY=${PYTHON:-python3}
V=${SYCL_CUDA_RUNTIME_VERSION:-2026.2.0}
TCM=${TCMLIB_VERSION:-1.6.0}
MAX_MB=${BUNDLE_MAX_MB:-40}
OUT=${1:-.sycl-cuda-bundle}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
t0=$(date +%s)

adapter_prefix=$(scripts/build_ur_cuda_adapter.sh | tail -n 1)
adapter=$(readlink -f "$adapter_prefix/lib/libur_adapter_cuda.so.0")
stamp="$adapter_prefix/lib/libur_adapter_cuda.ddi-layout"
[ -f "$adapter" ] && [ -f "$stamp" ] || { echo "make_sycl_cuda_bundle: no adapter or ABI stamp in $adapter_prefix/lib" >&2; exit 1; }

wheels="${XKERNELS_WHEEL_CACHE:-$HOME/.cache/xkernels/wheels}/sycl-cuda-$V"
mkdir -p "$wheels"
want=("intel-sycl-rt==$V" "intel-cmplr-lib-ur==$V" "intel-cmplr-lib-rt==$V" "tcmlib==$TCM")
have_all=1
for w in intel_sycl_rt-$V intel_cmplr_lib_ur-$V intel_cmplr_lib_rt-$V tcmlib-$TCM; do
  compgen -G "$wheels/$w-*.whl" >/dev/null || have_all=0
done
if [ $have_all = 0 ]; then
  echo "make_sycl_cuda_bundle: pip download --no-deps ${want[*]}" >&2
  "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$wheels" "${want[@]}" >&2
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/sycl-cuda-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
name="xkernels-sycl-cuda-$V"
root="$stage/$name"
mkdir -p "$root/lib" "$root/include"
# Extract only the members we ship from each wheel (<pkg>.data/data/{lib,include}/...).
"$PY" - "$wheels" "$V" "$TCM" "$root" <<'PY'
import fnmatch, os, stat, sys, zipfile
from pathlib import Path

wheels, v, tcm, root = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
plan = {
    # the NVPTX device libraries are also inside libsycl-jit (its virtual toolchain); the files cost 90 KB
    f"intel_sycl_rt-{v}-*.whl": ["lib/libsycl.so.9.*", "lib/libsycl-jit.so.*", "lib/dpcpp-*/sycl/*nvptx64*",
                                 "include/sycl/*", "include/CL/*", "include/std/*", "include/unified-runtime/*",
                                 "include/xpti/*"],
    f"intel_cmplr_lib_ur-{v}-*.whl": ["lib/libur_loader.so.0.*"],
    f"intel_cmplr_lib_rt-{v}-*.whl": ["lib/libimf.so", "lib/libsvml.so", "lib/libirng.so", "lib/libintlc.so.5"],
    f"tcmlib-{tcm}-*.whl": ["lib/libhwloc.so.15"],
}
for pattern, members in plan.items():
    found = sorted(wheels.glob(pattern))
    if not found:
        sys.exit(f"make_sycl_cuda_bundle: no wheel {pattern} in {wheels}")
    z = zipfile.ZipFile(found[0])
    hits = {m: 0 for m in members}
    for info in z.infolist():
        parts = info.filename.split("/")
        if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data":
            continue
        rel = "/".join(parts[2:])
        for m in members:
            if fnmatch.fnmatch(rel, m) and not rel.endswith("-gdb.py"):
                dest = root / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(info))
                os.chmod(dest, 0o755 if rel.startswith("lib/") else 0o644)
                hits[m] += 1
    missing = [m for m, n in hits.items() if n == 0]
    if missing:
        sys.exit(f"make_sycl_cuda_bundle: {found[0].name} has no {missing}")
PY
cd "$root/lib"
# sonames and the unversioned names the build links against / the runtime dlopens
jit=$(ls libsycl-jit.so.* | head -n 1)
ln -s "$jit" libsycl-jit.so
sycl=$(ls libsycl.so.9.* | head -n 1)
ln -s "$sycl" libsycl.so.9
ln -s libsycl.so.9 libsycl.so
loader=$(ls libur_loader.so.0.* | head -n 1)
ln -s "$loader" libur_loader.so.0
ln -s libur_loader.so.0 libur_loader.so
ln -s libintlc.so.5 libintlc.so
cp "$adapter" .
ln -s "$(basename "$adapter")" libur_adapter_cuda.so.0
cp "$stamp" .
# Static symbol tables are for debuggers, not the dynamic linker: libsycl-jit alone carries 34 MB of them.
for f in *.so*; do [ -L "$f" ] || strip --strip-unneeded "$f"; done
# libsvml (25 MB, 3.6 MB compressed) is NEEDED by libsycl-jit and the loader only because Intel's compiler links it
# by default: no packed library binds any of its symbols (checked here, or the script stops). An empty library
# with its soname satisfies the dynamic linker.
svml_syms=$(nm -D --defined-only libsvml.so | awk '{print $3}' | sed 's/@.*//' | sort -u)
for f in *.so*; do
  [ -L "$f" ] || [ "$f" = libsvml.so ] && continue
  used=$(comm -12 <(nm -D --undefined-only "$f" | awk '{print $2}' | sed 's/@.*//' | sort -u) <(echo "$svml_syms"))
  [ -z "$used" ] || { echo "make_sycl_cuda_bundle: $f binds symbols of libsvml: $used" >&2; exit 1; }
done
echo 'void xkernels_bundle_svml_placeholder(void) {}' | cc -shared -fPIC -x c - -Wl,-soname,libsvml.so -o libsvml.so
cd "$SRC"

# The ABI check: the adapter's stamp against this runtime's ur_ddi.h.
built=$(cut -d' ' -f1 "$stamp")
runtime=$("$PY" python/xkernels/_ur_cuda.py --ddi-digest "$root/include/unified-runtime/ur_ddi.h")
if [ "$built" != "$runtime" ]; then
  echo "make_sycl_cuda_bundle: the adapter's UR ABI ($built) is not intel-sycl-rt $V's ($runtime); pick the oneAPI release of the UR snapshot (SYCL_CUDA_RUNTIME_VERSION)" >&2
  exit 1
fi
# Everything the adapter, the loader and libsycl need is in lib/ or is a base system library.
for f in "$root"/lib/*.so*; do
  [ -L "$f" ] && continue
  for dep in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case "$dep" in
      libc.so.6 | libm.so.6 | libdl.so.2 | librt.so.1 | libpthread.so.0 | ld-linux-x86-64.so.2 | libgcc_s.so.1 | \
        libstdc++.so.6 | libz.so.1 | libcuda.so.1 | libnvidia-ml.so.1) ;;
      *) [ -e "$root/lib/$dep" ] || { echo "make_sycl_cuda_bundle: $(basename "$f") needs $dep, which is not in the bundle" >&2; exit 1; } ;;
    esac
  done
done

{
  echo "xkernels SYCL-on-CUDA runtime bundle, made by scripts/make_sycl_cuda_bundle.sh on $(date -u +%FT%TZ)"
  echo "intel-sycl-rt / intel-cmplr-lib-ur / intel-cmplr-lib-rt $V, tcmlib $TCM (libhwloc), from PyPI"
  echo "CUDA adapter: $(head -n 3 "$adapter_prefix/BUILD_INFO.txt" | tail -n 2 | tr '\n' ' ')"
  echo "UR ABI (DDI layout): $built (adapter) = $runtime (runtime)"
  echo "libraries stripped with strip --strip-unneeded; libsvml.so is an empty placeholder with its soname (nothing packed binds a symbol of it)"
  echo "use: XKERNELS_SYCL_ROOT=<dir>/$name LD_LIBRARY_PATH=<dir>/$name/lib (scripts/gpu_check.sh --sycl does this)"
  echo
  (cd "$root" && find lib -type f -printf '%s %p\n' | sort -k2 | while read -r size path; do
    echo "$(sha256sum "$path" | cut -c1-16) $size $path"
  done)
  echo "include/: $(find "$root/include" -type f | wc -l) files, $(du -sb "$root/include" | cut -f1) bytes"
} >"$root/MANIFEST.txt"

bundle="$OUT/$name.tar.xz"
rm -f "$bundle"
tar -C "$stage" -cf - "$name" | xz ${BUNDLE_XZ_FLAGS:--T0 --x86 --lzma2=preset=9} >"$bundle.part"
mv "$bundle.part" "$bundle"
cp "$root/MANIFEST.txt" "$OUT/$name.MANIFEST.txt"
bytes=$(stat -c %s "$bundle")
echo "make_sycl_cuda_bundle: $bundle: $bytes bytes ($((bytes / 1000000)) MB; $(du -sb "$root" | cut -f1) bytes unpacked) in $(($(date +%s) - t0)) s" >&2
if [ "$bytes" -gt $((MAX_MB * 1000000)) ]; then
  echo "make_sycl_cuda_bundle: the bundle is over $MAX_MB MB" >&2
  exit 1
fi
echo "$bundle"
