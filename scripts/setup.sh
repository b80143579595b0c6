#!/usr/bin/env bash
# Create labkit's virtual environment and install everything into it. Safe to re-run.
#
#   bash scripts/setup.sh             create/update .venv (or $LABKIT_VENV)
#   bash scripts/setup.sh --dry-run   print what would be done, change nothing
#
# Choice of torch (the large part):
#   LABKIT_TORCH_SPEC=...      install exactly this requirement (overrides everything below)
#   base python3 has a CUDA torch >= 2.4
#                              the venv sees it (--system-site-packages); torch is not installed
#   an NVIDIA GPU is present   pip install "torch>=2.4" (a CUDA build)
#   otherwise (CPU machine)    the highest "+cpu" build >= 2.4 that pip can see, so that a
#                              multi-GB CUDA build is not downloaded for nothing
# Offline: if a wheelhouse folder .whl/ exists (or LABKIT_WHEELHOUSE names one), everything is
# installed from it with --no-index.
# Other knobs: LABKIT_PYTHON (interpreter, default python3), LABKIT_EXTRAS (default: dev, plus
# images when kaleido can be installed).
#
# Helper used by the tests: `bash scripts/setup.sh --pick-cpu-torch < text` reads the output of
# `pip index versions torch` and prints the version it would install on a CPU machine.
set -euo pipefail

TORCH_MIN="2.4"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${LABKIT_PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[setup] %s\n' "$*"; }
warn() { printf '[setup] WARNING: %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# Prints the highest "X.Y.Z+cpu" version >= TORCH_MIN found in `pip index versions` output.
pick_cpu_torch() {
  "$PYTHON" -c '
import re, sys
minimum = tuple(int(x) for x in sys.argv[1].split("."))
best = None
for line in sys.stdin.read().splitlines():
    head, sep, tail = line.partition(":")
    if not sep or head.strip().lower() != "available versions":
        continue
    for item in tail.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?\+cpu", item)
        if not m:
            continue
        key = tuple(int(x or 0) for x in m.groups())
        if key >= minimum + (0,) * (3 - len(minimum)) and (best is None or key > best[0]):
            best = (key, item)
if best:
    print(best[1])
' "$TORCH_MIN"
}

DRY_RUN=0
case "${1:-}" in
  --pick-cpu-torch) pick_cpu_torch; exit 0 ;;
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac

start=$SECONDS
cd "$ROOT"

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: install Python >= 3.10"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); labkit needs Python >= 3.10 (set LABKIT_PYTHON)"

VENV="${LABKIT_VENV:-.venv}"
VPY="$VENV/bin/python"

# ---------------------------------------------------------------- wheelhouse (offline mode)
WHEELHOUSE="${LABKIT_WHEELHOUSE:-}"
if [[ -z "$WHEELHOUSE" && -d "$ROOT/.whl" ]]; then
  WHEELHOUSE="$ROOT/.whl"
fi
OFFLINE=()
if [[ -n "$WHEELHOUSE" ]]; then
  [[ -d "$WHEELHOUSE" ]] || die "wheelhouse $WHEELHOUSE does not exist"
  WHEELHOUSE="$(cd "$WHEELHOUSE" && pwd)"
  OFFLINE=(--no-index --find-links "$WHEELHOUSE")
fi
# "${OFFLINE[@]+...}" keeps `set -u` happy with an empty array on old bash versions.
QUIET=(-q)
[[ -n "${LABKIT_SETUP_VERBOSE:-}" ]] && QUIET=()
pip_install() {
  "$VPY" -m pip install --progress-bar off "${QUIET[@]+"${QUIET[@]}"}" \
    "${OFFLINE[@]+"${OFFLINE[@]}"}" "$@"
}

# ---------------------------------------------------------------- torch: decide
# Does this interpreter import a CUDA build of torch >= TORCH_MIN?
has_cuda_torch() {
  "$1" - "$TORCH_MIN" >/dev/null 2>&1 <<'PY'
import re, sys
import torch
nums = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])
need = tuple(int(x) for x in sys.argv[1].split("."))
sys.exit(0 if torch.version.cuda and nums >= need else 1)
PY
}
# Does this interpreter import any torch >= TORCH_MIN?
has_torch() {
  "$1" - "$TORCH_MIN" >/dev/null 2>&1 <<'PY'
import re, sys
import torch
nums = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])
sys.exit(0 if nums >= tuple(int(x) for x in sys.argv[1].split(".")) else 1)
PY
}

if [[ -n "${LABKIT_TORCH_SPEC:-}" ]]; then
  TORCH_MODE=spec
elif has_cuda_torch "$PYTHON"; then
  TORCH_MODE=system
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  TORCH_MODE=gpu
else
  TORCH_MODE=cpu
fi

describe_mode() {
  case "$TORCH_MODE" in
    spec) echo "install LABKIT_TORCH_SPEC=$LABKIT_TORCH_SPEC" ;;
    system) echo "reuse the CUDA build of torch that $PYTHON already has (venv with system site-packages)" ;;
    gpu) echo "NVIDIA GPU found: install torch>=$TORCH_MIN (CUDA build)" ;;
    cpu) echo "no NVIDIA GPU: install a CPU build of torch>=$TORCH_MIN" ;;
  esac
}

log "python: $("$PYTHON" -V 2>&1) ($(command -v "$PYTHON"))"
log "venv: $VENV"
if [[ -n "$WHEELHOUSE" ]]; then
  log "packages: offline, from the wheelhouse $WHEELHOUSE"
else
  log "packages: from the package index"
fi
log "torch: $(describe_mode)"

if (( DRY_RUN )); then
  log "dry run: nothing changed"
  exit 0
fi

# ---------------------------------------------------------------- venv
if [[ -x "$VPY" ]]; then
  log "reusing the existing $VENV"
  if [[ "$TORCH_MODE" == system ]] && ! grep -qi '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg" 2>/dev/null; then
    warn "$VENV was created without --system-site-packages, so it cannot see the system's torch;"
    warn "torch will be installed into it instead (delete $VENV and re-run to reuse the system's torch)"
  fi
else
  venv_args=()
  [[ "$TORCH_MODE" == system ]] && venv_args+=(--system-site-packages)
  log "creating $VENV"
  "$PYTHON" -m venv "${venv_args[@]+"${venv_args[@]}"}" "$VENV" \
    || die "'$PYTHON -m venv' failed (on Debian/Ubuntu: apt install python3-venv)"
fi

# ---------------------------------------------------------------- torch: install
t0=$SECONDS
case "$TORCH_MODE" in
  spec)
    pip_install "$LABKIT_TORCH_SPEC"
    ;;
  system|gpu)
    if has_torch "$VPY"; then
      log "torch already importable in $VENV: keeping it"
    else
      pip_install "torch>=$TORCH_MIN"
    fi
    ;;
  cpu)
    if has_torch "$VPY"; then
      log "torch already importable in $VENV: keeping it"
    elif [[ -n "$WHEELHOUSE" ]]; then
      pip_install "torch>=$TORCH_MIN"
    else
      listing="$("$VPY" -m pip index versions torch --timeout 20 --retries 1 2>/dev/null || true)"
      cpu_version="$(printf '%s\n' "$listing" | pick_cpu_torch)"
      if [[ -n "$cpu_version" ]]; then
        log "installing the CPU build torch==$cpu_version"
        pip_install "torch==$cpu_version"
      else
        warn "no CPU build of torch (a '+cpu' version) is visible to pip."
        warn "Installing the default torch>=$TORCH_MIN: a large (several GB) CUDA build that also runs on CPU."
        warn "For the small CPU build instead: delete $VENV, point the environment variable"
        warn "PIP_EXTRA_INDEX_URL at PyTorch's CPU wheel index (see the install selector on the"
        warn "PyTorch website: Linux, Pip, CPU), and re-run this script; or set LABKIT_TORCH_SPEC."
        pip_install "torch>=$TORCH_MIN"
      fi
    fi
    ;;
esac
log "torch step: $((SECONDS - t0)) s"

# ---------------------------------------------------------------- labkit + the rest
t0=$SECONDS
STAMP="$VENV/.labkit-setup-done"
if [[ -f "$STAMP" && "$STAMP" -nt pyproject.toml && "$STAMP" -nt scripts/setup.sh ]] \
   && [[ -z "${LABKIT_TORCH_SPEC:-}${LABKIT_EXTRAS+x}" ]] \
   && "$VPY" -I -c 'import labkit, sys; sys.exit(0 if labkit.__file__.startswith(sys.argv[1]) else 1)' "$ROOT/labkit/" 2>/dev/null; then
  log "labkit already installed and pyproject.toml unchanged since the last setup: skipping pip"
  SKIP_PACKAGES=1
else
  SKIP_PACKAGES=0
fi
if (( SKIP_PACKAGES )); then
  :
elif [[ -z "${LABKIT_EXTRAS+x}" ]]; then
  LABKIT_EXTRAS=dev
  if [[ -z "$WHEELHOUSE" ]] || compgen -G "$WHEELHOUSE/kaleido-*" >/dev/null; then
    LABKIT_EXTRAS=dev,images
  fi
fi
target=".[${LABKIT_EXTRAS:-}]"
[[ -z "${LABKIT_EXTRAS:-}" ]] && target="."
if (( SKIP_PACKAGES )); then
  :
elif [[ -n "$WHEELHOUSE" ]]; then
  # Without an index, the editable build cannot fetch setuptools into an isolated build env:
  # build with the venv's own (or the system's) setuptools instead.
  if ! "$VPY" -c 'import setuptools' >/dev/null 2>&1; then
    pip_install "setuptools>=64"
  fi
  log "installing labkit $target and its dependencies from the wheelhouse"
  pip_install --no-build-isolation -e "$target"
else
  log "installing labkit $target and its dependencies (LABKIT_SETUP_VERBOSE=1 shows pip's output)"
  pip_install -e "$target"
fi
log "package step: $((SECONDS - t0)) s"

# ---------------------------------------------------------------- report
"$VPY" -I - <<'PY'
import labkit, torch
cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
gpu = "GPU visible" if torch.cuda.is_available() else "no GPU visible"
print(f"[setup] labkit {labkit.__version__}, torch {torch.__version__} ({cuda}, {gpu})")
PY
date -u +%Y-%m-%dT%H:%M:%SZ > "$STAMP"
log "done in $((SECONDS - start)) s"
log "ready: $VENV (activate with: source $VENV/bin/activate)"
