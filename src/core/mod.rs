//! What every family stands on and no family owns: the error type (plain data: `api` turns it into an
//! answer), health, ownership of a shared resource, a concurrency cap (admission), deadlines, child
//! supervision, the table of live processes, whether a client has come, when the background start may
//! begin, path confinement, staged writes, UTF-8 boundaries, memory, the claim, connections' peers,
//! fresh secrets. Nothing here imports anything above it, nor the HTTP framework (`tests/layering.rs`
//! checks both).

pub mod admission;
pub mod child;
pub mod claim;
pub mod confine;
pub mod deadline;
pub mod entry;
pub mod error;
pub mod file_size;
pub mod first_request;
pub mod footprint;
pub mod health;
pub mod latch;
pub mod live;
pub mod memory;
pub mod owner;
pub mod peer;
pub mod secret;
pub mod staging;
pub mod start_gate;
pub mod ticket;
pub mod utf8;
