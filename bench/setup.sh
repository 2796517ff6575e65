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
# npm_from_lock NAME [npm ci options]: bench/NAME's package, installed by its lock file into bench-out/NAME,
# again only when the lock file changed.
npm_from_lock() {
  local name=$1 into=bench-out/$1
  shift
  local stamp=$into/node_modules/.lock.sha256
  local wanted
  wanted=$(sha256sum "bench/$name/package-lock.json" | cut -d' ' -f1)
  [[ -f $stamp && $(cat "$stamp") == "$wanted" ]] && return 0
  mkdir -p "$into"
  cp "bench/$name/package.json" "bench/$name/package-lock.json" "$into/"
  npm ci --prefix "$into" --no-audit --no-fund --loglevel=error "$@"
  echo "$wanted" > "$stamp"
}
npm_from_lock reference-computer

# The reference browser server is installed by scripts/setup.sh (the differential test needs it too).

# agent-browser for bench/browser.py (npm, pinned by its lock file). Its tarball carries the native
# linux-x64 binary: the postinstall only marks it executable (it downloads from GitHub only when the
# binary is missing). It runs Debian's chromium (AGENT_BROWSER_EXECUTABLE_PATH), never a downloaded one.
# The package asks for node >= 24 (engines), but the bench runs the native binary, not the node wrapper.
npm_from_lock agent-browser --engine-strict=false
test -x bench-out/agent-browser/node_modules/agent-browser/bin/agent-browser-linux-x64 || {
  echo "setup: agent-browser's native binary is missing after npm ci" >&2
  exit 1
}

# bench/training.py: upstream's BFCL training env service (agentscope-runtime's training_box on Ray) in
# bench-out/upstream-training, and a minimal venv for boxd's training worker (bfcl-eval without its
# dependency tree, plus the worker's own list).
requirements=bench/upstream-training-requirements.txt
venv=bench-out/upstream-training
stamp=$venv/.requirements.sha256
wanted=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ ! -x $venv/bin/python || ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  mkdir -p bench-out
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps $(sed -n 's/^# no-deps: //p' "$requirements")
  # The image's layout (its Dockerfile copies training_box/ to /agentscope_runtime/training_box and runs
  # `python -m training_box.env_service` from /agentscope_runtime): training_box as a top-level package.
  app=$venv/app
  rm -rf "$app"
  mkdir -p "$app"
  package=$("$venv/bin/python" -c \
    'import importlib.util; print(importlib.util.find_spec("agentscope_runtime").submodule_search_locations[0])')
  cp -r "$package/sandbox/box/training_box" "$app/"
  rm -rf "$app/training_box/__pycache__"
  # The one-line stand-in. The published training_box/__init__.py is
  # `from .training_box import APPWorldSandbox, BFCLSandbox` (the SDK-side sandbox classes), and that
  # module does `from ...utils import build_image_uri`: with training_box top-level, as in the image,
  # importing it fails ("attempted relative import beyond top-level package") in the server and in every
  # Ray actor. The env service needs nothing from it, so the bench's copy gets an empty package marker.
  echo '# bench stand-in for the SDK-side re-export, whose relative import cannot resolve here' \
    > "$app/training_box/__init__.py"
  echo "$wanted" > "$stamp"
fi
venv=bench-out/training-worker-venv
stamp=$venv/.requirements.sha256
wanted=$(sha256sum src/training/requirements.txt | cut -d' ' -f1)
if [[ ! -x $venv/bin/python || ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
  mkdir -p bench-out
  python3 -m venv "$venv"
  # As scripts/setup.sh installs it for the tests: bfcl-eval without its dependency tree, plus what the
  # worker imports.
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps bfcl-eval==2025.8.25 \
    -r src/training/requirements.txt
  echo "$wanted" > "$stamp"
fi
