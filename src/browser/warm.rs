//! The browser's files read ahead at boxd's start, without starting the browser. On a cold page cache
//! (a fresh container, a host that has not run Chromium lately) the first browser call otherwise waits
//! for the disk: measured here after a cache drop, the headless shell's first page load took 412 ms
//! from a cold start, 252 ms with its program read ahead and 211 ms with the data files beside it too
//! (165 ms warm). The kernel reads them in the background (`POSIX_FADV_WILLNEED`); nothing is mapped
//! into boxd, and the pages are the kernel's to drop again under memory pressure.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Programs a wrapper script may name (Debian's `/usr/bin/chromium` is one).
const MAX_PROGRAMS: usize = 4;
/// Data files read ahead beside each program.
const MAX_DATA_FILES: usize = 32;
/// What is read of a file to tell a program from a script, and of a script to find its programs.
const MAX_SCRIPT: u64 = 64 * 1024;
/// The range of one readahead advice.
const ADVICE_CHUNK: u64 = 8 * 1024 * 1024;
/// Chromium's data files beside its program: resource packs, ICU data, V8 snapshots.
const DATA_EXTENSIONS: [&str; 3] = ["pak", "dat", "bin"];

/// The read-ahead thread's niceness: it runs while the container starts, beside the IPython kernel's start
/// (the SDK's first cell waits for that), and nothing waits for it. Page allocation for ~300 MB of
/// Chromium's files cost up to ~100 ms of CPU in this thread on a cold page cache.
const READ_AHEAD_NICENESS: libc::c_int = 19;

/// Starts reading `program`'s files ahead in a thread of its own; returns at once.
pub fn start(program: String) {
    let spawned = std::thread::Builder::new()
        .name("browser-warm".into())
        .spawn(move || {
            // SAFETY: setpriority takes plain integers; on Linux PRIO_PROCESS with 0 names the calling
            // thread only. Raising one's own niceness needs no privilege; a failure leaves it at 0.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, READ_AHEAD_NICENESS) };
            let files = files_to_read(&program);
            let bytes = files
                .iter()
                .fold(0u64, |total, file| total.saturating_add(read_ahead(file)));
            tracing::debug!(%program, files = files.len(), bytes, "the browser's files are read ahead");
        });
    if let Err(err) = spawned {
        tracing::debug!("the browser's files are not read ahead: {err}");
    }
}

/// The programs `program` runs (itself, or those its wrapper script names) and their data files.
fn files_to_read(program: &str) -> Vec<PathBuf> {
    let Some(path) = resolve(program) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for program in programs(&path) {
        let data = program.parent().map(data_files).unwrap_or_default();
        files.push(program);
        files.extend(data);
    }
    files
}

/// `program` as a path: as given when it holds a slash, else found on `PATH`.
fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return std::fs::canonicalize(program).ok();
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|directory| directory.join(program))
        .find(|candidate| candidate.is_file())
        .and_then(|found| std::fs::canonicalize(found).ok())
}

/// The executables behind `path`: itself when it is one; when it is a script, the executables of
/// the same name that it names (by absolute path, or by Debian's `<prefix>/lib/<name>/<name>`
/// layout), which leaves out its interpreter and the other tools it mentions.
fn programs(path: &Path) -> Vec<PathBuf> {
    let Some(head) = read_head(path) else {
        return Vec::new();
    };
    if is_elf(&head) {
        return vec![path.to_path_buf()];
    }
    if !head.starts_with(b"#!") {
        return Vec::new();
    }
    let Some(name) = path.file_name() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&head);
    let named = text
        .split(|c: char| c.is_whitespace() || "\"'=;:()`".contains(c))
        .filter(|token| token.starts_with('/') && !token.contains('$'))
        .map(PathBuf::from);
    let conventional = path
        .parent()
        .and_then(Path::parent)
        .map(|prefix| prefix.join("lib").join(name).join(name));
    let mut found: Vec<PathBuf> = Vec::new();
    for candidate in named.chain(conventional) {
        if found.len() >= MAX_PROGRAMS {
            break;
        }
        let Ok(candidate) = std::fs::canonicalize(&candidate) else {
            continue;
        };
        if candidate != path
            && candidate.file_name() == Some(name)
            && !found.contains(&candidate)
            && read_head(&candidate).is_some_and(|head| is_elf(&head))
        {
            found.push(candidate);
        }
    }
    found
}

/// Chromium's data files in `directory` (not its other programs, nor subdirectories).
fn data_files(directory: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .and_then(|extension| extension.to_str())
                .is_some_and(|extension| DATA_EXTENSIONS.contains(&extension))
                && path.is_file()
        })
        .take(MAX_DATA_FILES)
        .collect();
    files.sort();
    files
}

fn read_head(path: &Path) -> Option<Vec<u8>> {
    if !path.is_file() {
        return None;
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_SCRIPT)
        .read_to_end(&mut head)
        .ok()?;
    Some(head)
}

fn is_elf(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
}

/// Asks the kernel to read `file` into the page cache; its size, or 0 when it could not be asked.
fn read_ahead(file: &Path) -> u64 {
    let Ok(opened) = std::fs::File::open(file) else {
        return 0;
    };
    let size = opened.metadata().map(|meta| meta.len()).unwrap_or(0);
    // One advice for the whole file reads only its first few MiB here (the kernel caps a single
    // readahead); one per chunk reads all of it.
    let mut offset = 0u64;
    for _ in 0..=size / ADVICE_CHUNK {
        if offset >= size {
            break;
        }
        let (Ok(start), Ok(length)) = (
            libc::off_t::try_from(offset),
            libc::off_t::try_from(ADVICE_CHUNK),
        ) else {
            break;
        };
        // SAFETY: an advice on a descriptor we own, for a range of the file.
        let advised = unsafe {
            libc::posix_fadvise(opened.as_raw_fd(), start, length, libc::POSIX_FADV_WILLNEED)
        };
        if advised != 0 {
            return 0;
        }
        offset = offset.saturating_add(ADVICE_CHUNK);
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, contents: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    #[test]
    fn a_program_is_read_with_its_data_files_and_a_wrapper_script_leads_to_its_programs() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let library = root.join("usr/lib/chromium");
        let elf = b"\x7fELF\x02\x01\x01 rest of a program";
        write(&library.join("chromium-headless-shell"), elf);
        write(&library.join("chromium"), elf);
        write(&library.join("resources.pak"), b"pak");
        write(&library.join("icudtl.dat"), b"icu");
        write(&library.join("v8_context_snapshot.bin"), b"v8");
        write(&library.join("libEGL.so"), b"not data");
        write(
            &library.join("locales/en-US.pak"),
            b"not beside the program",
        );
        let data = vec![
            library.join("icudtl.dat"),
            library.join("resources.pak"),
            library.join("v8_context_snapshot.bin"),
        ];

        // A program itself.
        let shell = library.join("chromium-headless-shell");
        let mut expected = vec![shell.clone()];
        expected.extend(data.clone());
        assert_eq!(files_to_read(shell.to_str().unwrap()), expected);

        // A script naming its program by absolute path (Debian's headless shell wrapper).
        let wrapper = root.join("usr/bin/chromium-headless-shell");
        write(
            &wrapper,
            format!("#!/bin/sh -e\n{} \"$@\"\n", shell.display()).as_bytes(),
        );
        assert_eq!(files_to_read(wrapper.to_str().unwrap()), expected);

        // A script naming it through variables (Debian's chromium wrapper): its layout tells.
        let wrapper = root.join("usr/bin/chromium");
        write(
            &wrapper,
            b"#!/bin/sh\nAPPNAME=chromium\nGDB=/bin/sh\nLIBDIR=/usr/lib/$APPNAME\nexec $LIBDIR/$APPNAME \"$@\"\n",
        );
        let mut expected = vec![library.join("chromium")];
        expected.extend(data);
        assert_eq!(files_to_read(wrapper.to_str().unwrap()), expected);

        // Nothing to read for what is not there, nor for a file that is neither.
        assert!(files_to_read(root.join("missing").to_str().unwrap()).is_empty());
        assert!(files_to_read(library.join("resources.pak").to_str().unwrap()).is_empty());
        assert!(files_to_read("surely-not-on-path-boxd").is_empty());
    }
}
