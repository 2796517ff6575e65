//! boxd's own secrets never reach a child. They are taken out of boxd's environment before any thread
//! or child exists, so no spawn site can forget to filter them, and their bytes in the environment block
//! the kernel shows as `/proc/<boxd>/environ` are overwritten, so a child cannot read them there either.
//!
//! boxd is non-dumpable besides (`init::make_undumpable`), so `/proc/<boxd>/mem` and `fd` stay closed to
//! a child without `CAP_SYS_PTRACE`, root included (README, "Trust model").

use std::ffi::CString;
use std::sync::OnceLock;

/// Variables a claim gave every child through `POST /init` (pool mode): a layer over boxd's own
/// environment, so boxd itself never runs with a tenant's variables and nothing mutates the process
/// environment once threads exist.
static RUNTIME_ENVIRONMENT: OnceLock<Vec<(String, String)>> = OnceLock::new();

static RUNTIME_ENVIRONMENT_SET: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Sets the claim's layer; once per process (a pod serves one claim). Answers false if it was set.
pub fn set_runtime_environment(variables: Vec<(String, String)>) -> bool {
    let set = RUNTIME_ENVIRONMENT.set(variables).is_ok();
    if set {
        RUNTIME_ENVIRONMENT_SET.notify_waiters();
    }
    set
}

/// Resolves when the claim's layer is set (from now on; check `runtime_environment` too, as a set that
/// came first is not seen here). Long-lived children started before it (the kernel) restart to get it.
pub async fn runtime_environment_set() {
    RUNTIME_ENVIRONMENT_SET.notified().await;
}

/// The claim's layer, empty before `POST /init` and outside pool mode.
pub fn runtime_environment() -> &'static [(String, String)] {
    RUNTIME_ENVIRONMENT.get().map(Vec::as_slice).unwrap_or(&[])
}

/// Removes each of `names` from this process's environment and blanks its value in the original
/// environment block. Call it first thing in `main`, while boxd has a single thread (the environment is
/// not thread-safe to change).
pub fn withhold_from_children(names: &[&str]) {
    for name in names {
        blank_original_value(name);
        // SAFETY: called from `main` before the async runtime or any other thread starts, so nothing
        // reads the environment concurrently.
        unsafe { std::env::remove_var(name) };
    }
}

/// Overwrites the value of `name` in place. `getenv` points into the block the kernel exposes as
/// `/proc/self/environ` (the process's initial stack), which `remove_var` alone leaves untouched.
fn blank_original_value(name: &str) {
    let Ok(key) = CString::new(name) else {
        return;
    };
    // SAFETY: single-threaded (see above); getenv returns a pointer to a NUL-terminated value that lives
    // as long as the process, and we write only within its length.
    unsafe {
        let value = libc::getenv(key.as_ptr());
        if value.is_null() {
            return;
        }
        let length = libc::strlen(value);
        std::ptr::write_bytes(value, b'*', length);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_withheld_value_is_gone_from_the_environment_and_the_environ_block() {
        // The unit-test binary is multi-threaded, so this test uses a name no other test touches and
        // checks only what it set itself.
        let name = "BOXD_TEST_WITHHELD_SECRET";
        // SAFETY: no other test reads or writes this variable.
        unsafe { std::env::set_var(name, "s3cr3t-value") };
        super::withhold_from_children(&[name]);
        assert!(std::env::var_os(name).is_none());
    }
}
