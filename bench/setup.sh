#!/usr/bin/env bash
# Prepares `make bench`, idempotently: wrk (load generator), and bench-out/upstream-venv with the upstream
# in-container server's pinned dependencies plus its app code from the PyPI package (installed without its
# own dependency tree, which would fight the image's pins).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null 2>&1; then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends wrk
fi
requirements=bench/upstream-requirements.txt
venv=bench-out/upstream-venv
stamp=$venv/.requirements.sha256
wanted=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ ! -x $venv/bin/python || ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  mkdir -p bench-out
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --target bench-out/upstream-app \
    agentscope-runtime==1.1.6.post2
  echo "$wanted" > "$stamp"
fi

# The reference desktop server for bench/computer.py (npm, pinned by its lock file), and Xvfb to run it on.
command -v Xvfb >/dev/null 2>&1 || {
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends xvfb python3-tk
}
reference=bench-out/reference-computer
stamp=$reference/node_modules/.lock.sha256
wanted=$(sha256sum bench/reference-computer/package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  mkdir -p "$reference"
  cp bench/reference-computer/package.json bench/reference-computer/package-lock.json "$reference/"
  npm ci --prefix "$reference" --no-audit --no-fund --loglevel=error
  echo "$wanted" > "$stamp"
fi

# The reference browser server is installed by scripts/setup.sh (the differential test needs it too).
