//! Pseudo-terminals boxd opens itself, so it controls every flag: both ends are opened with `O_NOCTTY`,
//! and the master is non-blocking and driven by the runtime's reactor, so a terminal costs no thread.
//!
//! Without `O_NOCTTY`, a boxd that leads its session (under systemd, or `setsid boxd serve`) acquires the
//! first terminal it opens as its controlling terminal, and dies of SIGHUP when that terminal hangs up.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;

use super::TerminalSize;

/// The master side of a pseudo-terminal.
pub struct Terminal {
    master: AsyncFd<OwnedFd>,
}

/// Opens a terminal of `size`; returns its master and the slave the child gets. Needs a runtime.
pub fn open(size: TerminalSize) -> io::Result<(Terminal, OwnedFd)> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: open takes a NUL-terminated path and flags; the descriptor returned is owned below.
    let raw = unsafe { libc::open(c"/dev/ptmx".as_ptr(), flags | libc::O_NONBLOCK) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by open and nothing else owns it.
    let master = unsafe { OwnedFd::from_raw_fd(raw) };
    let fd = master.as_raw_fd();
    // SAFETY: grantpt and unlockpt act on the descriptor only.
    if unsafe { libc::grantpt(fd) } != 0 || unsafe { libc::unlockpt(fd) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: ptsname_r writes at most `name.len()` bytes, NUL included, into `name`.
    let failed = unsafe { libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) };
    if failed != 0 {
        return Err(io::Error::from_raw_os_error(failed));
    }
    // SAFETY: ptsname_r succeeded, so `name` holds a NUL-terminated path.
    let path = unsafe { CStr::from_ptr(name.as_ptr()) };
    // SAFETY: as for the master above.
    let raw = unsafe { libc::open(path.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by open and nothing else owns it.
    let slave = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an OwnedFd keeps its one descriptor open for as long as it lives, which is as long as the
    // AsyncFd that owns it.
    let master = unsafe { AsyncFd::register(master) }?;
    let terminal = Terminal { master };
    terminal.resize(size)?;
    Ok((terminal, slave))
}

impl Terminal {
    /// Reads what the terminal printed. Ends with EIO once every holder of the slave has closed it.
    pub async fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.master.readable().await?;
            // SAFETY: read writes at most `buffer.len()` bytes into `buffer`.
            let read = ready.try_io(|master| {
                let n = unsafe {
                    libc::read(master.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len())
                };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match read {
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => continue,
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Types `data` into the terminal; waits (without a thread) while its input buffer is full.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut ready = self.master.writable().await?;
            // SAFETY: write reads at most `data.len()` bytes from `data`.
            let written = ready.try_io(|master| {
                let n =
                    unsafe { libc::write(master.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match written {
                Ok(Ok(n)) => data = data.get(n..).unwrap_or_default(),
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(err)) => return Err(err),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the size; the foreground job gets SIGWINCH.
    pub fn resize(&self, size: TerminalSize) -> io::Result<()> {
        let size = libc::winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer given.
        let failed = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        if failed == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_terminal_is_sized_read_through_the_reactor_and_ends_with_its_slave() {
        let (terminal, slave) = open(TerminalSize { rows: 7, cols: 9 }).unwrap();
        // SAFETY: fcntl F_GETFL only reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(terminal.master.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0, "the master is non-blocking");
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one winsize into `size`.
        unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!((size.ws_row, size.ws_col), (7, 9));
        // Writes to the slave come out of the master, through the reactor.
        let written = unsafe { libc::write(slave.as_raw_fd(), b"hi".as_ptr().cast(), 2) };
        assert_eq!(written, 2);
        let mut buffer = [0u8; 16];
        let n = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            terminal.read(&mut buffer),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(&buffer[..n], b"hi");
        // Once the slave is closed, reads end (EIO) instead of blocking.
        drop(slave);
        let end = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            terminal.read(&mut buffer),
        )
        .await
        .unwrap();
        assert!(end.is_err() || end.is_ok_and(|n| n == 0));
    }
}
