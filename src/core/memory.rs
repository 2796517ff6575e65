//! Gives freed memory back to the system once boxd is quiet. glibc's malloc keeps what a burst freed
//! (64 MiB uploads, 1000-entry listings, git walks) in its per-thread arenas: measured with the bench
//! workload, boxd's own RSS went from 11.7 MiB idle to 29 MiB and stayed there. `malloc_trim` returns
//! the free pages of every arena; it runs once no request has been in flight for a whole
//! [`TRIM_AFTER_QUIET`], after start-up and after each burst, so it never competes with a burst (and an
//! idle boxd with nothing to give back does not wake up for it).
//!
//! Most of an idle boxd's resident memory is not its heap but its own code: measured on the image's
//! static binary, 13 of 14.5 MiB were pages of the executable's text and read-only data, mapped because
//! start-up ran there (the command line's parser, every family's set-up, the router; a first request
//! adds ~4 MiB more) and the kernel maps 64 KiB around each page a fault touches.
//! [`release_code_pages`] unmaps them with each trim: they stay in the page cache (shared with the guard
//! and `boxd init`, which map the same file), and what runs again faults its pages back in from there (a
//! minor fault per 64 KiB).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long boxd must have been without a request in flight before it trims.
pub const TRIM_AFTER_QUIET: Duration = Duration::from_secs(1);

static REQUESTS_STARTED: AtomicU64 = AtomicU64::new(0);
static REQUESTS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// When a request last started or ended, in milliseconds since [`epoch`].
static LAST_ACTIVITY_MS: AtomicU64 = AtomicU64::new(0);
/// Wakes the trimmer when a request starts after a trim.
static REQUEST_STARTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn note_activity() {
    let now = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX);
    LAST_ACTIVITY_MS.store(now, Ordering::Relaxed);
}

fn since_last_activity() -> Duration {
    epoch().elapsed().saturating_sub(Duration::from_millis(
        LAST_ACTIVITY_MS.load(Ordering::Relaxed),
    ))
}

/// Held while a request is being handled.
pub struct Busy(());

impl Drop for Busy {
    fn drop(&mut self) {
        note_activity();
        REQUESTS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Marks a request in flight until the guard is dropped.
pub fn busy() -> Busy {
    note_activity();
    REQUESTS_STARTED.fetch_add(1, Ordering::Relaxed);
    REQUESTS_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
    REQUEST_STARTED.notify_one();
    Busy(())
}

/// The trimming task, started once start-up is done (which counts as the first burst): whenever
/// something happened since the last trim, it waits until no request has been in flight for
/// [`TRIM_AFTER_QUIET`], then trims once.
pub fn spawn_trimmer() {
    note_activity();
    tokio::spawn(async {
        let mut trimmed_at = None;
        loop {
            while trimmed_at == Some(REQUESTS_STARTED.load(Ordering::Relaxed)) {
                // A start between the load and this wait is not lost: `notify_one` keeps a permit.
                REQUEST_STARTED.notified().await;
            }
            loop {
                let quiet_for = since_last_activity();
                if REQUESTS_IN_FLIGHT.load(Ordering::Relaxed) == 0 && quiet_for >= TRIM_AFTER_QUIET
                {
                    break;
                }
                let rest = TRIM_AFTER_QUIET.saturating_sub(quiet_for);
                tokio::time::sleep(if rest.is_zero() {
                    TRIM_AFTER_QUIET
                } else {
                    rest
                })
                .await;
            }
            trimmed_at = Some(REQUESTS_STARTED.load(Ordering::Relaxed));
            // Trimming walks every arena under its lock: not on the async workers.
            let _ = tokio::task::spawn_blocking(trim).await;
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
    let released = release_code_pages();
    tracing::debug!(
        kib = released / 1024,
        "trimmed the heap; released the mapped pages of boxd's code"
    );
}

/// Unmaps the pages of the executable's code and read-only data this process has mapped (see the
/// module's note); returns how many bytes of mappings it covered. Only segments that are never written:
/// not the writable ones, not the relocated read-only one (`PT_GNU_RELRO`, whose pages are private
/// copies: unmapping them would bring back the unrelocated file), and nothing in a binary with text
/// relocations. Shared libraries (the test builds' glibc) are left alone.
pub fn release_code_pages() -> usize {
    let mut released = 0usize;
    // SAFETY: the callback reads only what dl_iterate_phdr hands it during the call, and `released`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(release_in_executable), (&raw mut released).cast()) };
    released
}

const DT_NULL: u64 = 0;
const DT_TEXTREL: u64 = 22;
const DT_FLAGS: u64 = 30;
const DF_TEXTREL: u64 = 0x4;

/// `dl_iterate_phdr`'s callback: the first object reported is the executable; it stops there.
unsafe extern "C" fn release_in_executable(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    released: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` for the duration of the call; `released` is the
    // `usize` that `release_code_pages` passed.
    let (info, released) = unsafe { (&*info, &mut *released.cast::<usize>()) };
    let count = usize::from(info.dlpi_phnum);
    if info.dlpi_phdr.is_null() || count == 0 {
        return 1;
    }
    // SAFETY: `dlpi_phdr` points at the object's `dlpi_phnum` program headers, mapped for its lifetime.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, count) };
    let base = info.dlpi_addr as usize;
    let in_memory = |header: &libc::Elf64_Phdr| {
        let start = base.wrapping_add(header.p_vaddr as usize);
        (start, start.saturating_add(header.p_memsz as usize))
    };
    let relocated: Vec<(usize, usize)> = headers
        .iter()
        .filter(|header| header.p_type == libc::PT_GNU_RELRO)
        .map(in_memory)
        .collect();
    if headers
        .iter()
        .filter(|header| header.p_type == libc::PT_DYNAMIC)
        .any(|header| has_text_relocations(in_memory(header)))
    {
        return 1;
    }
    // SAFETY: sysconf only reads a configuration value.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|page| page.is_power_of_two())
        .unwrap_or(4096);
    for header in headers
        .iter()
        .filter(|header| header.p_type == libc::PT_LOAD && header.p_flags & libc::PF_W == 0)
    {
        let (start, end) = in_memory(header);
        if relocated.iter().any(|&(from, to)| from < end && start < to) {
            continue;
        }
        // Whole pages inside the segment only: a page it shares with its neighbour is left mapped.
        let (start, end) = (start.next_multiple_of(page), end & !(page - 1));
        if end > start {
            // SAFETY: the range lies inside a read-only, never-relocated segment of this executable:
            // dropping its page-table entries loses nothing (the next access maps the same file page).
            if unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
            } == 0
            {
                *released = released.saturating_add(end - start);
            }
        }
    }
    1
}

/// Whether the dynamic section at `(start, end)` asks for text relocations (then code pages were
/// written, and must stay).
fn has_text_relocations((start, end): (usize, usize)) -> bool {
    let entries = end.saturating_sub(start) / std::mem::size_of::<[u64; 2]>();
    (0..entries)
        .map(|index| {
            // SAFETY: the dynamic section is mapped and readable for the executable's lifetime; the
            // index stays inside its size.
            unsafe { std::ptr::read_unaligned((start as *const [u64; 2]).add(index)) }
        })
        .take_while(|[tag, _]| *tag != DT_NULL)
        .any(|[tag, value]| tag == DT_TEXTREL || (tag == DT_FLAGS && value & DF_TEXTREL != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident_file_kib() -> Option<u64> {
        std::fs::read_to_string("/proc/self/status")
            .ok()?
            .lines()
            .find_map(|line| line.strip_prefix("RssFile:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// The executable's code and read-only data are released, and what runs next (relocated statics,
    /// vtables, string constants) still works: only pages that never differ from the file were dropped.
    #[test]
    fn code_pages_are_released_and_what_runs_after_still_works() {
        let before = resident_file_kib();
        let released = release_code_pages();
        assert!(released > 1024 * 1024, "released {released} bytes");
        let after = resident_file_kib();
        assert!(
            after < before,
            "resident file pages: {before:?} KiB before, {after:?} KiB after"
        );
        let text = format!("{:?}", serde_json::json!({"still": ["works", 1]}));
        assert!(text.contains("still"), "{text}");
        assert!(!has_text_relocations((0, 0)));
    }
}
