#!/usr/bin/env bash
# Installs what `make test` needs, idempotently: Debian packages, a Python venv with the real client, and
# the reference MCP filesystem server from npm.
# Safe to run again: it only installs what is missing or out of date.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
install_missing() {
  ((${#missing[@]})) || return 0
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  missing=()
}

# `setup.sh build`: only what the Rust build needs (a C compiler for libgit2, clippy as the build's lint),
# so `make test` can start compiling while the rest below installs.
need git git
need cc gcc
need make make
install_missing
if ! cargo clippy --version >/dev/null 2>&1 || ! cargo fmt --version >/dev/null 2>&1; then
  rustup component add clippy rustfmt
fi
[[ ${1:-} == build ]] && exit 0

need pgrep procps
need pkill procps
need file file
need python3 python3
need node nodejs
need npm npm
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
# The computer family's tests: a virtual X server and a real Tk window (Debian's python3) to drive.
need Xvfb xvfb
# ...and what the desktop images run beside it (tests/python/test_display_auth.py starts their own service
# scripts): the display's cookies, and the VNC server on its Unix socket.
need xauth xauth
need x11vnc x11vnc
# ...and the nested X server headed Chromium draws on (the browser image's).
need Xephyr xserver-xephyr
/usr/bin/python3 -c 'import tkinter' >/dev/null 2>&1 || missing+=(python3-tk)
# The adb family's tests: Debian's adb server, to reach the device stand-in (tests/adb/device.py) as an image's server would.
need adb adb
# ...and openssl, which makes the keys of the ADB authorization tests (tests/python/test_adb_auth.py).
need openssl openssl
# The browser family's tests: Debian's Chromium, driven headless over the DevTools protocol; headless,
# boxd prefers Chromium's headless shell (same version, about half the start time) when it is installed.
need chromium chromium
need chromium-headless-shell chromium-headless-shell

install_missing

# The test venv: the client, pytest, MCP peers, and (by `-r`) the kernel's list the image and `make run` use.
requirements=tests/python/requirements.txt
stamp=.venv/.requirements.sha256
wanted=$(cat "$requirements" images/base/kernel-requirements.txt | sha256sum | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  echo "setup: preparing .venv from $requirements"
  python3 -m venv .venv
  # Not `.venv/bin/pip`: a script's shebang names the venv it was made in, wherever that venv is now.
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements"
  echo "$wanted" > "$stamp"
fi

# The training family's worker (tests/python/test_training*.py): bfcl-eval without its declared
# dependencies (torch and CUDA, 6 GB, that the multi-turn simulator never imports) plus what it imports.
stamp=.venv/.training-requirements.sha256
wanted=$(cat src/training/requirements.txt | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  echo "setup: installing the training worker's libraries (bfcl-eval) into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps bfcl-eval==2025.8.25 \
    -r src/training/requirements.txt
  echo "$wanted" > "$stamp"
fi

# The reference filesystem MCP server (npm, pinned by its lock file) for the differential test.
reference=tests/reference-fs
stamp=$reference/node_modules/.lock.sha256
wanted=$(sha256sum "$reference/package-lock.json" | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  echo "setup: installing the reference server-filesystem from npm"
  npm ci --prefix "$reference" --no-audit --no-fund --loglevel=error
  echo "$wanted" > "$stamp"
fi

# The reference browser server (@playwright/mcp 0.0.25, npm, pinned by its lock file; no browser download:
# it runs Debian's chromium) for the browser family's differential test; `make bench` uses it too.
reference=bench-out/reference-browser
stamp=$reference/node_modules/.lock.sha256
wanted=$(sha256sum bench/reference-browser/package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  echo "setup: installing the reference @playwright/mcp from npm"
  mkdir -p "$reference"
  cp bench/reference-browser/package.json bench/reference-browser/package-lock.json "$reference/"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$reference" --no-audit --no-fund --loglevel=error
  echo "$wanted" > "$stamp"
fi
