//! A write past the file-size limit (`ulimit -f`, RLIMIT_FSIZE) sends SIGXFSZ, whose default action
//! kills the process: one upload would take boxd down with every session. With a handler installed
//! the write fails with EFBIG instead, which the routes answer as 507 (`ApiError::from_io`), the old
//! file intact (writes are staged). A handler, not SIG_IGN: an ignored signal stays ignored across
//! exec, while a handled one is reset, so children keep the default action as anywhere else.

extern "C" fn on_file_size_exceeded(_: libc::c_int) {}

/// Installs the handler. Call it once, early in `main`.
pub fn survive_file_size_limit() -> std::io::Result<()> {
    // SAFETY: sigaction with a zeroed struct whose handler is a function that does nothing (and so
    // is async-signal-safe); SA_RESTART keeps other syscalls from failing with EINTR.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_file_size_exceeded as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGXFSZ, &action, std::ptr::null_mut()) == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
