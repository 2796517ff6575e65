#!/usr/bin/env bash
# Which container engine `make images` (and `make image-test`) use, when ENGINE is not given: prints its
# name on stdout and, on stderr, one line saying which and why. A `docker` client alone is not an engine
# (a machine image may ship one without a daemon): Docker is chosen only when its daemon answers
# (`docker version` reaches it) within a few seconds, and is not podman's own Docker API (a DOCKER_HOST
# pointing at podman's socket: then podman is used directly).
# Otherwise podman, which scripts/container-setup.sh installs when missing and configures (as root, or
# through sudo). Neither possible: one line naming the fix on stderr, nothing on stdout, exit 1.
#
# Env: ENGINE_PROBE_SECONDS (5), how long the daemon may take to answer.
set -uo pipefail
probe_seconds=${ENGINE_PROBE_SECONDS:-5}
say() { echo "images: $*" >&2; }
# An executable of that name on PATH (bash's `command -v` also names a file that is not executable).
have() { local path; path=$(type -P "$1") && [[ -x $path ]]; }

docker_state="no docker client"
if have docker; then
  # The server's components: "Engine containerd runc ..." from Docker, "Podman Engine ..." from podman.
  if server=$(timeout --kill-after=2 "$probe_seconds" docker version \
    --format '{{range .Server.Components}}{{.Name}} {{end}}' 2>/dev/null); then
    if [[ $server == *Podman* ]] && have podman; then
      docker_state="the docker client talks to podman's Docker API"
    else
      say "ENGINE=docker (its daemon answers; \`make images ENGINE=podman\` uses podman instead)"
      echo docker
      exit 0
    fi
  else
    docker_state="a docker client without a daemon that answers"
    docker_state+=" (\`docker version\` failed or took over ${probe_seconds} s)"
  fi
fi

if [[ $(id -u) -eq 0 ]] || have sudo; then
  if have podman; then
    say "ENGINE=podman ($docker_state; podman set up by scripts/container-setup.sh)"
  elif have apt-get; then
    say "ENGINE=podman ($docker_state; scripts/container-setup.sh installs and sets up podman)"
  else
    say "no container engine: $docker_state, no podman, and no apt-get to install it; fix: start" \
      "Docker's daemon (\`docker version\` must show its server) or install podman, then \`make images\`"
    exit 1
  fi
  echo podman
  exit 0
fi
say "no container engine: $docker_state, and podman's set-up (scripts/container-setup.sh) needs root or" \
  "sudo; fix: start Docker's daemon (\`docker version\` must show its server) or run \`make images\` as root"
exit 1
