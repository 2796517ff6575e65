//! Gives freed memory back to the system once boxd is quiet. glibc's malloc keeps what a burst freed
//! (64 MiB uploads, 1000-entry listings, git walks) in its per-thread arenas: measured with the bench
//! workload, boxd's own RSS went from 11.7 MiB idle to 29 MiB and stayed there. `malloc_trim` returns
//! the free pages of every arena; it runs on a timer, only after a request ended and none has been in
//! flight for a whole tick, so it never competes with a burst.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// How long boxd must have been without a request in flight before it trims.
pub const TRIM_AFTER_QUIET: Duration = Duration::from_secs(1);

static REQUESTS_STARTED: AtomicU64 = AtomicU64::new(0);
static REQUESTS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Held while a request is being handled.
pub struct Busy(());

impl Drop for Busy {
    fn drop(&mut self) {
        REQUESTS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Marks a request in flight until the guard is dropped.
pub fn busy() -> Busy {
    REQUESTS_STARTED.fetch_add(1, Ordering::Relaxed);
    REQUESTS_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
    Busy(())
}

/// The trimming task: each tick, if requests came since the last trim and none is in flight now (nor
/// was at the previous tick), trims once.
pub fn spawn_trimmer() {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(TRIM_AFTER_QUIET);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut trimmed_at = REQUESTS_STARTED.load(Ordering::Relaxed);
        let mut seen = trimmed_at;
        loop {
            tick.tick().await;
            let started = REQUESTS_STARTED.load(Ordering::Relaxed);
            let quiet = started == seen && REQUESTS_IN_FLIGHT.load(Ordering::Relaxed) == 0;
            seen = started;
            if quiet && started != trimmed_at {
                trimmed_at = started;
                // Trimming walks every arena under its lock: not on the async workers.
                let _ = tokio::task::spawn_blocking(trim).await;
            }
        }
    });
}

/// Arenas and the mmap threshold, set before any thread exists. glibc gives each thread that contends
/// an arena of its own (up to 8 per core), and each keeps its free memory; two arenas serve boxd's two
/// busy paths (the async workers and the blocking pool). The mmap threshold is fixed at glibc's own
/// dynamic maximum: buffers up to 32 MiB come from the arenas and are reused (a threshold of 256 KiB,
/// tried first, halved 1 MiB transfer speeds: every buffer was a fresh mapping to fault in), and the
/// quiet-time trim returns what a burst left.
pub fn configure_allocator() {
    // SAFETY: mallopt only sets malloc's parameters; called from `main` before other threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    }
}

const ARENAS: i32 = 2;
const MMAP_THRESHOLD_BYTES: i32 = 32 * 1024 * 1024;
/// Fixing the mmap threshold also fixes the trim threshold at its 128 KiB default: the heap would then
/// shrink and regrow around every zlib stream (~256 KiB of state per git object written), 8 `brk` calls
/// per object. Free memory at the top of the heap is kept up to this much while busy; the quiet-time
/// trim returns it.
const TRIM_THRESHOLD_BYTES: i32 = 8 * 1024 * 1024;

fn trim() {
    // SAFETY: malloc_trim only returns free pages of the allocator's own arenas to the kernel.
    unsafe { libc::malloc_trim(0) };
}
