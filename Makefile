# boxd: `make run` builds and starts boxd on ./workspace; `make test` installs what it needs and tests.

PORT ?= 8000
# The kernel's interpreter; empty means .venv-kernel, which `make run` makes the first time (no root).
PYTHON ?=
TARGET := x86_64-unknown-linux-gnu
STATIC_BIN := target/$(TARGET)/release/boxd
ENGINE ?= $(shell command -v podman || command -v docker)
IMAGE_BASE ?= boxd-base:latest

.PHONY: run build kernel-venv test setup lint unit python-tests smoke-release fuzz static bench image-base \
	image-test clean

run: build
	@PORT='$(PORT)' PYTHON='$(PYTHON)' ./scripts/run.sh

build:
	cargo build --release

# The IPython kernel's venv `make run` uses (.venv-kernel, the base image's kernel packages); idempotent.
kernel-venv:
	@./scripts/kernel-venv.sh >/dev/null

test: setup lint unit python-tests smoke-release fuzz

setup:
	./scripts/setup.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

unit:
	cargo test

# The real agentscope-runtime client against the debug binary `cargo test` builds. `--no-run` (not
# `cargo build`) keeps the test build's feature set, so CI does not compile every dependency twice.
python-tests:
	cargo test --no-run -q
	.venv/bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/python

# A smoke subset against the release binary: its profile differs from the debug one the tests above use.
smoke-release: build
	BOXD_BIN=$(CURDIR)/target/release/boxd cargo test -q --test smoke

# schemathesis over docs/openapi.json against the release binary, as an unprivileged user on a scratch
# workspace, fixed seed, bounded examples (a few minutes): any 5xx, schema mismatch or dead server fails.
fuzz: build
	./scripts/fuzz.sh

# Fully static release binary (glibc static-pie), with fat LTO: what images ship.
static:
	CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
	RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --target $(TARGET)
	file $(STATIC_BIN)
	@ls -l $(STATIC_BIN)

# The base image (podman or docker; here: ../shared/tools/container-setup.sh makes podman work).
image-base: static
	$(ENGINE) build -f images/base/Dockerfile -t $(IMAGE_BASE) .

# Runs the base image as the manager does and drives it with the real client. Not part of `make test`.
image-test: setup image-base
	.venv/bin/python tests/image/test_base_image.py --engine $(ENGINE) --image $(IMAGE_BASE)

# boxd against the upstream Python server, side by side, one run; not part of `make test`.
bench: build
	./bench/setup.sh
	python3 bench/run.py

clean:
	cargo clean
