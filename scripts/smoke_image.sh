#!/usr/bin/env bash
# Smoke test of the xkernels image (scripts/build_image.sh builds it): in fresh containers,
#  1. a short model through xkernels.optimize(), then the main job (python -m xkernels): the first calls in the
#     container must compile nothing. Evidence: the SYCL runtime's cache trace (SYCL_CACHE_TRACE=5) shows only
#     cache hits (no "cache miss", nothing stored) and no file is added to the kernel cache;
#  2. the same model with an empty kernel cache, as the control: it compiles (misses > 0), and takes that long;
#  3. XKERNELS_DEVICE: cpu and auto run; cuda (absent here) and an invalid value stop with status 3 and 2 and a
#     message naming the variable; the user is not root;
#  4. a bind-mounted host directory as /cache is seeded and keeps the kernels after the container is gone.
# Usage: scripts/smoke_image.sh [IMAGE]   (default localhost/xkernels:latest). Exit status 0 when all pass.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-localhost/xkernels:latest}
RUN=(podman run --rm -i --runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096)
t0=$(date +%s)
say() { echo "=== [$(($(date +%s) - t0))s] $*"; }
fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The model: every op (conv2d with a folded BatchNorm and fused ReLU, linear+ReLU, layer norm), float32.
cat >"$work/model.py" <<'PY'
import time

import torch

import xkernels

torch.manual_seed(0)
nn = torch.nn
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
    nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(32, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 10),
).eval()
x = torch.randn(8, 3, 32, 32)
with torch.no_grad():
    want = model(x)
    fast = xkernels.optimize(model)
    t = time.perf_counter()
    with xkernels.dispatch_record() as rec:
        got = fast(x)
    first = time.perf_counter() - t
    t = time.perf_counter()
    fast(x)
    second = time.perf_counter() - t
err = (got - want).abs().max().item()
ran = sorted({f"{op}:{backend}" for (op, backend, _dev) in rec.counts()})
print(f"SMOKE model: device {xkernels.best_device()}, first forward {first:.2f} s, second {second:.3f} s, "
      f"max |err| vs torch {err:.2e}, ran {', '.join(ran)}")
assert err < 1e-3, err
assert any(r.endswith(":sycl") for r in ran), ran
PY

# Counts of the SYCL runtime's persistent-cache trace lines in a log: hits and misses (a miss compiles).
trace_counts() {
  local hits misses
  hits=$(grep -c -E "Persistent Cache\]: using cached" "$1" || true)
  misses=$(grep -c -E "Persistent Cache\]: (cache miss|storing|device binary has been cached)" "$1" || true)
  echo "$hits $misses"
}

say "image $IMAGE: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1/1e9}')"

say "1. first calls in a fresh container (warm cache from the image): the model, then python -m xkernels"
start=$(date +%s)
"${RUN[@]}" -e SYCL_CACHE_TRACE=5 -v "$work/model.py:/opt/smoke/model.py:ro" "$IMAGE" bash -c '
  files() { find "$XKERNELS_CACHE_DIR" -type f ! -name "*access_time*" ! -name "*.lock" ! -name "xkernels-manifest.txt" | sort; }
  echo "SMOKE user: $(id -un) uid $(id -u)"
  files > /tmp/before
  python /opt/smoke/model.py
  python -m xkernels
  files > /tmp/after
  echo "SMOKE cache files: $(wc -l < /tmp/before) before, $(wc -l < /tmp/after) after, $(comm -13 /tmp/before /tmp/after | wc -l) new"
' >"$work/warm.log" 2>&1 || { tail -50 "$work/warm.log"; fail "the warm run failed"; }
warm_s=$(($(date +%s) - start))
grep -E "^SMOKE|^OK:|seeded" "$work/warm.log"
read -r hits misses < <(trace_counts "$work/warm.log")
echo "SYCL persistent cache: $hits hits, $misses misses/stores"
grep -q "SMOKE user: xk uid 1000" "$work/warm.log" || fail "the container does not run as the non-root user xk"
grep -q "^OK: " "$work/warm.log" || fail "python -m xkernels did not pass"
grep -q " 0 new$" "$work/warm.log" || fail "kernels were compiled into the cache (see $work/warm.log)"
[ "$misses" -eq 0 ] && [ "$hits" -gt 0 ] || fail "expected only cache hits, got $hits hits and $misses misses"

say "2. control: the same model with an empty kernel cache (compiles on first use)"
start=$(date +%s)
"${RUN[@]}" -e SYCL_CACHE_TRACE=5 -e XKERNELS_INFO=0 -e XKERNELS_CACHE_DIR=/tmp/cold -e XKERNELS_WARM_CACHE=/none \
  -v "$work/model.py:/opt/smoke/model.py:ro" "$IMAGE" python /opt/smoke/model.py >"$work/cold.log" 2>&1 ||
  { tail -30 "$work/cold.log"; fail "the cold run failed"; }
cold_s=$(($(date +%s) - start))
grep "^SMOKE" "$work/cold.log"
read -r chits cmisses < <(trace_counts "$work/cold.log")
echo "SYCL persistent cache: $chits hits, $cmisses misses/stores"
[ "$cmisses" -gt 0 ] || fail "the cold control compiled nothing: the trace count is not measuring what it should"

say "3. XKERNELS_DEVICE"
device_case() { # value, expected exit status, text the output must hold
  local rc=0
  "${RUN[@]}" -e XKERNELS_DEVICE="$1" "$IMAGE" true >"$work/dev.log" 2>&1 || rc=$?
  local out
  out=$(tr -s ' \n' ' ' <"$work/dev.log")
  [ "$rc" -eq "$2" ] || { cat "$work/dev.log"; fail "XKERNELS_DEVICE=$1: exit status $rc, expected $2"; }
  [[ "$out" == *"$3"* ]] || { cat "$work/dev.log"; fail "XKERNELS_DEVICE=$1: output lacks '$3'"; }
  echo "XKERNELS_DEVICE=$1: exit $rc: $(grep -m1 -o -E "(chosen: [a-z]+ .*|XKERNELS_DEVICE='?$1.*)" "$work/dev.log" |
    sed 's/ *$//' | head -c 160)"
}
device_case cpu 0 "chosen: cpu (requested by XKERNELS_DEVICE=cpu)"
device_case auto 0 "chosen: cpu (auto: falling back to cpu"
device_case cuda 3 "XKERNELS_DEVICE=cuda: the cuda device is unavailable"
device_case gpu 2 "allowed values are auto, cpu, cuda, xpu"

say "4. a host directory as the cache volume persists the kernels"
mkdir -p "$work/cache" && chmod 777 "$work/cache"
"${RUN[@]}" -e XKERNELS_INFO=0 -v "$work/cache:/cache" "$IMAGE" true >"$work/vol.log" 2>&1 || { cat "$work/vol.log"; fail "volume run"; }
n=$(find "$work/cache/sycl" -type f -name "*.bin" | wc -l)
echo "host cache directory after the container exited: $n cached binaries"
[ "$n" -gt 0 ] || fail "the bind-mounted cache was not seeded"

say "SMOKE PASSED: warm run ${warm_s}s ($hits cache hits, 0 compiled), cold control ${cold_s}s ($cmisses misses)" \
  "on $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
