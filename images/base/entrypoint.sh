#!/bin/bash
# Every image's entrypoint (under tini, which reaps orphans and forwards signals): renders nginx's config,
# then runs and supervises a list of programs: each executable in /etc/boxd/services/ (in name order; the
# desktop images put Xvfb, the window manager and the VNC server there), nginx, and boxd last. A program
# that exits is restarted on its own after a backoff, the others keep running (a dead Xvfb does not take
# boxd down; boxd relaunches its own children, such as Chromium). If boxd rejects its configuration (exit
# status 2, a restart would fail the same way) the container stops; SIGTERM/SIGINT stop everything.
# A handful of programs does not need supervisord (a Python daemon, ~15 MB, one more process to trust):
# this loop restarts each one independently, which is all the supervision they need.
set -u

NGINX_TIMEOUT=${NGINX_TIMEOUT:-60}
if [[ ! $NGINX_TIMEOUT =~ ^[0-9]+$ ]] || ((NGINX_TIMEOUT < 1)); then
  echo "boxd-entrypoint: NGINX_TIMEOUT must be whole seconds, got '$NGINX_TIMEOUT'; using 60" >&2
  NGINX_TIMEOUT=60
fi
if [[ -n ${BOXD_POOL_SECRET_FILE:-} ]]; then
  # Pool mode (deploy/kubernetes): the session token comes with the claim's POST /init, never from env.
  unset SECRET_TOKEN
elif [[ -z ${SECRET_TOKEN:-} ]]; then
  echo "boxd-entrypoint: WARNING: SECRET_TOKEN is not set; using upstream's default token secret_token123" >&2
  export SECRET_TOKEN=secret_token123
fi
# Commands and cells stop a little before nginx gives up, so a slow one returns its result, not a 504.
if ((NGINX_TIMEOUT > 10)); then limit=$((NGINX_TIMEOUT - 5)); else limit=$((NGINX_TIMEOUT * 3 / 4)); fi
((limit >= 1)) || limit=1
export BOXD_COMMAND_TIMEOUT=${BOXD_COMMAND_TIMEOUT:-$limit}
export BOXD_CELL_TIMEOUT=${BOXD_CELL_TIMEOUT:-$limit}
# A training call (create, step, ...) too: past it boxd stops the instance and says so, rather than nginx
# answering 504 while the instance goes on in an unknown state.
export BOXD_TRAINING_CALL_TIMEOUT=${BOXD_TRAINING_CALL_TIMEOUT:-$limit}
# Idle streams (SSE, NDJSON, terminal WebSockets) send keep-alives well inside nginx's read timeout.
keep_alive=$((NGINX_TIMEOUT / 2 < 15 ? NGINX_TIMEOUT / 2 : 15))
((keep_alive >= 1)) || keep_alive=1
export BOXD_KEEP_ALIVE=${BOXD_KEEP_ALIVE:-$keep_alive}
export BOXD_PYTHON=${BOXD_PYTHON:-/opt/venv/bin/python}
if [[ -z ${BOXD_MCP_CONFIG:-} && -f /etc/boxd/mcp_server_configs.json ]]; then
  export BOXD_MCP_CONFIG=/etc/boxd/mcp_server_configs.json
fi
sed "s/@NGINX_TIMEOUT@/${NGINX_TIMEOUT}/g" /etc/boxd/nginx.conf.template > /etc/nginx/nginx.conf
# An image's own nginx locations that need the timeout too: nginx.d/NAME.conf.template -> NAME.conf.
for template in /etc/boxd/nginx.d/*.conf.template; do
  [[ -f $template ]] && sed "s/@NGINX_TIMEOUT@/${NGINX_TIMEOUT}/g" "$template" > "${template%.template}"
done
mkdir -p /run/boxd
# Image-specific preparation (the desktop images write the VNC password file here), sourced so that
# nothing secret ever reaches a command line.
for hook in /etc/boxd/init.d/*.sh; do
  [[ -f $hook ]] && source "$hook"
done

programs=()
for service in /etc/boxd/services/*; do
  [[ -f $service && -x $service ]] && programs+=("${service##*/}")
done
programs+=(nginx boxd)

declare -A pid_of=() name_of=() since=() delay=() due=()
stopping=0
timer=

start() { # NAME
  case $1 in
    nginx) nginx -g 'daemon off;' & ;;
    boxd) boxd serve --host 127.0.0.1 --port 8000 --workspace /workspace & ;;
    *) "/etc/boxd/services/$1" & ;;
  esac
  pid_of[$1]=$!
  name_of[$!]=$1
  since[$1]=$SECONDS
}
now_ms() { local t=${EPOCHREALTIME//[.,]/}; now=$((t / 1000)); }
stop_timer() {
  [[ -n $timer ]] || return 0
  kill "$timer" 2>/dev/null
  wait "$timer" 2>/dev/null
  timer=
}
signal_all() { # SIGNAL for everything but nginx, which stops gracefully with QUIT
  local name
  for name in "${!pid_of[@]}"; do
    if [[ $name == nginx ]]; then kill "-$2" "${pid_of[$name]}" 2>/dev/null; else kill "-$1" "${pid_of[$name]}" 2>/dev/null; fi
  done
}
stop() {
  stopping=1
  signal_all TERM QUIT
}
trap stop TERM INT

for name in "${programs[@]}"; do
  delay[$name]=1000
  start "$name"
done

# A program that keeps crashing is restarted after 1, 2, 4 ... 30 s; one that ran a minute starts over at
# 1 s. Restarts are scheduled, not slept: one program's backoff never delays another's restart.
while ((stopping == 0)); do
  stop_timer
  now_ms
  next=
  for name in "${!due[@]}"; do
    if ((due[$name] <= now)); then
      unset "due[$name]"
      start "$name"
    elif [[ -z $next ]] || ((due[$name] < next)); then
      next=${due[$name]}
    fi
  done
  if [[ -n $next ]]; then
    wait_ms=$((next - now))
    printf -v pause '%d.%03d' $((wait_ms / 1000)) $((wait_ms % 1000))
    sleep "$pause" &
    timer=$!
  fi
  exited=
  wait -n -p exited
  status=$?
  ((stopping)) && break
  [[ -n $exited && $exited == "$timer" ]] && { timer=; continue; }
  name=${name_of[$exited]:-}
  [[ -n $name ]] || continue
  unset "name_of[$exited]" "pid_of[$name]"
  if [[ $name == boxd ]] && ((status == 2)); then
    # clap's usage errors (unknown flag, bad BOXD_TOOLS value, ...) exit 2: the same arguments would fail
    # forever, so the container stops with boxd's message as its last words instead.
    echo "boxd-entrypoint: boxd rejected its configuration (exit status 2, message above); stopping the container" >&2
    stop_timer
    # TERM, not nginx's graceful QUIT: nginx has served nothing yet, and a QUIT arriving before nginx has
    # installed its handler would be ignored (background jobs start with it ignored) and hang `wait`.
    signal_all TERM TERM
    wait
    exit 2
  fi
  ((SECONDS - since[$name] >= 60)) && delay[$name]=1000
  echo "boxd-entrypoint: $name exited (status $status); restarting it in $((delay[$name] / 1000)) s" >&2
  now_ms
  due[$name]=$((now + delay[$name]))
  delay[$name]=$((delay[$name] * 2 > 30000 ? 30000 : delay[$name] * 2))
done
stop_timer
wait
