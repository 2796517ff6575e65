#!/usr/bin/env bash
# Regenerates src/sandboxd/generated/ (the Rust code and the descriptor set for server reflection) from
# src/sandboxd/proto/process/v1/process.proto. The output is checked in, so a build of boxd compiles
# neither protoc nor prost-build (CI builds from scratch: issue #35); run this after changing the proto.
# It builds a throwaway crate with tonic-prost-build and a vendored protoc (protoc-bin-vendored), so
# nothing is needed on the machine but cargo and crates.io.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
cat > "$work/Cargo.toml" <<'TOML'
[package]
name = "gen-sandboxd-proto"
version = "0.0.0"
edition = "2024"
publish = false

[build-dependencies]
tonic-prost-build = "=0.14.9"
protoc-bin-vendored = "=3.3.0"
TOML
echo 'fn main() {}' > "$work/src/main.rs"
cat > "$work/build.rs" <<'RUST'
fn main() {
    let repo = std::path::PathBuf::from(std::env::var("BOXD_REPO").unwrap());
    let out = repo.join("src/sandboxd/generated");
    let protoc = protoc_bin_vendored::protoc_bin_path().unwrap();
    let include = protoc_bin_vendored::include_path().unwrap();
    // SAFETY: a build script is single-threaded.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // No `connect` helper: boxd's tests dial with tonic's Endpoint themselves.
        .build_transport(false)
        .out_dir(&out)
        .file_descriptor_set_path(out.join("process_descriptor.bin"))
        .compile_protos(
            &[repo.join("src/sandboxd/proto/process/v1/process.proto")],
            &[repo.join("src/sandboxd/proto"), include],
        )
        .unwrap();
}
RUST
mkdir -p src/sandboxd/generated
BOXD_REPO=$repo CARGO_TARGET_DIR="$work/target" cargo build --quiet --manifest-path "$work/Cargo.toml"
ls -l src/sandboxd/generated
