//! What every family stands on and no family owns: errors and their statuses, health, ownership of a
//! shared resource, deadlines, child supervision, the table of live processes, path confinement,
//! staged writes, UTF-8 boundaries, memory, the claim, connections' peers. Nothing here imports anything above it.

pub mod child;
pub mod claim;
pub mod confine;
pub mod deadline;
pub mod entry;
pub mod error;
pub mod file_size;
pub mod health;
pub mod live;
pub mod memory;
pub mod owner;
pub mod peer;
pub mod staging;
pub mod ticket;
pub mod utf8;
