#!/bin/bash
# The base image's entrypoint (under tini, which reaps orphans and forwards signals): renders nginx's
# config, runs nginx and boxd, restarts either one if it crashes (with a backoff), stops the container if
# boxd rejects its configuration (a restart would fail the same way), and stops both on SIGTERM/SIGINT.
# Two processes do not need supervisord (a Python daemon, ~15 MB); this loop is all the supervision they need.
set -u

NGINX_TIMEOUT=${NGINX_TIMEOUT:-60}
if [[ ! $NGINX_TIMEOUT =~ ^[0-9]+$ ]] || ((NGINX_TIMEOUT < 1)); then
  echo "boxd-entrypoint: NGINX_TIMEOUT must be whole seconds, got '$NGINX_TIMEOUT'; using 60" >&2
  NGINX_TIMEOUT=60
fi
if [[ -z ${SECRET_TOKEN:-} ]]; then
  echo "boxd-entrypoint: WARNING: SECRET_TOKEN is not set; using upstream's default token secret_token123" >&2
  export SECRET_TOKEN=secret_token123
fi
# Commands and cells stop a little before nginx gives up, so a slow one returns its result, not a 504.
if ((NGINX_TIMEOUT > 10)); then limit=$((NGINX_TIMEOUT - 5)); else limit=$((NGINX_TIMEOUT * 3 / 4)); fi
((limit >= 1)) || limit=1
export BOXD_COMMAND_TIMEOUT=${BOXD_COMMAND_TIMEOUT:-$limit}
export BOXD_CELL_TIMEOUT=${BOXD_CELL_TIMEOUT:-$limit}
# Idle streams (SSE, NDJSON, terminal WebSockets) send keep-alives well inside nginx's read timeout.
keep_alive=$((NGINX_TIMEOUT / 2 < 15 ? NGINX_TIMEOUT / 2 : 15))
((keep_alive >= 1)) || keep_alive=1
export BOXD_KEEP_ALIVE=${BOXD_KEEP_ALIVE:-$keep_alive}
export BOXD_PYTHON=${BOXD_PYTHON:-/opt/venv/bin/python}
if [[ -z ${BOXD_MCP_CONFIG:-} && -f /etc/boxd/mcp_server_configs.json ]]; then
  export BOXD_MCP_CONFIG=/etc/boxd/mcp_server_configs.json
fi
sed "s/@NGINX_TIMEOUT@/${NGINX_TIMEOUT}/g" /etc/boxd/nginx.conf.template > /etc/nginx/nginx.conf

stopping=0
sleeper=
start_nginx() { nginx -g 'daemon off;' & nginx_pid=$!; nginx_since=$SECONDS; }
start_boxd() {
  boxd serve --host 127.0.0.1 --port 8000 --workspace /workspace &
  boxd_pid=$!
  boxd_since=$SECONDS
}
stop() {
  stopping=1
  kill -TERM "$boxd_pid" 2>/dev/null
  kill -QUIT "$nginx_pid" 2>/dev/null
  [[ -n $sleeper ]] && kill "$sleeper" 2>/dev/null
}
trap stop TERM INT

# A child that keeps crashing is restarted after 1, 2, 4 ... 30 s; one that ran a minute starts over at 1.
boxd_delay=1 nginx_delay=1
backoff() { # NAME SINCE STATUS: waits NAME's delay (SIGTERM cuts it short), then doubles it
  local -n delay=${1}_delay
  ((SECONDS - $2 >= 60)) && delay=1
  echo "boxd-entrypoint: $1 exited (status $3); restarting it in ${delay} s" >&2
  sleep "$delay" &
  sleeper=$!
  wait "$sleeper"
  sleeper=
  delay=$((delay * 2 > 30 ? 30 : delay * 2))
}

start_nginx
start_boxd
while ((stopping == 0)); do
  exited=
  wait -n -p exited
  status=$?
  ((stopping)) && break
  if [[ $exited == "$boxd_pid" ]]; then
    # clap's usage errors (unknown flag, bad BOXD_TOOLS value, ...) exit 2: the same arguments would fail
    # forever, so the container stops with boxd's message as its last words instead.
    if ((status == 2)); then
      echo "boxd-entrypoint: boxd rejected its configuration (exit status 2, message above); stopping the container" >&2
      # TERM, not the graceful QUIT: nginx has served nothing yet, and a QUIT arriving before nginx has
      # installed its handler would be ignored (background jobs start with it ignored) and hang `wait`.
      kill -TERM "$nginx_pid" 2>/dev/null
      wait
      exit 2
    fi
    backoff boxd "$boxd_since" "$status"
    ((stopping)) || start_boxd
  elif [[ $exited == "$nginx_pid" ]]; then
    backoff nginx "$nginx_since" "$status"
    ((stopping)) || start_nginx
  fi
done
wait
