#!/usr/bin/env bash
# Run the xkernels image with the flags podman needs on hosts like this project's machines (podman 4.3, cgroups v1,
# a hard open-files limit of 20000): the runc runtime and ulimits no higher than nofile=20000, nproc=4096. Elsewhere a
# plain `podman run --rm localhost/xkernels` (or docker run) does the same.
#
#   scripts/run_image.sh [PODMAN-RUN-OPTIONS... --] [COMMAND...]
#   scripts/run_image.sh                                   # info, then python -m xkernels (the self-check)
#   scripts/run_image.sh -v xk-cache:/cache -- python my_model.py
#   IMAGE=localhost/xkernels:jupyter scripts/run_image.sh -p 8888:8888 --
set -euo pipefail
IMAGE=${IMAGE:-localhost/xkernels:latest}
opts=()
if [[ " $* " == *" -- "* ]]; then
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
fi
tty=()
[ -t 0 ] && [ -t 1 ] && tty=(-t)
exec podman run --rm -i "${tty[@]}" --runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 \
  "${opts[@]}" "$IMAGE" "$@"
