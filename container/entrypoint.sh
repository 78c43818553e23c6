#!/bin/bash
# Entry point of the xkernels image (Containerfile; docs/container.md):
#  1. the kernel cache: $XKERNELS_CACHE_DIR (/cache, a volume) is seeded from the image's warm cache when it has
#     no kernels yet (a fresh anonymous volume, an empty named volume or bind mount); when it cannot be written
#     (a bind mount owned by another user), the image's warm cache is used instead, for this container only;
#  2. prints `python -m xkernels info` (XKERNELS_INFO=0 skips it); stops there, with its exit status, when
#     XKERNELS_DEVICE is invalid (2) or names a device that is absent (3);
#  3. runs the command: by default `python -m xkernels` (the self-check), or JupyterLab in an image built with
#     JUPYTER=1.
set -euo pipefail
cache=${XKERNELS_CACHE_DIR:-/cache}
warm=${XKERNELS_WARM_CACHE:-/opt/xkernels/warm-cache}
if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then
  if [ ! -e "$cache/sycl" ] && [ -d "$warm/sycl" ]; then
    cp -R "$warm/." "$cache/"
    echo "xkernels: kernel cache $cache seeded from the image's warm cache" >&2
  fi
else
  echo "xkernels: kernel cache $cache is not writable by uid $(id -u); using the image's warm cache $warm" \
    "(kernels compiled now are not kept after this container)" >&2
  export XKERNELS_CACHE_DIR=$warm
  cache=$warm
fi
if [ -f "$warm/BUILT_FOR" ]; then
  built_for=$(cat "$warm/BUILT_FOR")
  here=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  if [ "$built_for" != "$here" ]; then
    echo "xkernels: the image's kernel cache was warmed on '$built_for', this CPU is '$here': kernels for this" \
      "CPU are compiled on first use (once per cache volume)" >&2
  fi
fi
if [ "${XKERNELS_INFO:-1}" != 0 ]; then
  rc=0
  python -m xkernels info || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "xkernels: stopping: 'python -m xkernels info' exited with $rc (see above; XKERNELS_DEVICE=auto|cpu|cuda|xpu)" >&2
    exit "$rc"
  fi
fi
if [ $# -eq 0 ]; then
  if [ "${XKERNELS_JUPYTER:-0}" = 1 ] && command -v jupyter >/dev/null; then
    set -- jupyter lab --ip=0.0.0.0 --port=8888 --no-browser --ServerApp.root_dir="$HOME"
  else
    set -- python -m xkernels
  fi
fi
exec "$@"
