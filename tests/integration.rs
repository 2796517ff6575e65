//! Every integration test of boxd in one test binary: each file beside this one is a module (the file
//! named after the family or concern it tests). One crate instead of one per file: the shared helpers
//! (`common`) and the generic code of the dependencies (reqwest, tokio, serde_json) are compiled once,
//! not once per file, and the tests of all files share one harness. Filter by module:
//! `cargo test --release --test integration shell::`. The fault suite (`tests/faults`, all
//! `#[ignore]`) is here too and runs alone: `make faults`. `tests/layering.rs` reads the sources and runs
//! no boxd: a target of its own.

mod apply_patch;
mod child;
mod common;
mod confine;
mod confine_race;
mod connections;
#[path = "faults/main.rs"]
mod faults;
mod front;
mod git_watcher;
mod http_basics;
mod init;
mod ipython;
mod ipython_restart;
mod live;
mod live_limits;
mod load_limits;
mod mcp_hosting;
mod memory;
mod openai_shell;
mod output_bounds;
mod pool_init;
mod resource_limits;
mod run_setup;
mod sandboxd;
mod shell;
mod smoke;
mod text_editor;
mod workspace;
