#!/usr/bin/env bash
# The IPython kernel's interpreter for `make run`: a project-local venv (no root, no apt) with exactly the
# kernel packages the base image ships (images/base/kernel-requirements.txt). Made once, then reused
# while its stamp matches the requirements file: a ready venv costs no network call and no Python start.
#
# Prints the interpreter to use on stdout. If the venv cannot be made, prints ONE line on stderr (what is
# missing and the command that fixes it), prints the base interpreter instead (a kernel on it answers
# cells with a clear "IPython is not installed" error unless it has IPython of its own) and exits 1.
#
# Env: KERNEL_VENV (default: .venv-kernel in the repository), BASE_PYTHON (default: python3).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
requirements=$root/images/base/kernel-requirements.txt
venv=${KERNEL_VENV:-$root/.venv-kernel}
base=${BASE_PYTHON:-python3}
stamp=$venv/.requirements.sha256
wanted=$(sha256sum "$requirements" | cut -d' ' -f1)

if [[ -x $venv/bin/python && -f $stamp && $(<"$stamp") == "$wanted" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

# Falls back to the base interpreter, naming what is missing once.
fail() {
  if "$base" -c 'import IPython' >/dev/null 2>&1; then
    echo "make run: $1, so the kernel uses $base's own IPython (not the pinned one); fix: $2" >&2
  else
    echo "make run: IPython tool unavailable: $1; fix: $2" >&2
  fi
  echo "$base"
  exit 1
}

if ! command -v "$base" >/dev/null 2>&1; then
  fail "no $base to make $venv with" "sudo apt-get install -y python3 python3-venv && make run"
fi
if ! "$base" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  fail "$base has no venv/ensurepip module to make $venv with" \
    "sudo apt-get install -y python3-venv && make run"
fi

echo "make run: preparing $venv for the IPython kernel from $requirements (once)" >&2
# A venv whose install failed (no stamp yet) is kept: offline, each `make run` then only retries pip. One
# made for another requirements list (a stamp that differs) starts afresh, so nothing stale stays in it.
if [[ -f $stamp || ! -f $venv/.made || ! -x $venv/bin/python ]]; then
  if ! output=$("$base" -m venv --clear "$venv" 2>&1); then
    fail "'$base -m venv $venv' failed: $(tail -n1 <<<"$output")" \
      "sudo apt-get install -y python3-venv && make run"
  fi
  # Not the repository's business: Python >= 3.13 writes this itself.
  echo '*' >"$venv/.gitignore"
  touch "$venv/.made"
fi
log=$venv/pip.log
# Few retries and a short timeout: with no registry, `make run` should get to serving quickly.
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --retries 1 --timeout 20 \
  -r "$requirements" >"$log" 2>&1; then
  fail "could not install $(basename "$requirements") into $venv from PyPI ($(grep -m1 -E '^ERROR' "$log" || tail -n1 "$log"); log: $log)" \
    "make kernel-venv (once PyPI, or the index in PIP_INDEX_URL, is reachable)"
fi
echo "$wanted" >"$stamp"
echo "$venv/bin/python"
