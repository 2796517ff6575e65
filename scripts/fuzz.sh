#!/usr/bin/env bash
# `make fuzz`: schemathesis over docs/openapi.json against the release boxd, run as an unprivileged user
# on a scratch workspace (a small git repository), with a fixed seed and a bounded number of examples.
# Fails on any 5xx, any response that does not match the documented schema, or a server that died.
# The streaming routes (NDJSON/SSE streams, the WebSocket) are left to tests/python/test_stream_bad_input.py:
# a generated request to them would hold a stream open until the request times out.
#
# Env: BOXD_BIN (target/release/boxd), FUZZ_SEED (20240611), FUZZ_EXAMPLES (per operation and phase, 300),
# FUZZ_WORKERS (1: how many schemathesis processes share the paths; processes, not schemathesis's own
# `--workers`, which are threads: two threads parsing at once can trip CPython 3.11 into "SystemError: AST
# constructor recursion depth mismatch", a CPython bug fixed in later releases, which fails the run without
# boxd having done anything), FUZZ_TIME_LIMIT (seconds for the whole schemathesis run, 420), FUZZ_USER
# (boxd-fuzz when root; otherwise the current user), FUZZ_KEEP=1 keeps the scratch directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BOXD_BIN:-$root/target/release/boxd}
seed=${FUZZ_SEED:-20240611}
examples=${FUZZ_EXAMPLES:-300}
workers=${FUZZ_WORKERS:-1}
time_limit=${FUZZ_TIME_LIMIT:-420}
schemathesis=$root/.venv/bin/schemathesis

[[ -x $bin ]] || { echo "fuzz: no release binary at $bin (run \`make build\`)" >&2; exit 2; }
[[ -x $schemathesis ]] || { echo "fuzz: no schemathesis in .venv (run \`make setup\`)" >&2; exit 2; }

# Who boxd runs as: a dedicated system user when we are root (made once, no home, no login shell), so
# whatever the generated requests make boxd do cannot touch anything outside the scratch directory.
if [[ $(id -u) -eq 0 ]]; then
  user=${FUZZ_USER:-boxd-fuzz}
  if ! id -u "$user" >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$user"
  fi
  as_user=(setpriv --reuid="$user" --regid="$user" --init-groups --)
else
  user=$(id -un)
  echo "fuzz: not root, so boxd runs as the current user ($user), not a dedicated unprivileged one"
  as_user=()
fi

# The kernel's interpreter must be one the user can run: the test venv's may live under /root (pyenv), so
# as root the kernel gets a venv of its own on the system Python (target/fuzz-kernel-venv, made once by
# scripts/kernel-venv.sh). Without one, the ipython family is left out, and the run says so.
tools=""
if ((${#as_user[@]})); then
  python=$(KERNEL_VENV=$root/target/fuzz-kernel-venv BASE_PYTHON=${FUZZ_BASE_PYTHON:-/usr/bin/python3} \
    "$root/scripts/kernel-venv.sh") || true
else
  python=$root/.venv/bin/python
fi
if ! "${as_user[@]}" "$python" -c 'import IPython' >/dev/null 2>&1; then
  tools=shell,filesystem,workspace,git,processes,watch,mcp
  echo "fuzz: $user cannot run IPython with '$python': the ipython family is left out (BOXD_TOOLS=$tools)"
fi

scratch=$(mktemp -d /tmp/boxd-fuzz.XXXXXX)
chmod 755 "$scratch"
workspace=$scratch/workspace
boxd_pid=""

# Whatever happens (failure, Ctrl-C, timeout): stop boxd, then anything still running in the scratch
# directory (commands the fuzzer started there), by pid; then remove the scratch directory.
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n $boxd_pid ]] && kill -0 "$boxd_pid" 2>/dev/null; then
    kill -TERM "$boxd_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$boxd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$boxd_pid" 2>/dev/null || true
    wait "$boxd_pid" 2>/dev/null || true
  fi
  local left=()
  for proc in /proc/[0-9]*; do
    local cwd
    cwd=$(readlink "$proc/cwd" 2>/dev/null) || continue
    [[ $cwd == "$scratch" || $cwd == "$scratch"/* ]] && left+=("${proc#/proc/}")
  done
  if ((${#left[@]})); then
    echo "fuzz: stopping ${#left[@]} process(es) left in the scratch directory: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null || true
  fi
  if [[ ${FUZZ_KEEP:-0} == 1 ]]; then
    echo "fuzz: kept $scratch"
  else
    rm -rf "$scratch"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The scratch workspace: a repository with history, a few files, a subdirectory and an uncommitted change.
mkdir -p "$workspace/src" "$scratch/home"
printf 'hello\n' >"$workspace/README.md"
printf 'print("hi")\n' >"$workspace/src/main.py"
printf 'a,b\n1,2\n' >"$workspace/data.csv"
git_in() { git -C "$workspace" -c user.name=fuzz -c user.email=fuzz@example.com "$@"; }
git_in init -q
git_in add -A
git_in commit -qm "first"
printf 'more\n' >>"$workspace/README.md"
git_in commit -qam "second"
printf 'uncommitted\n' >>"$workspace/data.csv"
if ((${#as_user[@]})); then chown -R "$user:" "$workspace" "$scratch/home"; fi

# The sandboxd family is off by default for `boxd serve`; its legacy routes are in docs/openapi.json.
tools=${tools:-shell,ipython,filesystem,workspace,git,processes,watch,mcp},sandboxd
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
log=$scratch/boxd.log
# Every log a background process writes is made here, before that process starts, so what reads it
# at once (the port's search below, `tail` further down) never meets a file not made yet: the
# redirections of a `... &` happen in the child, whenever it gets to them.
: >"$log"
# Short tool timeouts: a generated `timeout` or command must not hold a worker for minutes. The sandboxd
# family's own listeners (not fuzzed here: docs/openapi.json is the main port's) on free ports.
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$scratch/home" SECRET_TOKEN="$token" RUST_LOG=info \
  BOXD_COMMAND_TIMEOUT=10 BOXD_CELL_TIMEOUT=10 BOXD_TOOLS=$tools \
  SANDBOXD_GRPC_ADDR=127.0.0.1:0 SANDBOXD_REST_ADDR=127.0.0.1:0 SANDBOX_EXEC_TIMEOUT_SECONDS=10 \
  "${as_user[@]}" "$bin" serve --host 127.0.0.1 --port 0 --workspace "$workspace" \
  --python "$python" >>"$log" 2>&1 &
boxd_pid=$!

port=""
for _ in $(seq 200); do
  port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log" | head -1)
  [[ -n $port ]] && break
  kill -0 "$boxd_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $port ]]; then
  echo "fuzz: boxd did not start; its log:" >&2
  cat "$log" >&2
  exit 1
fi
base=http://127.0.0.1:$port
# Every family ready (the kernel takes a few seconds) before the first generated request: a 503 while
# starting is the documented answer, but not what this run is about.
for _ in $(seq 300); do
  curl -fsS --max-time 2 "$base/readyz/status" >/dev/null 2>&1 && break
  kill -0 "$boxd_pid" 2>/dev/null || break
  sleep 0.1
done
if ! curl -fsS --max-time 2 "$base/readyz/status" >/dev/null 2>&1; then
  echo "fuzz: boxd is not ready after 30 s: $(curl -sS --max-time 2 -H "Authorization: Bearer $token" "$base/readyz")" >&2
  exit 1
fi
echo "fuzz: boxd $(stat -c %s "$bin") bytes as $user (pid $boxd_pid) on $base, workspace $workspace"

# Two live processes for the `/processes/{id}` routes to act on (tests/fuzz/hooks.py points `{id}` at
# them): a plain one and one on a terminal.
process_ids=()
for body in '{"command": "sleep 600"}' '{"command": "cat", "pty": true}'; do
  answer=$(curl -fsS --max-time 10 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "$body" "$base/processes")
  process_ids+=("$("$root/.venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["id"])' <<<"$answer")")
done

# The training family's routes (tag `training`) are left out: that family is off here (it needs an
# environment library); tests/python/test_training.py drives them with the real client.
started=$(date +%s)
status=0
# Each process fuzzes every FUZZ_WORKERS-th path of the specification, as a regex in which a path
# parameter matches any segment: tests/fuzz/hooks.py turns `/tools/{tool_name}` into one path per tool
# before the filters apply.
mapfile -t shares < <("$root/.venv/bin/python" - "$root/docs/openapi.json" "$workers" <<'PY'
import json, re, sys
with open(sys.argv[1]) as spec:
    paths = sorted(json.load(spec)["paths"])
count = max(1, int(sys.argv[2]))
for share in range(count):
    mine = [re.sub(r"\\\{[^/]*?\\\}", "[^/]+", re.escape(path)) for path in paths[share::count]]
    if mine:
        print("^(" + "|".join(mine) + ")$")
PY
)
share_pids=()
for index in "${!shares[@]}"; do
  : >"$scratch/schemathesis-$index.log"
  FUZZ_BASE_URL=$base FUZZ_TOKEN=$token FUZZ_PROCESS_IDS=$(IFS=,; echo "${process_ids[*]}") \
  PYTHONPATH=$root/tests/fuzz SCHEMATHESIS_HOOKS=hooks \
  timeout --kill-after=10 "$time_limit" "$schemathesis" --config-file "$root/tests/fuzz/schemathesis.toml" run "$root/docs/openapi.json" \
    --url "$base" \
    --header "Authorization: Bearer $token" \
    --seed "$seed" \
    --max-examples "$examples" \
    --workers 1 \
    --phases examples,coverage,fuzzing \
    --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
    --request-timeout 30 \
    --generation-database none \
    --include-path-regex "${shares[$index]}" \
    --exclude-path-regex '^/(watch|processes/\{id\}/(events|ws)|tools/\{tool_name\}/stream|mcp)$' \
    --exclude-tag training \
    --exclude-tag desktop \
    --report har --report-dir "$root/target/fuzz-report/share-$index" \
    --no-color >>"$scratch/schemathesis-$index.log" 2>&1 &
  share_pids+=("$!")
done
# The first share's output as it comes (a full run takes minutes), the others' once they are done.
tail -n +1 -f -s 0.2 --pid="${share_pids[0]}" "$scratch/schemathesis-0.log"
for index in "${!share_pids[@]}"; do
  share_status=0
  wait "${share_pids[$index]}" || share_status=$?
  if ((index > 0)); then
    cat "$scratch/schemathesis-$index.log"
  fi
  echo "fuzz: schemathesis on share $((index + 1)) of ${#share_pids[@]} of the paths: exit $share_status"
  if ((status == 0)); then status=$share_status; fi
done
elapsed=$(($(date +%s) - started))

alive=1
kill -0 "$boxd_pid" 2>/dev/null || alive=0
if ((alive)) && ! curl -fsS --max-time 5 "$base/livez" >/dev/null; then alive=0; fi
if ((!alive)); then
  echo "fuzz: FAILED: boxd is dead or does not answer /livez after the run; its log's tail:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
if grep -q 'request failed' "$log"; then
  echo "fuzz: boxd logged failed requests (5xx):"
  grep 'request failed' "$log" | head -20
fi
if ((status == 124 || status == 137)); then
  echo "fuzz: FAILED: schemathesis did not finish within ${time_limit}s" >&2
  exit 1
fi
if ((status != 0)); then
  echo "fuzz: FAILED (schemathesis exit $status, ${elapsed}s, seed $seed)" >&2
  exit "$status"
fi
echo "fuzz: passed in ${elapsed}s (seed $seed, $examples examples per operation and phase); boxd alive"
