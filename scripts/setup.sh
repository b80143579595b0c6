#!/usr/bin/env bash
# Create labkit's virtual environment and install everything into it. Safe to re-run.
#
#   bash scripts/setup.sh             create/update .venv (or $LABKIT_VENV)
#   bash scripts/setup.sh --dry-run   print what would be done, change nothing
#
# Choice of torch (the large part), first match wins:
#   LABKIT_TORCH_SPEC=...      install exactly this requirement into the venv
#   python3 ($LABKIT_PYTHON) imports torch >= 2.4, a CUDA build, or any build on a machine
#   without an NVIDIA GPU      reuse it, whether python3 is a system python, a virtualenv or a
#                              conda env: the venv gets labkit-reuse-torch.pth listing the
#                              folders python3 imports packages from; setup checks that the venv
#                              imports that very torch before installing anything, and never
#                              installs a second one; the Jupyter data files (templates,
#                              extensions) of those environments are linked into the venv's
#                              share/jupyter. LABKIT_REUSE_TORCH=0: never reuse;
#                              LABKIT_REUSE_TORCH=1: reuse a CPU-only torch on a GPU machine too
#   an NVIDIA GPU is present   pip install "torch>=2.4" (a CUDA build)
#   otherwise (CPU machine)    the highest "+cpu" build >= 2.4 that pip can see, so that a
#                              multi-GB CUDA build is not downloaded for nothing
# Offline: if a wheelhouse folder .whl/ exists (or LABKIT_WHEELHOUSE names one), everything is
# installed from it with --no-index.
# Other knobs: LABKIT_PYTHON (interpreter, default python3), LABKIT_EXTRAS (default: dev, plus
# images when kaleido can be installed and kernels when triton can).
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
  -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}"; exit 0 ;;
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
# Does this interpreter import any torch >= TORCH_MIN?
has_torch() {
  "$1" -E - "$TORCH_MIN" >/dev/null 2>&1 <<'PY'
import re, sys
import torch
nums = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])
sys.exit(0 if nums >= tuple(int(x) for x in sys.argv[1].split(".")) else 1)
PY
}

# What kind of environment is $PYTHON, where does it import packages from, and which torch does
# it import? Prints key=value lines; dir= lines are its sys.path folders outside the standard
# library, in order (site-packages and whatever .pth files there add).
probe_python() {
  "$PYTHON" -E - "$TORCH_MIN" 2>/dev/null <<'PY'
import ast, os, re, subprocess, sys
if sys.prefix != getattr(sys, "base_prefix", sys.prefix) or hasattr(sys, "real_prefix"):
    kind = "virtualenv"
elif os.path.isdir(os.path.join(sys.prefix, "conda-meta")):
    kind = "conda"
else:
    kind = "system"
print(f"kind={kind}")
print(f"prefix={os.path.realpath(sys.prefix)}")
print(f"pyver={sys.version_info[0]}.{sys.version_info[1]}")
# the folders that the site module adds: sys.path minus what the interpreter has without it
bare = subprocess.run([sys.executable, "-E", "-S", "-c", "import sys; print(repr(sys.path))"],
                      capture_output=True, text=True, check=True).stdout
stdlib = {os.path.realpath(p) for p in ast.literal_eval(bare) if p}
seen = set()
for entry in sys.path:
    if not entry or not os.path.isdir(entry):
        continue
    real = os.path.realpath(entry)
    if real not in stdlib and real not in seen:
        seen.add(real)
        print(f"dir={real}")
sys.stdout.flush()
try:
    import torch
except Exception:
    sys.exit(0)
need = tuple(int(x) for x in sys.argv[1].split("."))
nums = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])
print(f"torch_version={torch.__version__}")
print(f"torch_cuda={torch.version.cuda or ''}")
print(f"torch_file={os.path.realpath(torch.__file__)}")
print(f"torch_ok={int(nums >= need)}")
try:
    from importlib.metadata import version
    print(f"torch_dist={version('torch')}")
except Exception:
    pass
PY
}

PY_KIND=system; PY_PREFIX=""; PY_VER=""; PY_DIRS=()
TORCH_VERSION=""; TORCH_CUDA=""; TORCH_FILE=""; TORCH_OK=0; TORCH_DIST=""
while IFS= read -r line; do
  case "$line" in
    kind=*) PY_KIND="${line#*=}" ;;
    prefix=*) PY_PREFIX="${line#*=}" ;;
    pyver=*) PY_VER="${line#*=}" ;;
    dir=*) PY_DIRS+=("${line#*=}") ;;
    torch_version=*) TORCH_VERSION="${line#*=}" ;;
    torch_cuda=*) TORCH_CUDA="${line#*=}" ;;
    torch_file=*) TORCH_FILE="${line#*=}" ;;
    torch_ok=*) TORCH_OK="${line#*=}" ;;
    torch_dist=*) TORCH_DIST="${line#*=}" ;;
  esac
done < <(probe_python || true)
TORCH_DIR="$(dirname "$TORCH_FILE")"
if [[ -n "$TORCH_CUDA" ]]; then TORCH_BUILD="CUDA $TORCH_CUDA build"; else TORCH_BUILD="CPU-only build"; fi
case "$PY_KIND" in
  virtualenv) PY_WHAT="$PYTHON (a virtualenv at $PY_PREFIX)" ;;
  conda) PY_WHAT="$PYTHON (a conda env at $PY_PREFIX)" ;;
  *) PY_WHAT="$PYTHON (not a virtualenv: $PY_PREFIX)" ;;
esac

GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU=1; fi

REUSE="${LABKIT_REUSE_TORCH:-}"
case "$REUSE" in
  ""|0|1) ;;
  *) die "LABKIT_REUSE_TORCH=$REUSE is not understood: use 1 (reuse the torch that $PYTHON has, even a CPU-only one on a GPU machine), 0 (never reuse it) or leave it unset (reuse it when it suits this machine)" ;;
esac

NOT_REUSED=""  # why $PYTHON's torch is not reused, for the log
if [[ -n "${LABKIT_TORCH_SPEC:-}" ]]; then
  TORCH_MODE=spec
elif [[ -n "$TORCH_VERSION" && "$TORCH_OK" != 1 ]]; then
  NOT_REUSED="$PY_WHAT has torch $TORCH_VERSION, older than $TORCH_MIN: not reused"
elif [[ -n "$TORCH_VERSION" && "$REUSE" == 0 ]]; then
  NOT_REUSED="$PY_WHAT has torch $TORCH_VERSION: not reused (LABKIT_REUSE_TORCH=0)"
elif [[ -n "$TORCH_VERSION" && -z "$TORCH_CUDA" && "$GPU" == 1 && "$REUSE" != 1 ]]; then
  NOT_REUSED="$PY_WHAT has torch $TORCH_VERSION, a CPU-only build: not reused on this GPU machine (LABKIT_REUSE_TORCH=1 reuses it anyway)"
elif [[ -n "$TORCH_VERSION" ]]; then
  TORCH_MODE=reuse
fi
if [[ -z "${TORCH_MODE:-}" ]]; then
  if (( GPU )); then TORCH_MODE=gpu; else TORCH_MODE=cpu; fi
fi

# How the venv gets its torch in reuse mode:
#   self  the venv is $PYTHON's own environment (e.g. LABKIT_VENV names it): nothing to do
#   own   the venv already has a torch of its own: kept, $PYTHON's torch is not used
#   link  the venv gets labkit-reuse-torch.pth listing $PYTHON's package folders
PTH_NAME="labkit-reuse-torch.pth"
if [[ -d "$VENV" ]]; then
  real_venv="$(cd "$VENV" && pwd -P)"
else
  real_venv="$(cd "$(dirname "$VENV")" 2>/dev/null && pwd -P || true)/$(basename "$VENV")"
fi
# Where the venv's own torch is (found without importing it), if it has one.
VENV_OWN_TORCH=""
if [[ -x "$VPY" ]]; then
  VENV_OWN_TORCH="$("$VPY" -E -c 'import importlib.util as u, os, sys
s = u.find_spec("torch")
origin = os.path.abspath(s.origin) if s and s.origin else ""
print(origin if origin.startswith(os.path.abspath(sys.prefix) + os.sep) else "")' 2>/dev/null || true)"
fi
LINK=""
if [[ "$TORCH_MODE" == reuse ]]; then
  if [[ "$real_venv" == "$PY_PREFIX" ]]; then
    LINK=self
  elif [[ -n "$VENV_OWN_TORCH" ]]; then
    LINK=own
  else
    LINK=link
  fi
fi

describe_mode() {
  case "$TORCH_MODE" in
    spec) echo "install LABKIT_TORCH_SPEC=$LABKIT_TORCH_SPEC" ;;
    reuse)
      case "$LINK" in
        self) echo "use torch $TORCH_VERSION ($TORCH_BUILD, $TORCH_DIR) that $VENV itself holds: labkit is installed into $PY_WHAT" ;;
        own) echo "keep the torch that $VENV already has ($(dirname "$VENV_OWN_TORCH")); $PY_WHAT has torch $TORCH_VERSION too, but $VENV does not use it (delete $VENV and re-run to use it)" ;;
        link) echo "reuse torch $TORCH_VERSION ($TORCH_BUILD, $TORCH_DIR) that $PY_WHAT already has: $VENV gets $PTH_NAME listing that python's ${#PY_DIRS[@]} package folder(s), so it imports that torch; no torch is installed" ;;
      esac ;;
    gpu) echo "NVIDIA GPU found: install torch>=$TORCH_MIN (CUDA build)" ;;
    cpu) echo "no NVIDIA GPU: install a CPU build of torch>=$TORCH_MIN" ;;
  esac
}

log "python: $("$PYTHON" -V 2>&1) ($(command -v "$PYTHON")), a $PY_KIND python"
log "venv: $VENV"
if [[ -n "$WHEELHOUSE" ]]; then
  log "packages: offline, from the wheelhouse $WHEELHOUSE"
else
  log "packages: from the package index"
fi
[[ -n "$NOT_REUSED" ]] && log "torch: $NOT_REUSED"
log "torch: $(describe_mode)"

if (( DRY_RUN )); then
  log "dry run: nothing changed"
  exit 0
fi

# ---------------------------------------------------------------- venv
STAMP="$VENV/.labkit-setup-done"
if [[ -x "$VPY" ]]; then
  log "reusing the existing $VENV"
else
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV" \
    || die "'$PYTHON -m venv' failed (on Debian/Ubuntu: apt install python3-venv)"
fi
VENV_SITE="$("$VPY" -E -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
PTH="$VENV_SITE/$PTH_NAME"
CONSTRAINT="$VENV/labkit-torch-constraint.txt"
PIP_TORCH_ARGS=()

# ---------------------------------------------------------------- torch: install
t0=$SECONDS
if [[ "$LINK" != link && "$LINK" != self && -f "$PTH" ]]; then
  # an earlier setup reused another python's torch; from now on this venv installs its own
  log "removing $PTH_NAME from $VENV: it no longer reuses another python's torch"
  rm -f "$PTH" "$CONSTRAINT" "$STAMP"
fi
case "$TORCH_MODE" in
  spec)
    pip_install "$LABKIT_TORCH_SPEC"
    ;;
  reuse)
    if [[ "$LINK" == link ]]; then
      venv_ver="$("$VPY" -E -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
      [[ "$venv_ver" == "$PY_VER" ]] \
        || die "$VENV runs Python $venv_ver but $PYTHON is Python $PY_VER, so $VENV cannot use its torch: delete $VENV and re-run"
      pth_text="# Written by labkit's scripts/setup.sh: the package folders of $PYTHON ($PY_PREFIX),
# so that this venv imports its torch $TORCH_VERSION. Packages installed into this venv come first.
$(printf '%s\n' ${PY_DIRS[@]+"${PY_DIRS[@]}"})"
      if [[ ! -f "$PTH" || "$(cat "$PTH")" != "$pth_text" ]]; then
        printf '%s\n' "$pth_text" > "$PTH"
        rm -f "$STAMP"  # what pip can see changed: let the package step run again
      fi
      seen="$("$VPY" -E -c 'import os, torch; print(os.path.realpath(torch.__file__))' 2>&1 | tail -n 1 || true)"
      if [[ "$seen" != "$TORCH_FILE" ]]; then
        die "$VENV does not import the torch of $PY_WHAT ($TORCH_FILE) through $PTH_NAME; it got: $seen. No package was installed. Either install labkit into that environment itself (make run VENV=$PY_PREFIX), or let $VENV get its own torch (LABKIT_REUSE_TORCH=0; a download of several GB on a GPU machine)"
      fi
      [[ -n "$TORCH_DIST" ]] \
        || die "the torch of $PY_WHAT ($TORCH_DIR) has no package metadata (no torch-*.dist-info), so pip would not count it and would install a second torch to meet labkit's requirement torch>=$TORCH_MIN. No package was installed. Reinstall torch there with pip (which writes the metadata), or install labkit into that environment without dependencies ($PYTHON -m pip install --no-deps -e .) and add the other requirements of requirements.txt yourself"
      # pip may keep the reused torch but never replace it
      printf 'torch==%s\n' "$TORCH_DIST" > "$CONSTRAINT"
      PIP_TORCH_ARGS=(--constraint "$CONSTRAINT")
      log "checked: $VENV imports torch $TORCH_VERSION from $TORCH_DIR"
    elif [[ "$LINK" == own ]]; then
      log "torch already installed in $VENV: keeping it"
    fi
    ;;
  gpu)
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
# Can this interpreter build labkit's editable install with no index? setuptools >= 70.1 can
# alone; older ones need the wheel package.
can_build_editable() {
  "$1" -E - >/dev/null 2>&1 <<'PY'
import importlib.util, re, sys
import setuptools
version = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
sys.exit(0 if version >= (70, 1) or importlib.util.find_spec("wheel") else 1)
PY
}
t0=$SECONDS
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
  # the Triton step's tests (its marker skips it off Linux x86-64; torch's CUDA builds bring it)
  if [[ -z "$WHEELHOUSE" ]] || compgen -G "$WHEELHOUSE/triton-*" >/dev/null \
     || "$PYTHON" -c 'import triton' 2>/dev/null; then
    LABKIT_EXTRAS="$LABKIT_EXTRAS,kernels"
  fi
fi
target=".[${LABKIT_EXTRAS:-}]"
[[ -z "${LABKIT_EXTRAS:-}" ]] && target="."
if (( SKIP_PACKAGES )); then
  :
elif [[ -n "$WHEELHOUSE" ]]; then
  # Without an index, the editable build cannot fetch setuptools into an isolated build env:
  # build with the venv's own (or the reused environment's) setuptools instead.
  if ! can_build_editable "$VPY"; then
    own="$("$VPY" -E -c 'import os, setuptools; print(os.path.realpath(setuptools.__file__))' 2>/dev/null || true)"
    if [[ "$LINK" == link && "$own" == "$real_venv"/* ]] && can_build_editable "$PYTHON"; then
      # e.g. the setuptools 65 that Python 3.11's venv bundles: it hides the newer one
      log "the setuptools bundled into $VENV cannot build labkit without the wheel package: removing it, so that the newer one of $PY_WHAT is used"
      "$VPY" -m pip uninstall -y -q setuptools
    else
      pip_install "setuptools>=70.1"
    fi
  fi
  log "installing labkit $target and its dependencies from the wheelhouse"
  pip_install --no-build-isolation "${PIP_TORCH_ARGS[@]+"${PIP_TORCH_ARGS[@]}"}" -e "$target"
else
  log "installing labkit $target and its dependencies (LABKIT_SETUP_VERBOSE=1 shows pip's output)"
  pip_install "${PIP_TORCH_ARGS[@]+"${PIP_TORCH_ARGS[@]}"}" -e "$target"
fi
log "package step: $((SECONDS - t0)) s"

# ---------------------------------------------------------------- Jupyter data files
# A package this venv sees through $PTH_NAME, and so did not install (nbconvert, jupyterlab,
# the widget and plotly extensions), keeps its data files under the share/jupyter of the
# environment that installed it, which this venv's Jupyter does not search: without them
# nbconvert has no templates (no slides, no run pages). Link each folder the venv lacks, one
# level deep (nbconvert, lab, labextensions/<name>, ...); never kernels: this venv's own
# python runs its notebooks.
link_jupyter_data() {
  local from="$1" to="$2" depth="$3" entry name
  for entry in "$from"/*; do
    [[ -e "$entry" ]] || continue
    name="$(basename "$entry")"
    [[ "$name" == kernels ]] && continue
    if [[ ! -e "$to/$name" ]]; then
      mkdir -p "$to"
      ln -s "$entry" "$to/$name"
    elif (( depth > 0 )) && [[ -d "$entry" && -d "$to/$name" && ! -L "$to/$name" ]]; then
      link_jupyter_data "$entry" "$to/$name" $((depth - 1))
    fi
  done
}
if [[ "$LINK" == link ]]; then
  for dir in ${PY_DIRS[@]+"${PY_DIRS[@]}"}; do
    [[ "$dir" == */lib/python*/site-packages ]] || continue
    prefix="${dir%/lib/python*/site-packages}"
    case "$prefix" in /usr|/usr/local) continue ;; esac  # Jupyter searches these already
    if [[ -d "$prefix/share/jupyter" && "$prefix" != "$real_venv" ]]; then
      link_jupyter_data "$prefix/share/jupyter" "$VENV/share/jupyter" 1
      log "Jupyter data files of $prefix (templates, extensions) linked into $VENV/share/jupyter"
    fi
  done
fi

# ---------------------------------------------------------------- report
report="$("$VPY" -I - <<'PY'
import os, labkit, torch
cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
gpu = "GPU visible" if torch.cuda.is_available() else "no GPU visible"
print(f"[setup] labkit {labkit.__version__}, torch {torch.__version__} ({cuda}, {gpu})")
print(os.path.realpath(torch.__file__))
PY
)" || die "$VENV cannot import labkit and torch after setup"
printf '%s\n' "$report" | sed '$d'
used="$(printf '%s\n' "$report" | tail -n 1)"
if [[ "$LINK" == link && "$used" != "$TORCH_FILE" ]]; then
  die "$VENV now imports torch from $(dirname "$used"), not the torch of $PY_WHAT ($TORCH_DIR)"
elif [[ "$used" == "$real_venv"/* ]]; then
  log "torch used by $VENV: $(dirname "$used") (installed in $VENV)"
elif [[ "$LINK" == link ]]; then
  log "torch used by $VENV: $(dirname "$used") (the torch of $PY_WHAT, seen through $PTH_NAME)"
else
  log "torch used by $VENV: $(dirname "$used")"
fi
date -u +%Y-%m-%dT%H:%M:%SZ > "$STAMP"
log "done in $((SECONDS - start)) s"
log "ready: $VENV (activate with: source $VENV/bin/activate)"
