#!/usr/bin/env bash
# Makes this machine build and run boxd's images with rootful podman, where there is no Docker engine, no
# systemd and no image registry to pull from (only Debian's package mirror, PyPI, npm and crates.io):
#   1. installs podman and runc (and debootstrap, uidmap, iptables for port mapping) from Debian;
#   2. configures podman for a machine without systemd: cgroupfs, a file events log, runc, a storage
#      driver that works here, rlimits no higher than this host allows, and the host's CA bundle mounted
#      into every build and run container (package registries may be reached through TLS interception);
#   3. provides docker.io/library/debian:bookworm-slim, which images/base/Dockerfile starts FROM, by
#      building it with debootstrap from the Debian mirror apt already uses, when podman does not have it;
#   4. starts `podman system service` on /run/podman/podman.sock (Docker's API: the SDK's manager, `boxd
#      launch`) unless something already answers there, and prints the DOCKER_HOST to use.
# Idempotent: a second run changes nothing and takes well under a second. `make images` runs it first.
# Needs root (it re-runs itself with sudo otherwise). Environment: BASE_IMAGE, PODMAN_SOCKET, HOST_CA.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "container-setup: run it as root" >&2; exit 1; }
  exec sudo BASE_IMAGE="${BASE_IMAGE:-}" PODMAN_SOCKET="${PODMAN_SOCKET:-}" HOST_CA="${HOST_CA:-}" "$0" "$@"
fi

BASE_IMAGE=${BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
SOCKET=${PODMAN_SOCKET:-/run/podman/podman.sock}
HOST_CA=${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}
CONF_DIR=/etc/containers
SERVICE_PID=/run/podman/boxd-service.pid
SERVICE_LOG=/var/log/podman-service.log
say() { echo "container-setup: $*"; }
changed=0      # set when this run installed, wrote or started anything
conf_changed=0 # set when it rewrote podman's configuration

# --- 1. packages --------------------------------------------------------------------------------------
# No recommends: podman's pull in dbus-user-session (systemd) and buildah. Rootful podman needs neither
# slirp4netns nor crun (crun fails on this kernel's hybrid cgroups); uidmap serves --userns if asked for.
packages=(podman runc conmon uidmap iptables debootstrap curl ca-certificates)
missing=()
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  # Several set-up scripts may share the machine: one apt at a time.
  flock /tmp/apt.lock apt-get update -qq
  DEBIAN_FRONTEND=noninteractive flock /tmp/apt.lock \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  changed=1
fi

# --- 2. configuration ---------------------------------------------------------------------------------
# Writes $1 from stdin only when its content differs (a user's own file is kept once as $1.orig).
put() {
  local file=$1 new
  new=$(cat)
  [[ -f $file && $(cat "$file") == "$new" ]] && return 0
  [[ -f $file && ! -f $file.orig ]] && ! grep -q '^# Written by boxd' "$file" && cp -p "$file" "$file.orig"
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "$new" > "$file"
  say "wrote $file"
  changed=1 conf_changed=1
}

# The storage driver: keep the one already configured or in use (podman refuses to open a store under
# another driver); otherwise overlay if this kernel mounts it on /var/lib/containers' file system, else
# overlay through fuse-overlayfs if /dev/fuse is there, else vfs (slow, big, but works anywhere).
conf_value() { # the first `$1 = "value"` in storage.conf
  [[ -f $CONF_DIR/storage.conf ]] \
    && sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$CONF_DIR/storage.conf" | sed -n 1p
}
driver=$(conf_value driver || true)
mount_program=$(conf_value mount_program || true)
if [[ -z $driver ]]; then
  for d in overlay vfs; do [[ -d /var/lib/containers/storage/$d-images ]] && driver=$d && break; done
fi
if [[ -z $driver ]]; then
  mkdir -p /var/lib/containers
  probe=$(mktemp -d /var/lib/containers/.overlay-probe.XXXXXX)
  mkdir "$probe"/{lower,upper,work,merged}
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" 2>/dev/null; then
    umount "$probe/merged"
    driver=overlay
  elif [[ -c /dev/fuse ]]; then
    dpkg-query -W -f='${Status}' fuse-overlayfs 2>/dev/null | grep -q 'ok installed' \
      || DEBIAN_FRONTEND=noninteractive flock /tmp/apt.lock apt-get install -y -qq --no-install-recommends fuse-overlayfs >/dev/null
    driver=overlay mount_program=/usr/bin/fuse-overlayfs
  else
    driver=vfs
  fi
  rm -rf "$probe"
fi
overlay_options=""
[[ -z $mount_program ]] || overlay_options=$(printf '\n[storage.options.overlay]\nmount_program = "%s"' "$mount_program")
put "$CONF_DIR/storage.conf" <<EOF
# Written by boxd's scripts/container-setup.sh (the driver is chosen once: changing it orphans every image).
[storage]
driver = "$driver"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"$overlay_options
EOF

# rlimits: podman asks runc for nofile and nproc 1048576 by default, which fails ("error setting rlimits ...
# operation not permitted") where root may not raise its hard limits, as here. Ask for what podman's own
# process has instead: this host's hard nofile, and its hard nproc but at most 32768 (podman 4.3 runs with
# nproc 32768 here even where its caller has more, and a container cannot go beyond podman's limit).
capped() { local v; v=$(ulimit "$1"); [[ $v == unlimited ]] && v=$2; echo $((v < $2 ? v : $2)); }
nofile=$(capped -Hn 1048576)
nproc=$(capped -Hu 32768)
limits=("\"nofile=$nofile:$nofile\"" "\"nproc=$nproc:$nproc\"")
# The host's CA bundle, read-only at /run/host-ca.crt in every container (RUN steps included), with pip's and
# npm's global configs and the usual variables pointing at it: pip and npm in a Dockerfile work unchanged
# behind a TLS-intercepting proxy, and nothing of it is baked into an image.
put "$CONF_DIR/boxd-ca/pip.conf" <<'EOF'
[global]
cert = /run/host-ca.crt
EOF
put "$CONF_DIR/boxd-ca/npmrc" <<'EOF'
cafile=/run/host-ca.crt
EOF
ca_env=()
for v in SSL_CERT_FILE PIP_CERT REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS CARGO_HTTP_CAINFO; do
  ca_env+=("\"$v=/run/host-ca.crt\"")
done
join() { local IFS=',' s; s="$*"; echo "${s//,/, }"; }
put "$CONF_DIR/containers.conf" <<EOF
# Written by boxd's scripts/container-setup.sh: rootful podman on a machine without systemd.
[containers]
default_ulimits = [$(join "${limits[@]}")]
volumes = ["$HOST_CA:/run/host-ca.crt:ro", "$CONF_DIR/boxd-ca/pip.conf:/etc/pip.conf:ro", "$CONF_DIR/boxd-ca/npmrc:/etc/npmrc:ro"]
env = [$(join "${ca_env[@]}")]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF

# --- 3. the base image --------------------------------------------------------------------------------
# The first Debian mirror apt uses for bookworm itself, from one-line (.list) or deb822 (.sources) files.
debian_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk '{ sub(/\[[^]]*\]/, "") } $1 == "deb" && $3 == "bookworm" { print $2; exit }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk 'function flush() { if (deb && on && bookworm && uri != "") print uri; deb = bookworm = 0; on = 1; uri = "" }
         BEGIN { on = 1 }
         /^[[:space:]]*$/ { flush(); next }
         /^#/ { next }
         tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
         tolower($1) == "enabled:" { on = ($2 != "no") }
         tolower($1) == "uris:" { uri = $2 }
         tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm") bookworm = 1 }
         END { flush() }' "$f"
  done
}
security_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^][:space:]]*debian-security[^][:space:]]*' | head -1 || true
}

if ! podman image exists "$BASE_IMAGE"; then
  mirror=$(debian_mirror | sed -n 1p)
  [[ -n $mirror ]] || { say "no Debian bookworm mirror in /etc/apt/sources.list*"; exit 1; }
  rootfs=$(mktemp -d /var/tmp/boxd-bookworm.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  say "building $BASE_IMAGE with debootstrap from $mirror (a few minutes)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log"; exit 1; }
  rm -f "$rootfs.log"
  # Made like the published slim image: apt lists, caches, man pages, locales and docs (but copyrights) gone,
  # dpkg told to leave them out of every later install, apt cleaning its caches after each; deb822 sources.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/etc/apt/sources.list
  find "$rootfs"/usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete # licences stay
  find "$rootfs"/usr/share/doc -mindepth 1 -depth -type d -empty -delete
  mkdir -p "$rootfs"/var/log/apt
  cat > "$rootfs"/etc/dpkg/dpkg.cfg.d/docker <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
  cat > "$rootfs"/etc/apt/apt.conf.d/docker-clean <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' > "$rootfs"/etc/apt/apt.conf.d/docker-no-languages
  security=$(security_mirror)
  stanza() { printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$1" "$2"
             printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'; }
  {
    stanza "$mirror" "bookworm bookworm-updates"
    [[ -z $security ]] || { echo; stanza "$security" bookworm-security; }
  } > "$rootfs"/etc/apt/sources.list.d/debian.sources
  # A local stand-in, not Docker Hub's image: the label says so (`podman inspect`).
  tar -C "$rootfs" --numeric-owner -c . \
    | podman import -q --change 'CMD ["bash"]' --change 'LABEL org.boxd.debootstrap=bookworm' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  say "$BASE_IMAGE: $(podman image inspect --format '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"
  changed=1
fi

# --- 4. the Docker-compatible API socket --------------------------------------------------------------
ping() { [[ $(curl -s --max-time 2 --unix-socket "$SOCKET" http://d/_ping 2>/dev/null) == OK ]]; }
ours() { # the service this script started last, still running
  [[ -f $SERVICE_PID ]] && tr '\0' ' ' < "/proc/$(cat "$SERVICE_PID")/cmdline" 2>/dev/null \
    | grep -qF "system service --time=0 unix://$SOCKET"
}
# A service this script started before a configuration change reads the old one: restart it.
if ((conf_changed)) && ours && ping; then
  say "restarting podman system service (pid $(cat "$SERVICE_PID")) for the new configuration"
  kill "$(cat "$SERVICE_PID")"
  for _ in $(seq 50); do ping || break; sleep 0.1; done
elif ((conf_changed)) && ping; then
  say "note: the podman service answering on $SOCKET was not started here: restart it to apply the new configuration"
fi
if ! ping; then
  mkdir -p "$(dirname "$SOCKET")"
  rm -f "$SOCKET" # a stale one left by a service that died
  setsid podman system service --time=0 "unix://$SOCKET" >>"$SERVICE_LOG" 2>&1 < /dev/null &
  echo $! > "$SERVICE_PID"
  for _ in $(seq 100); do ping && break; sleep 0.1; done # 100 tries 0.1 s apart (each at most 2 s)
  ping || { say "podman system service did not answer on $SOCKET within 10 s; see $SERVICE_LOG"; exit 1; }
  say "podman system service started (pid $(cat "$SERVICE_PID"), log $SERVICE_LOG)"
  changed=1
fi

# After a change, prove that a container runs (runc, storage, rlimits, the CA mount) before anyone builds.
if ((changed)); then
  podman run --rm --network none "$BASE_IMAGE" sh -c 'test -f /etc/debian_version && test -s /run/host-ca.crt' \
    || { say "a test container failed to run from $BASE_IMAGE"; exit 1; }
fi
say "ready: podman $(podman version --format '{{.Client.Version}}') with runc," \
  "storage $driver${mount_program:+ (fuse-overlayfs)}, $BASE_IMAGE local"
echo "DOCKER_HOST=unix://$SOCKET"
