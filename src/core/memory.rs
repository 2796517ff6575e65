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
    code_ranges(Objects::Executable)
        .into_iter()
        .filter(|&(start, length)| {
            // SAFETY: the range lies inside a read-only, never-relocated segment of this executable:
            // dropping its page-table entries loses nothing (the next access maps the same file page).
            unsafe { libc::madvise(start as *mut libc::c_void, length, libc::MADV_DONTNEED) == 0 }
        })
        .fold(0usize, |released, (_, length)| {
            released.saturating_add(length)
        })
}

/// Whose code [`code_ranges`] names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Objects {
    Executable,
    /// The executable's and every shared library's (not the vDSO's).
    All,
}

/// The whole pages of code and read-only data of `objects` that are never written (see
/// [`release_code_pages`]), as (start, length).
fn code_ranges(objects: Objects) -> Vec<(usize, usize)> {
    let mut found = Found {
        objects,
        seen: 0,
        ranges: Vec::new(),
    };
    // SAFETY: the callback reads only what dl_iterate_phdr hands it during the call, and `found`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(collect_code_ranges), (&raw mut found).cast()) };
    found.ranges
}

/// What [`collect_code_ranges`] is given and fills.
struct Found {
    objects: Objects,
    /// Objects reported so far: the first is the executable.
    seen: usize,
    ranges: Vec<(usize, usize)>,
}

const DT_NULL: u64 = 0;
const DT_TEXTREL: u64 = 22;
const DT_FLAGS: u64 = 30;
const DF_TEXTREL: u64 = 0x4;

/// `dl_iterate_phdr`'s callback: the first object reported is the executable; with
/// [`Objects::Executable`] it stops there.
unsafe extern "C" fn collect_code_ranges(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    found: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` for the duration of the call; `found` is the
    // `Found` that `code_ranges` passed.
    let (info, found) = unsafe { (&*info, &mut *found.cast::<Found>()) };
    // Non-zero stops the iteration: with the executable alone, after the first object.
    let stop = libc::c_int::from(found.objects == Objects::Executable);
    let is_executable = found.seen == 0;
    found.seen = found.seen.saturating_add(1);
    let ranges = &mut found.ranges;
    // A library is named by its path; the vDSO (`linux-vdso.so.1`) is the kernel's, not a file's.
    // SAFETY: a non-null `dlpi_name` is a NUL-terminated string valid during the call.
    let is_file = is_executable
        || (!info.dlpi_name.is_null() && unsafe { *info.dlpi_name } == b'/' as libc::c_char);
    let count = usize::from(info.dlpi_phnum);
    if info.dlpi_phdr.is_null() || count == 0 || !is_file {
        return stop;
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
        return stop;
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
            ranges.push((start, end - start));
        }
    }
    stop
}

/// For a process that only waits from now on (boxd's guard): unmaps the pages of code and read-only
/// data of the executable and of every shared library (as [`release_code_pages`] does for the
/// executable), then reads `fd` until end of file, and answers how the read ended.
///
/// Where it goes, code pages cost resident memory in 128 KiB steps: each fault on a file mapping maps
/// the whole folio (or fault-around window) around the page, so a wait that returned to Rust code after
/// the release (a `read` wrapper, the loop, the caller) mapped ~900 KiB of it back. Here the release and
/// the wait are one block of instructions that calls nothing and reads no constant: the only code
/// mapped during the wait is the folio around that block.
pub fn release_code_pages_and_wait(fd: i32) -> std::io::Result<()> {
    let ranges = code_ranges(Objects::All);
    let mut scratch = [0u8; 64];
    let result = release_and_read_until_end(&ranges, fd, &mut scratch);
    match result {
        0 => Ok(()),
        error => Err(std::io::Error::from_raw_os_error(
            i32::try_from(error.unsigned_abs()).unwrap_or(libc::EIO),
        )),
    }
}

/// `madvise(MADV_DONTNEED)` on each range, then `read(fd)` into `scratch` until it answers 0 (end of
/// file: 0) or fails other than `EINTR` (the negative errno), with system calls only.
#[cfg(target_arch = "x86_64")]
fn release_and_read_until_end(ranges: &[(usize, usize)], fd: i32, scratch: &mut [u8; 64]) -> i64 {
    let result: i64;
    // SAFETY: each range is whole pages of a never-written segment (see `code_ranges`): dropping their
    // page-table entries loses nothing. `read` writes at most 64 bytes into `scratch`. The block uses
    // only the registers it declares and no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "test {count}, {count}",
            "jz 3f",
            "mov eax, {madvise}",
            "mov rdi, [{ranges}]",
            "mov rsi, [{ranges} + 8]",
            "mov edx, {dontneed}",
            "syscall",
            "add {ranges}, 16",
            "dec {count}",
            "jmp 2b",
            "3:",
            "mov eax, {read}",
            "mov edi, {fd:e}",
            "mov rsi, {scratch}",
            "mov edx, 64",
            "syscall",
            "test rax, rax",
            "jg 3b",
            "cmp rax, -{eintr}",
            "je 3b",
            ranges = inout(reg) ranges.as_ptr() => _,
            count = inout(reg) ranges.len() => _,
            fd = in(reg) fd,
            scratch = in(reg) scratch.as_mut_ptr(),
            madvise = const libc::SYS_madvise,
            dontneed = const libc::MADV_DONTNEED,
            read = const libc::SYS_read,
            eintr = const libc::EINTR,
            out("rax") result,
            out("rdi") _,
            out("rsi") _,
            out("rdx") _,
            out("rcx") _,
            out("r11") _,
            options(nostack),
        );
    }
    result
}

/// Elsewhere: the same through the C library (whose code, and the loop's, is mapped back during the
/// wait).
#[cfg(not(target_arch = "x86_64"))]
fn release_and_read_until_end(ranges: &[(usize, usize)], fd: i32, scratch: &mut [u8; 64]) -> i64 {
    for &(start, length) in ranges {
        // SAFETY: as for x86_64 above.
        unsafe { libc::madvise(start as *mut libc::c_void, length, libc::MADV_DONTNEED) };
    }
    loop {
        // SAFETY: read writes at most `scratch.len()` bytes into `scratch`.
        let read = unsafe { libc::read(fd, scratch.as_mut_ptr().cast(), scratch.len()) };
        match read {
            0 => return 0,
            read if read > 0 => continue,
            _ => {
                let errno = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if errno != libc::EINTR {
                    return -i64::from(errno);
                }
            }
        }
    }
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

    /// The guard's wait: data on the pipe is read past, end of file ends it, a descriptor that cannot be
    /// read is an error; code runs on after the release.
    #[test]
    fn the_wait_ends_at_end_of_file_and_fails_on_a_bad_descriptor() {
        let mut ends = [-1; 2];
        // SAFETY: pipe fills the two descriptors it creates.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        // SAFETY: writes 3 bytes from a live buffer, then closes the write end, which is ours.
        unsafe {
            assert_eq!(libc::write(ends[1], b"abc".as_ptr().cast(), 3), 3);
            libc::close(ends[1]);
        }
        assert!(release_code_pages_and_wait(ends[0]).is_ok());
        // SAFETY: the read end is ours.
        unsafe { libc::close(ends[0]) };
        let err = release_code_pages_and_wait(-1).expect_err("fd -1 cannot be read");
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{err}");
        assert!(code_ranges(Objects::All).len() >= code_ranges(Objects::Executable).len());
    }
}
