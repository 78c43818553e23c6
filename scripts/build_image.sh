#!/usr/bin/env bash
# Build the xkernels container image (Containerfile) with podman: one command.
#
#   scripts/build_image.sh [--base debian|public] [--tag NAME] [--jupyter] [--rebuild-base] [--no-cache]
#
# --base debian (default): the base image is made here from Debian bookworm's packages with mmdebstrap and
#     `podman import` (for machines without a container registry); cached as localhost/xkernels-base:bookworm,
#     remade only with --rebuild-base. Needs: apt-get install mmdebstrap podman runc.
# --base public: FROM python:3.11-slim-bookworm (needs a reachable registry).
# --jupyter: build with JupyterLab (ARG JUPYTER=1); the tag gets a -jupyter suffix.
#
# What the build needs from this machine, passed without baking anything into the image:
#  * the host's CA bundle (pip here goes through a TLS-inspecting proxy) as the build secret "ca";
#  * the host's pip index settings (index-url / extra-index-url, minus file:// ones, which do not exist in the
#    build) as the build secret "pipconf" (an index URL may hold credentials);
#  * torch's CPU wheel: from the first pip find-links directory holding torch-<ver>+cpu-*.whl, mounted into the
#    build as the build context "wheels" (never copied into a layer); without one, the build installs torch from
#    PyTorch's CPU index (download.pytorch.org/whl/cpu), never PyPI's multi-GB CUDA build.
# podman 4.3 on this kernel: the runc runtime (crun refuses hybrid cgroups) and ulimits no higher than
# nofile=20000, nproc=4096. The kernel cache is warmed during the build for THIS machine's CPU kind
# (docs/container.md).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=debian TAG=localhost/xkernels:latest JUPYTER=0 REBUILD_BASE=0 EXTRA=()
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --jupyter) JUPYTER=1; shift ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    --no-cache) EXTRA+=(--no-cache); shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$JUPYTER" = 1 ] && [ "$TAG" = localhost/xkernels:latest ] && TAG=localhost/xkernels:jupyter

PODMAN=(podman)
RUN_OPTS=(--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096)
DEBIAN_BASE=localhost/xkernels-base:bookworm
t0=$(date +%s)
say() { echo "=== [$(($(date +%s) - t0))s] $*"; }

command -v podman >/dev/null || { echo "build_image.sh: podman not found (apt-get install podman runc)" >&2; exit 1; }

# ------------------------------------------------------------------ base image
case "$BASE" in
  debian)
    BASE_IMAGE=$DEBIAN_BASE
    if [ "$REBUILD_BASE" = 1 ] || ! "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
      command -v mmdebstrap >/dev/null || { echo "build_image.sh: mmdebstrap not found (apt-get install mmdebstrap)" >&2; exit 1; }
      say "base image $BASE_IMAGE from Debian bookworm packages (mmdebstrap | podman import)"
      MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
      SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
      tarball=$(mktemp --suffix=.tar)
      trap 'rm -f "$tarball"' EXIT
      # minbase + what every stage needs: Python 3.11 with venv, CA certificates, tini-less: bash execs the command.
      mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
        bookworm "$tarball" \
        "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" "deb $SECURITY bookworm-security main"
      "${PODMAN[@]}" import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$BASE_IMAGE" >/dev/null
      rm -f "$tarball"
      trap - EXIT
    else
      say "base image $BASE_IMAGE exists (--rebuild-base to remake it)"
    fi
    PULL=never
    ;;
  public)
    BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm
    PULL=missing
    ;;
  *) echo "build_image.sh: --base must be debian or public, got '$BASE'" >&2; exit 2 ;;
esac

# ------------------------------------------------------------------ build secrets and contexts
secrets=$(mktemp -d)
trap 'rm -rf "$secrets"' EXIT
CA=${CA_BUNDLE:-$(python3 -c 'import ssl; print(ssl.get_default_verify_paths().cafile or "")' 2>/dev/null || true)}
[ -f "${CA:-}" ] || CA=/etc/ssl/certs/ca-certificates.crt
cp "$CA" "$secrets/ca.crt"
# The host's index settings, file:// ones dropped (they point into this machine's disk).
python3 - "$secrets/pip.conf" <<'PY'
import subprocess, sys
try:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
except Exception:
    out = ""
vals = {}
for line in out.splitlines():
    key, _, val = line.partition("=")
    name = key.rsplit(".", 1)[-1]
    if name in ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout", "retries"):
        vals.setdefault(name, val.strip().strip("'\""))
urls = [u for u in vals.get("extra-index-url", "").split() if not u.startswith("file:")]
with open(sys.argv[1], "w") as f:
    f.write("[global]\n")
    if vals.get("index-url", "").startswith(("http://", "https://")):
        f.write(f"index-url = {vals['index-url']}\n")
    if urls:
        f.write("extra-index-url = " + " ".join(urls) + "\n")
    for k in ("trusted-host", "timeout", "default-timeout", "retries"):
        if k in vals:
            f.write(f"{k} = {vals[k]}\n")
PY
# torch's CPU wheel from a find-links directory, if there is one.
WHEELS=$secrets/no-wheels
mkdir -p "$WHEELS"
for d in ${PIP_FIND_LINKS:-} $(pip config get global.find-links 2>/dev/null || true); do
  if ls "$d"/torch-"$TORCH_VERSION"+cpu-cp311-*.whl >/dev/null 2>&1; then WHEELS=$d; break; fi
done
if [ "$WHEELS" = "$secrets/no-wheels" ]; then
  say "no local torch $TORCH_VERSION+cpu wheel: the build takes it from https://download.pytorch.org/whl/cpu"
else
  say "torch $TORCH_VERSION+cpu from $WHEELS (mounted into the build, not copied)"
fi

# ------------------------------------------------------------------ the image
say "podman build -> $TAG (base $BASE_IMAGE, JUPYTER=$JUPYTER)"
"${PODMAN[@]}" build "${RUN_OPTS[@]}" --network host --pull="$PULL" --layers "${EXTRA[@]}" \
  --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg JUPYTER="$JUPYTER" --build-arg TORCH_VERSION="$TORCH_VERSION" \
  --secret id=ca,src="$secrets/ca.crt" --secret id=pipconf,src="$secrets/pip.conf" \
  --build-context wheels="$WHEELS" \
  -f Containerfile -t "$TAG" .
say "built $TAG: $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.2f GB", $1/1e9}')"
echo "run it: IMAGE=$TAG scripts/run_image.sh   (podman run with runc and the ulimits above; docs/container.md)"
