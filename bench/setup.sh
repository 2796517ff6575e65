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
