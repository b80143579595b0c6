#!/usr/bin/env bash
# Fetch the JavaScript/CSS that offline slide DECKS need (`labkit slides` runs this when they
# are missing): reveal.js, and MathJax for pages whose markdown holds TeX. Run pages
# (`labkit run`) need none of it: their plotly.js comes from the plotly wheel and widgets are
# drawn from their saved state. Safe to re-run: packages already present at the pinned
# version are kept, so a second run needs no network.
#
#   bash scripts/fetch_web_assets.sh [DEST]     DEST defaults to $LABKIT_WEB_DIR or build/web
#   bash scripts/fetch_web_assets.sh --list     print the pinned packages
#
# Result: DEST/node_modules/<package>/ (git-ignored under build/). Uses npm (`npm pack` of each
# pinned package: the published tarball, checked by npm, without dependency trees) and tar.
# npm comes with Node.js: `apt-get install nodejs npm` (Debian/Ubuntu), `brew install node`
# (macOS), `conda install -c conda-forge nodejs`, or an installer from nodejs.org.
set -euo pipefail

# reveal.js 4 is what nbconvert's reveal template is written for; MathJax 3 (one file,
# tex-svg-full.js) typesets TeX in markdown cells.
PACKAGES=(
  "reveal.js@4.6.1"
  "mathjax@3.2.2"
)

log() { printf '[web-assets] %s\n' "$*"; }
die() { printf '[web-assets] ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  --list) printf '%s\n' "${PACKAGES[@]}"; exit 0 ;;
  -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
esac
DEST="${1:-${LABKIT_WEB_DIR:-$ROOT/build/web}}"
MODULES="$DEST/node_modules"

# installed version of a package ("" when absent)
installed_version() {
  local pj="$MODULES/$1/package.json"
  [[ -f "$pj" ]] || { echo ""; return; }
  sed -n 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$pj" | head -n 1
}

todo=()
for spec in "${PACKAGES[@]}"; do
  name="${spec%@*}"; version="${spec##*@}"
  if [[ "$(installed_version "$name")" == "$version" ]]; then
    log "$name $version: present"
  else
    todo+=("$spec")
  fi
done

if (( ${#todo[@]} )); then
  command -v npm >/dev/null 2>&1 || die "npm not found. Offline slides need it once, to fetch: ${todo[*]}.
Install Node.js (it includes npm): apt-get install nodejs npm (Debian/Ubuntu), brew install node
(macOS), conda install -c conda-forge nodejs, or an installer from nodejs.org; then re-run."
  command -v tar >/dev/null 2>&1 || die "tar not found"
  mkdir -p "$MODULES"
  tmp="$(mktemp -d -t labkit-web.XXXXXX)"
  trap 'rm -rf "$tmp"' EXIT
  log "npm pack ${todo[*]}"
  (cd "$tmp" && npm pack --silent --no-fund --no-audit "${todo[@]}" >/dev/null) \
    || die "npm pack failed (is the npm registry reachable? see the messages above)"
  for spec in "${todo[@]}"; do
    name="${spec%@*}"; version="${spec##*@}"
    tarball="$tmp/$(printf '%s' "${name#@}" | tr '/' '-')-$version.tgz"
    [[ -f "$tarball" ]] || die "npm pack did not produce $(basename "$tarball")"
    rm -rf "$MODULES/$name"
    mkdir -p "$MODULES/$name"
    tar -xzf "$tarball" -C "$MODULES/$name" --strip-components=1
    [[ "$(installed_version "$name")" == "$version" ]] || die "$name: unpacked, but not version $version"
    log "$name $version: installed"
  done
fi

# a package.json that says what this folder is (not used by the exports)
{
  printf '{\n  "name": "labkit-web-assets",\n  "private": true,\n  "description": "written by scripts/fetch_web_assets.sh",\n  "dependencies": {\n'
  n=${#PACKAGES[@]}; i=0
  for spec in "${PACKAGES[@]}"; do
    i=$((i + 1)); name="${spec%@*}"; version="${spec##*@}"
    printf '    "%s": "%s"%s\n' "$name" "$version" "$([[ $i -lt $n ]] && echo ,)"
  done
  printf '  }\n}\n'
} > "$DEST/package.json"
log "ready: $MODULES"
