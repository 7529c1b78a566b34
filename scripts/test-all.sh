#!/usr/bin/env bash
# Install what the tests need, then run the whole suite: Python (compiler, Triton through its
# interpreter, nvFuser against the reference, language server end to end, headless Neovim)
# and the VS Code extension (unit tests, packaging, end to end in code-server + Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."

# torch 2.13.0 (CPU) installs from local disk; the project's range accepts it, so nothing
# pulls a CUDA build.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[test]'

# Debian packages for the headless-editor and browser tests.
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  need=()
  command -v nvim >/dev/null || need+=(neovim)
  if ((${#need[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

if [ -f vscode-extension/ci.sh ]; then
  bash vscode-extension/ci.sh
fi

python3 -m pytest -q -p no:cacheprovider
