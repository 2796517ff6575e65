#!/usr/bin/env bash
# `make load`: the issue #15 request mix (40% /healthz, 24% file reads, 10% run_shell_command, 8% list,
# 8% exists, 6% 1 KiB PUT, 4% IPython `1+1`) against a release boxd on loopback, with wrk, at each
# connection count; prints req/s, p50/p99, non-2xx by status, and boxd's RSS, fds, threads and children
# before, right after, and once settled. Not part of `make test`.
#
# While the mix runs at 8 connections or more, one extra wrk connection per route measures that route
# alone (its p50/p99 under the mix's load); each probe adds one closed-loop connection of its route.
#
# Env: LEVELS ("1 64 512"), DURATION (30s, a wrk duration), BOXD_BIN (target/release/boxd),
# PYTHON (the kernel's interpreter: .venv/bin/python, else python3), PROBES (1; 0 turns them off),
# SETTLE (20, seconds to wait for threads and fds to come back to idle after each level).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BOXD_BIN:-$root/target/release/boxd}
levels=${LEVELS:-1 64 512}
duration=${DURATION:-30s}
probes=${PROBES:-1}
settle=${SETTLE:-20}
python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x $root/.venv/bin/python ]]; then python=$root/.venv/bin/python; else python=python3; fi
fi
script=$root/scripts/load/mix.lua
routes=(healthz read shell list exists put cell)

command -v wrk >/dev/null || { echo "load: wrk is missing (Debian: apt-get install wrk)" >&2; exit 2; }
[[ -x $bin ]] || { echo "load: no boxd at $bin (run \`make build\`)" >&2; exit 2; }

scratch=$(mktemp -d)
boxd_pid=
cleanup() {
  if [[ -n $boxd_pid ]] && kill -0 "$boxd_pid" 2>/dev/null; then
    kill -TERM "$boxd_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$boxd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$boxd_pid" 2>/dev/null || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT

token=load-$RANDOM$RANDOM
mkdir -p "$scratch/workspace"
SECRET_TOKEN=$token RUST_LOG=${RUST_LOG:-warn,boxd=info} SANDBOXD_GRPC_ADDR=127.0.0.1:0 \
  SANDBOXD_REST_ADDR=127.0.0.1:0 "$bin" serve --host 127.0.0.1 --port 0 \
  --workspace "$scratch/workspace" --python "$python" 2>"$scratch/boxd.log" &
boxd_pid=$!
base=
for _ in $(seq 200); do
  base=$(grep -o 'listening on http://[0-9.:]*' "$scratch/boxd.log" | head -1 | sed 's/listening on //') || true
  [[ -n $base ]] && break
  kill -0 "$boxd_pid" 2>/dev/null || { cat "$scratch/boxd.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n $base ]] || { echo "load: boxd did not report its address" >&2; exit 1; }

auth=(-H "Authorization: Bearer $token")
# Ready means the kernel is warm too, so the first level does not measure its start.
for _ in $(seq 120); do
  curl -sf "${auth[@]}" "$base/readyz" >/dev/null && break
  sleep 0.5
done
curl -sf "${auth[@]}" "$base/readyz" >/dev/null || { echo "load: boxd is not ready:" >&2; curl -s "${auth[@]}" "$base/readyz" >&2; exit 1; }
body=$(head -c 4096 /dev/zero | tr '\0' 'r')
for i in $(seq 0 15); do
  curl -sf "${auth[@]}" -X PUT --data-binary "$body" "$base/workspace/file?path=load/read-$i.txt" >/dev/null
done

# rss_kib fds threads children of boxd (children: every descendant).
stats() {
  local rss threads fds children
  rss=$(awk '/^VmRSS/{print $2}' "/proc/$boxd_pid/status")
  threads=$(awk '/^Threads/{print $2}' "/proc/$boxd_pid/status")
  fds=$(find "/proc/$boxd_pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  children=$(ps -e -o pid=,ppid= | awk -v root="$boxd_pid" '
    { parent[$1] = $2 }
    END { n = 0; for (p in parent) { q = parent[p]; for (d = 0; d < 64 && q > 1; d++) {
            if (q == root) { n++; break } q = parent[q] } } print n }')
  echo "$((rss / 1024)) $fds $threads $children"
}
show() { # label "rss fds threads children"
  read -r rss fds threads children <<<"$2"
  printf '  boxd %-16s rss=%sMiB fds=%s threads=%s children=%s\n' "$1" "$rss" "$fds" "$threads" "$children"
}

echo "load: $bin at $base, kernel $python, levels: $levels, $duration each"
summary=()
for connections in $levels; do
  echo "== $connections connections, $duration =="
  before=$(stats)
  show before "$before"
  threads=$((connections < 2 ? connections : 2))
  out=$scratch/level-$connections
  mkdir -p "$out"
  LOAD_LABEL=mix wrk -t"$threads" -c"$connections" -d"$duration" --timeout 20s -s "$script" "$base" \
    -- "$token" >"$out/mix" 2>&1 &
  waiting=($!)
  if [[ $probes == 1 && $connections -ge 8 ]]; then
    for route in "${routes[@]}"; do
      LOAD_LABEL=$route wrk -t1 -c1 -d"$duration" --timeout 20s -s "$script" "$base" \
        -- "$token" "$route" >"$out/$route" 2>&1 &
      waiting+=($!)
    done
  fi
  failed=0
  for pid in "${waiting[@]}"; do wait "$pid" || failed=1; done
  after=$(stats)
  grep -h -E '^(mix|healthz|read|shell|list|exists|put|cell) ' "$out"/* | sort -k1,1 -s |
    awk '{ printf "  %-8s", $1; for (i = 2; i <= NF; i++) printf " %s", $i; printf "\n" }'
  [[ $failed == 0 ]] || { echo "  (a wrk run failed:)"; cat "$out"/* | grep -v -E '^(mix|healthz|read|shell|list|exists|put|cell) ' | head -20; }
  show after "$after"
  read -r _ idle_fds idle_threads _ <<<"$before"
  waited=0
  settled=$after
  while ((waited < settle)); do
    read -r _ fds threads_now _ <<<"$settled"
    ((fds <= idle_fds && threads_now <= idle_threads)) && break
    sleep 1
    waited=$((waited + 1))
    settled=$(stats)
  done
  show "settled (${waited}s)" "$settled"
  summary+=("$connections $(grep -h '^mix ' "$out/mix" | cut -d' ' -f2-) | after: $after | settled: $settled")
done

echo "== summary (connections, mix figures | boxd after and settled: rss_MiB fds threads children) =="
printf '  %s\n' "${summary[@]}"
kill -0 "$boxd_pid" 2>/dev/null || { echo "load: boxd died" >&2; exit 1; }
errors=$(grep -c -E ' ERROR ' "$scratch/boxd.log" || true)
echo "boxd logged $errors error lines"
grep -E ' ERROR ' "$scratch/boxd.log" | sort | uniq -c | sort -rn | head -5 || true
