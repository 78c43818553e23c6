#!/usr/bin/env bash
# Builds xkernels against several torch x Python combinations and runs a test command against each build,
# then rewrites the compatibility table docs/compatibility.md. What a maintainer runs before a release (CI
# keeps its one pinned combination).
#
# Usage: scripts/check_torch_versions.sh [options] [TORCH:PYTHON ...]
#   TORCH:PYTHON          e.g. 2.13.0:3.11 (default: the matrix in DEFAULT_COMBOS below)
#   --test-cmd CMD        the test command, run in the repository root with the combination's python first
#                         on PATH (default: $DEFAULT_TEST_CMD); the table records it per row
#   --reuse TORCH:PYTHON=VENV
#                         take torch (and its CUDA libraries) for that combination from an existing venv
#                         instead of installing it: the combination's own venv sees VENV's site-packages
#                         through a .pth file, VENV itself is never written to
#   --no-table            do not rewrite docs/compatibility.md (results still go to the results file)
#   --table-only          run nothing: rewrite docs/compatibility.md from the results file
#
# Environment:
#   XKERNELS_CHECK_DIR     venvs, build trees, logs and results.tsv (default ~/.cache/xkernels/torch-check)
#   XKERNELS_TORCH_WHEELS  torch wheel cache shared by all runs (default ~/.cache/xkernels/torch-wheels):
#                          `pip download` fills it once, later runs install from it
#   XKERNELS_CHECK_PIP_CONSTRAINT  constraint file for this script's pip calls (default /dev/null: the
#                          versions checked are explicit pins, a site-wide cap on torch would block them)
#   PYTHON3_X              interpreter for Python 3.X (default: pyenv's 3.X, else python3.X on PATH)
#
# Every combination gets its own venv ($XKERNELS_CHECK_DIR/venv-torch<T>-py<P>), a copy of the Python
# package with the extension built into it (pkg/), and its own kernel cache. Builds use XKERNELS_ACPP=off and
# XKERNELS_CUDA=off (the check is of the torch C++ API and the CPU backends: reference and SYCL; the SYCL CPU
# device is required, so a missing one fails instead of skipping). torch wheels other than the local CPU
# build are PyPI's CUDA builds; they run on the CPU here.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

DEFAULT_COMBOS="2.11.0:3.12 2.13.0:3.10 2.13.0:3.11 2.13.0:3.12 2.15.0:3.12 2.15.0:3.13"
DEFAULT_TEST_CMD='python -m pytest -m "not slow" -x -q -p no:cacheprovider'
# The runtime pins of requirements.txt (SYCL runtime wheels) and what building and testing need (matplotlib
# included: the parity CLI's --plot is tested).
DEPS=$(grep -vE '^\s*(#|$)|^torch|^ruff|^clang-format' requirements.txt | sed 's/\s*#.*//')

CHECK_DIR=${XKERNELS_CHECK_DIR:-$HOME/.cache/xkernels/torch-check}
WHEELS=${XKERNELS_TORCH_WHEELS:-$HOME/.cache/xkernels/torch-wheels}
export PIP_CONSTRAINT=${XKERNELS_CHECK_PIP_CONSTRAINT:-/dev/null}
export PIP_DISABLE_PIP_VERSION_CHECK=1
TEST_CMD=$DEFAULT_TEST_CMD
TABLE=1
COMBOS=()
declare -A REUSE=()
while [ $# -gt 0 ]; do
  case "$1" in
    --test-cmd) TEST_CMD=$2; shift 2 ;;
    --reuse) REUSE[${2%%=*}]=${2#*=}; shift 2 ;;
    --no-table) TABLE=0; shift ;;
    --table-only) TABLE=only; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check_torch_versions.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) COMBOS+=("$1"); shift ;;
  esac
done
[ ${#COMBOS[@]} -gt 0 ] || read -r -a COMBOS <<<"$DEFAULT_COMBOS"
mkdir -p "$CHECK_DIR" "$WHEELS"
RESULTS=$CHECK_DIR/results.tsv
COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- csrc python CMakeLists.txt cmake setup.py || echo "+dirty")

interpreter() {  # interpreter for Python $1 (3.X)
  local var="PYTHON${1/./_}"
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  if command -v pyenv >/dev/null; then
    local v
    v=$(pyenv versions --bare | grep -E "^${1//./\\.}\.[0-9]+$" | sort -V | tail -n 1)
    if [ -n "$v" ]; then echo "$(pyenv root)/versions/$v/bin/python"; return; fi
  fi
  command -v "python$1" || true
}

record() {  # torch python built tests seconds log
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(date -u +%F)" "$COMMIT" "$TEST_CMD" "$5" \
    "$6" >>"$RESULTS"
  echo "=== torch $1 / Python $2: build $3, tests $4 (${5}s; log $6)"
}

check_one() {
  local torch_v=${1%%:*} py=${1#*:}
  local name="torch${torch_v}-py${py}" t0
  t0=$(date +%s)
  local work=$CHECK_DIR/$name log=$CHECK_DIR/$name.log
  mkdir -p "$work"
  : >"$log"
  echo "=== torch $torch_v / Python $py: $work (log $log)"
  local base
  base=$(interpreter "$py")
  if [ -z "$base" ]; then
    echo "no Python $py interpreter" | tee -a "$log"
    record "$torch_v" "$py" "no Python $py" "-" 0 "$log"
    return
  fi
  local venv=$work/venv
  (
    set -e
    [ -x "$venv/bin/python" ] || "$base" -m venv "$venv"
    # shellcheck disable=SC1091
    . "$venv/bin/activate"
    if [ -n "${REUSE[$1]:-}" ]; then
      local site
      site=$("${REUSE[$1]}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      echo "$site" >"$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_reused_torch.pth"
    elif ! python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_v')" 2>/dev/null; then
      # The wheel and its dependencies into the cache (files already there are not fetched again), then
      # installed from it. The local CPU wheel (find-links) is preferred where one exists.
      pip download -q "torch==$torch_v" --find-links "$WHEELS" -d "$WHEELS"
      pip install -q --find-links "$WHEELS" "torch==$torch_v"
    fi
    # shellcheck disable=SC2086
    pip install -q $DEPS
    # The build tools as programs of this venv: with a reused venv pip finds them installed there and puts
    # nothing in our bin/, and the system's CMake would run instead (CMake 3.25 has no flags for torch's
    # CMAKE_CUDA_STANDARD=20 with nvcc 13, which a CUDA build of torch turns on even with XKERNELS_CUDA=off).
    [ -x "$venv/bin/cmake" ] || pip install -q --ignore-installed "cmake>=3.28" ninja
    python -c "import torch; assert torch.__version__.split('+')[0] == '$torch_v', torch.__version__; \
print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  ) >>"$log" 2>&1 || { record "$torch_v" "$py" "no (install failed)" "-" $(($(date +%s) - t0)) "$log"; return; }

  # A build tree whose configure never completed keeps what it failed to find: start it afresh.
  [ -f "$work/build/build.ninja" ] || rm -rf "$work/build"
  # So does one configured from another checkout (CMake refuses a cache made for another source directory).
  if [ -f "$work/build/CMakeCache.txt" ] &&
    ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$PWD" "$work/build/CMakeCache.txt"; then
    rm -rf "$work/build"
  fi
  # A copy of the Python package with the extension built into it, so that the checkout stays untouched.
  rm -rf "$work/pkg" && mkdir -p "$work/pkg"
  cp -r python/xkernels "$work/pkg/" && find "$work/pkg" \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
  if ! (
    # shellcheck disable=SC1091
    . "$venv/bin/activate"
    # A CUDA build of torch needs the CUDA toolkit at configure time even with xkernels' CUDA backend off: its
    # CMake config (Caffe2/public/cuda.cmake) fails without it. FindCUDA derives the toolkit from nvcc's
    # directory, which is wrong where nvcc is linked into /usr/local/bin: name the toolkit.
    cuda_root=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
    if [ -n "$(python -c 'import torch; print(torch.version.cuda or "")')" ] && [ -d "$cuda_root/include" ]; then
      export CMAKE_ARGS="${CMAKE_ARGS:-} -DCUDA_TOOLKIT_ROOT_DIR=$cuda_root"
      # torch's CMake config also wants libnvrtc; a toolkit without it: the one torch's nvidia wheels carry.
      if ! ls "$cuda_root"/lib64/libnvrtc.so* >/dev/null 2>&1; then
        nvrtc=$(python -c "import glob, sys
c = [p for d in sys.path for p in sorted(glob.glob(d + '/nvidia/**/lib/libnvrtc.so*', recursive=True))
     if '.alt.' not in p and 'builtins' not in p]
print(c[0] if c else '')")
        [ -z "$nvrtc" ] || export CMAKE_ARGS="$CMAKE_ARGS -DCUDA_nvrtc_LIBRARY=$nvrtc"
      fi
    fi
    XKERNELS_ACPP=off XKERNELS_CUDA=off XKERNELS_SYCL=on XKERNELS_OUTPUT_DIR="$work/pkg/xkernels" \
      PYTHON=python scripts/dev_build.sh "$work/build"
  ) >>"$log" 2>&1; then
    record "$torch_v" "$py" "no (build failed)" "-" $(($(date +%s) - t0)) "$log"
    return
  fi
  local status=passed
  # shellcheck disable=SC1091
  (
    . "$venv/bin/activate"
    export PYTHONPATH="$work/pkg" XKERNELS_CACHE_DIR="$work/kcache" XKERNELS_REQUIRE_BACKENDS=sycl
    python -c 'import xkernels; print("xkernels from", xkernels.__file__)'
    eval "$TEST_CMD"
  ) >>"$log" 2>&1 || status=FAILED
  tail -n 3 "$log"
  record "$torch_v" "$py" yes "$status" $(($(date +%s) - t0)) "$log"
}

if [ "$TABLE" != only ]; then
  for combo in "${COMBOS[@]}"; do
    check_one "$combo"
  done
fi

[ "$TABLE" != 0 ] || exit 0
# docs/compatibility.md from the latest result of every combination ever recorded in results.tsv.
python3 - "$RESULTS" "$ROOT/docs/compatibility.md" <<'PY'
import sys

rows = {}
for line in open(sys.argv[1], encoding="utf-8"):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 8:
        rows[(f[0], f[1])] = f  # later lines win


def key(v):
    return tuple(int(p) for p in v.split("."))


BEGIN, END = "<!-- table: begin (scripts/check_torch_versions.sh) -->", "<!-- table: end -->"
table = [
    BEGIN,
    "| torch | Python | built | tests | date | commit | test command |",
    "|---|---|---|---|---|---|---|",
]
for (t, p), f in sorted(rows.items(), key=lambda kv: (key(kv[0][0]), key(kv[0][1]))):
    cmd = f[6].replace("|", "\\|")
    table.append(f"| {t} | {p} | {f[2]} | {f[3]} | {f[4]} | {f[5]} | `{cmd}` |")
table.append(END)
try:
    doc = open(sys.argv[2], encoding="utf-8").read()
except FileNotFoundError:
    doc = "# Compatibility: torch x Python\n\n" + BEGIN + "\n" + END + "\n"
if BEGIN not in doc or END not in doc:
    sys.exit(f"{sys.argv[2]}: the table markers are missing; not rewritten")
head, rest = doc.split(BEGIN, 1)
tail = rest.split(END, 1)[1]
open(sys.argv[2], "w", encoding="utf-8").write(head + "\n".join(table) + tail)
print("wrote", sys.argv[2])
PY
