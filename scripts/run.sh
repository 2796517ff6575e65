#!/usr/bin/env bash
# `make run`: boxd in the foreground on ./workspace, with the IPython kernel on the project's kernel venv
# (scripts/kernel-venv.sh makes it the first time) unless PYTHON or BOXD_PYTHON names an interpreter.
# If the venv cannot be made, boxd starts anyway and one line says what is missing and how to fix it.
#
# Env: PORT (8000), PYTHON / BOXD_PYTHON, WORKSPACE (./workspace), BOXD_BIN (target/release/boxd), and
# everything boxd itself reads (SECRET_TOKEN, BOXD_TOOLS, ...; see `boxd serve --help`).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BOXD_BIN:-$root/target/release/boxd}
port=${PORT:-8000}
workspace=${WORKSPACE:-$root/workspace}
python=${PYTHON:-${BOXD_PYTHON:-}}

if [[ -z $python ]]; then
  if [[ ,${BOXD_TOOLS:-ipython}, == *,ipython,* ]]; then
    # As in the base image (/opt/venv/bin first on PATH): `pip` and `python` in cells and commands are
    # the kernel's own.
    if python=$("$root/scripts/kernel-venv.sh"); then PATH=${python%/python}:$PATH; fi
  else
    python=python3
  fi
fi

mkdir -p "$workspace"
echo "boxd: serving $workspace at http://127.0.0.1:$port (token below unless SECRET_TOKEN is set)"
if [[ ,${BOXD_TOOLS:-}, == *,sandboxd,* ]]; then
  echo "boxd: sandboxd is on: its listeners (${SANDBOXD_GRPC_ADDR:-127.0.0.1:9090} gRPC, ${SANDBOXD_REST_ADDR:-127.0.0.1:8080} REST) take no token; only processes of $(id -un) may connect"
fi
exec "$bin" serve --host 127.0.0.1 --port "$port" --workspace "$workspace" --python "$python"
