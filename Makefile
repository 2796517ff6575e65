# boxd: `make run` builds and starts boxd on ./workspace; `make test` installs what it needs and tests.

PORT ?= 8000
# The kernel's interpreter; empty means .venv-kernel, which `make run` makes the first time (no root).
PYTHON ?=
TARGET := x86_64-unknown-linux-gnu
STATIC_BIN := target/$(TARGET)/release/boxd
# The container engine of the image targets: a Docker daemon that answers, else podman (installed and set
# up by scripts/container-setup.sh); scripts/container-engine.sh chooses and says why in one line. Chosen
# once, when an image target first needs it (other targets never run it); `make images ENGINE=...` wins.
ENGINE ?= $(eval ENGINE := $(shell ./scripts/container-engine.sh))$(ENGINE)
IMAGE_BASE ?= boxd-base:latest
# The sandbox images: boxd-TYPE:latest, each also tagged with the name the SDK's manager runs
# (docker.io/agentscope/runtime-sandbox-TYPE:latest; fully qualified, or podman would file it under localhost/).
IMAGE_TYPES := base gui browser filesystem mobile bfcl appworld
# AppWorld's task data for image-appworld: a path under images/ (see images/README.md); empty: none.
APPWORLD_DATA ?=
SDK_IMAGE_PREFIX ?= docker.io/agentscope/runtime-sandbox-
# The images ship the static binary at $(STATIC_BIN). `make images` builds it first (`make static`);
# SKIP_STATIC=1 uses the one already there (e.g. copied from another checkout) without touching cargo.
STATIC_DEP := $(if $(filter 1,$(SKIP_STATIC)),,static)

.PHONY: run build kernel-venv test setup lint format unit python-tests smoke-release fuzz fuzz-quick static \
	test-build setup-build \
	bench image-base \
	image-test clean load faults kube-manifests images image-gui image-browser image-filesystem \
	image-mobile image-base-node containers engine image-bfcl image-appworld

run: build
	@PORT='$(PORT)' PYTHON='$(PYTHON)' ./scripts/run.sh

# target/release/boxd, built by the test build's own command line (CARGO_TEST, below): the clippy wrapper
# and the features the dev-dependencies add are part of cargo's fingerprint, so after `make test` this
# compiles nothing and `make run` serves within seconds (a plain `cargo build --release` compiled boxd's
# crate again, and `make test` after it compiled it once more). Only the integration tests' target is
# asked for, the one that needs the binary: boxd's unit tests (its crate compiled a second time, as a
# test) are left to `make test`. Clippy is the compiler of boxd's own code here: added to the toolchain
# when missing (rustup, no root).
build:
	@rustup which clippy-driver >/dev/null 2>&1 || rustup component add clippy
	$(CARGO_TEST) --no-run -q --test integration

# The IPython kernel's venv `make run` uses (.venv-kernel, the base image's kernel packages); idempotent.
kernel-venv:
	@./scripts/kernel-venv.sh >/dev/null

# One build serves every test: the release profile, the one `make run` runs and, with fat LTO and static
# linking added, the images ship (overflow checks on, panics unwind). Built once with clippy as the
# compiler of this crate's own targets (RUSTC_WORKSPACE_WRAPPER and the deny-warnings argument, as `cargo
# clippy` itself passes them): the lint of `make lint` without a second build of every dependency in check
# mode. Crates already built are not linted again: on a clean checkout (CI) everything is; locally, `make
# lint` checks all. Every step below uses this same command line, so none rebuilds what another built.
CARGO_TEST = driver=$$(rustup which clippy-driver) && \
	RUSTC_WORKSPACE_WRAPPER="$$driver" CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ \
	cargo test --release
TESTED_BIN := $(CURDIR)/target/release/boxd

# The build starts once its own prerequisites are there; the rest of the set-up (Chromium, Xvfb, the
# venv, npm: downloads, mostly) and then the Kubernetes manifests' check run beside it. The tests follow.
test: setup-build format
	@$(MAKE) --no-print-directory -j2 test-build kube-manifests
	@$(MAKE) --no-print-directory -j1 unit python-tests fuzz-quick

test-build:
	$(CARGO_TEST) --no-run -q

setup:
	./scripts/setup.sh

setup-build:
	./scripts/setup.sh build

lint: format
	cargo clippy --all-targets -- -D warnings

format:
	cargo fmt --all -- --check

# The unit tests beside the code and the integration tests in tests/, which start the binary under test.
unit:
	$(CARGO_TEST)

# The real agentscope-runtime client against the same binary. `--no-run` (not `cargo build`) keeps the
# test build's feature set, so no dependency is compiled twice.
# Three pytest workers (pytest-xdist): most of these tests wait on a browser, a display, a kernel or a
# device, not on a core; every test starts its own boxd on free ports and its own display.
PYTEST_WORKERS ?= 3
python-tests: test-build
	BOXD_BIN=$(TESTED_BIN) .venv/bin/python -m pytest -q -rs -p no:cacheprovider -W ignore::DeprecationWarning \
		-n $(PYTEST_WORKERS) --durations=10 tests/python

# deploy/kubernetes/ checked offline: vendored agent-sandbox CRDs + kubernetes-validate's Kubernetes 1.37 schemas.
kube-manifests: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider tests/kubernetes

# A few fast checks of the release binary (`cargo test` runs them too; here alone, e.g. after `make build`).
smoke-release: test-build
	BOXD_BIN=$(TESTED_BIN) $(CARGO_TEST) -q --test integration smoke::

# The fault suite (tests/faults): kills, a full disk, floods, 200 000 files. Not part of `make test`: it runs
# as root (it mounts small tmpfs workspaces) and waits out server-side timeouts, for some minutes.
faults: setup
	$(CARGO_TEST) --test integration faults:: -- --ignored --test-threads=1 --nocapture

# schemathesis over docs/openapi.json against the release binary, as an unprivileged user on a scratch
# workspace, fixed seed, bounded examples (a few minutes): any 5xx, schema mismatch or dead server fails.
fuzz: build
	./scripts/fuzz.sh

# `make test`'s share of it: the same run with 100 examples per operation and phase and two schemathesis
# workers (~100 s, not ~5 min), on the binary the other tests ran.
fuzz-quick: test-build
	BOXD_BIN=$(TESTED_BIN) FUZZ_EXAMPLES=100 FUZZ_WORKERS=2 ./scripts/fuzz.sh

# Fully static release binary (glibc static-pie), with fat LTO: what images ship. The crates below are
# optimised for size: each serves a cold path (the MCP protocol's framing, HTTP/2 of the gRPC listener,
# regex compilation, flag parsing, `boxd launch`'s Docker client, the adb key's signature, schemas, logs).
# Together 0.8 MB less binary (23.92 -> 23.13 MB), which keeps the base image in its 200 MB budget
# (issue #46). The hot paths (tokio, hyper, axum, serde_json, libgit2, the image codecs) keep the release
# profile's level.
SIZE_OPTIMISED_CRATES := rmcp h2 regex-syntax fancy-regex clap_builder bollard bollard-stubs crypto-bigint \
	rsa schemars reqwest tonic prost url tracing-subscriber
#
# The functions a start runs until its first answer come first in the code, in the order of
# `scripts/start-order.txt` (the linker's symbol ordering; `scripts/start-order.py` writes it from a start
# under callgrind): scattered over the 18 MB of code they cost ~110 more page faults, ~0.6 ms of a 4 ms
# start. The names in that file carry hashes of each crate's build settings, so the build keeps its
# symbols (the release profile's `strip` would change those settings) and a stripped copy replaces
# $(STATIC_BIN) after it (which is a hard link to cargo's own artifact: stripped in place, that would
# lose its symbols too); KEEP_SYMBOLS=1 leaves them, for the script. A name the code no longer has is
# skipped. Cargo does not track the order file: a new one takes effect once boxd is linked again.
START_ORDER := $(CURDIR)/scripts/start-order.txt
static:
	CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=none \
	RUSTFLAGS="-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs -C link-arg=-Wl,--symbol-ordering-file=$(START_ORDER) -C link-arg=-Wl,--no-warn-symbol-ordering" \
	  cargo build --release --target $(TARGET) \
	  $(foreach crate,$(SIZE_OPTIMISED_CRATES),--config 'profile.release.package."$(crate)".opt-level="s"')
	$(if $(KEEP_SYMBOLS),,strip -o $(STATIC_BIN).stripped $(STATIC_BIN) && mv -f $(STATIC_BIN).stripped $(STATIC_BIN))
	file $(STATIC_BIN)
	@ls -l $(STATIC_BIN)

# Podman made to work on this machine (no Docker engine, no systemd, no image registry): packages,
# configuration, a local debian:bookworm-slim, the API socket. Idempotent; under a second once done.
containers:
	$(if $(ENGINE),,@exit 1)
	$(if $(filter podman,$(notdir $(ENGINE))),./scripts/container-setup.sh,@echo "containers: ENGINE=$(ENGINE), not podman: nothing set up")

# Which engine the image targets would use, and why (nothing is built or set up).
engine:
	@$(if $(ENGINE),echo "ENGINE=$(ENGINE)",exit 1)

# The images, with ENGINE (a Docker daemon that answers, else podman). Each one starts FROM the one before
# it: base -> gui -> browser, filesystem; base -> mobile, base-node.
define build_image # TYPE, FROM-image build argument
	$(ENGINE) build -f images/$(1)/Dockerfile $(2) -t boxd-$(1):latest .
	$(if $(filter $(1),$(IMAGE_TYPES)),$(ENGINE) tag boxd-$(1):latest $(SDK_IMAGE_PREFIX)$(1):latest)
endef

image-base: containers $(STATIC_DEP)
	$(ENGINE) build -f images/base/Dockerfile -t $(IMAGE_BASE) .
	$(ENGINE) tag $(IMAGE_BASE) $(SDK_IMAGE_PREFIX)base:latest
image-gui: containers image-base
	$(call build_image,gui,--build-arg BASE=$(IMAGE_BASE))
image-browser: containers image-gui
	$(call build_image,browser,--build-arg GUI=boxd-gui:latest)
image-filesystem: containers image-gui
	$(call build_image,filesystem,--build-arg GUI=boxd-gui:latest)
image-mobile: containers image-base
	$(call build_image,mobile,--build-arg BASE=$(IMAGE_BASE))
# The training images (TrainingSandbox): BFCL, and AppWorld with its task data only from APPWORLD_DATA.
image-bfcl: containers image-base
	$(call build_image,bfcl,--build-arg BASE=$(IMAGE_BASE))
image-appworld: containers image-base
	$(call build_image,appworld,--build-arg BASE=$(IMAGE_BASE) --build-arg APPWORLD_DATA=$(APPWORLD_DATA))
# The base image plus Node (npm, npx) for users' own Node MCP servers; not one of the SDK's types.
image-base-node: containers image-base
	$(call build_image,base-node,--build-arg BASE=$(IMAGE_BASE))

# All of them, then the layers no tag uses any more (each rebuild leaves the previous ones dangling).
images: containers image-base image-gui image-browser image-filesystem image-mobile image-bfcl image-appworld
	@# Podman's prune can trip over a layer another build still references ("image not known"): it only
	@# leaves dangling layers, so it is reported, not fatal; every image above is built and tagged.
	$(ENGINE) image prune -f >/dev/null || echo "images: podman image prune failed; the dangling layers stay"
	$(ENGINE) images --filter reference='boxd-*'

# Runs every image as the manager does (port 80 on 127.0.0.1, SECRET_TOKEN, NGINX_TIMEOUT, the workspace
# bind-mounted) and drives it through boxd on port 80 with the real client bound as the SDK's classes, prints
# sizes and start-up times, checks that tenant code finds the token nowhere (issue #33); then the SDK's own
# SandboxManager runs each one through podman's socket (20 starts per type: none may pay the SDK's 1 s
# health retry, issue #36). Podman only for the manager steps. Not part of `make test`.
image-test: containers setup images
	.venv/bin/python tests/image/test_base_image.py --engine $(ENGINE) --image $(IMAGE_BASE)
	.venv/bin/python tests/image/test_images.py --engine $(ENGINE)
	.venv/bin/python tests/image/test_sdk_manager.py
	.venv/bin/python tests/image/test_training_images.py --engine $(ENGINE)
	.venv/bin/python tests/image/test_launch.py --boxd $(STATIC_BIN) --image $(IMAGE_BASE) --every-type

# boxd against the upstream Python server, side by side, one run; not part of `make test`.
# The binary the images ship (fat LTO, static): its code pages are part of the memory figures.
BENCH_BIN ?= $(STATIC_BIN)
bench: static setup
	./bench/setup.sh
	python3 bench/run.py --boxd $(BENCH_BIN)
	python3 bench/kernel_restart.py --boxd $(BENCH_BIN)
	python3 bench/computer.py --boxd $(BENCH_BIN)
	python3 bench/mobile.py --boxd $(BENCH_BIN)
	python3 bench/browser.py --boxd $(BENCH_BIN)
	python3 bench/training.py --boxd $(BENCH_BIN)
	.venv/bin/python bench/k8s_sdk.py --boxd $(BENCH_BIN)
	.venv/bin/python bench/agent_toolset.py --boxd $(BENCH_BIN)

# The issue #15 request mix with wrk (Debian package `wrk`) against a release boxd at 1, 64 and 512
# connections; DURATION (30s) per level, LEVELS to choose them. Not part of `make test`.
DURATION ?= 30s
LEVELS ?= 1 64 512
load: build
	DURATION='$(DURATION)' LEVELS='$(LEVELS)' ./scripts/load.sh

clean:
	cargo clean
