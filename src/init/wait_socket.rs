//! `boxd wait-socket PATH`: exits 0 once a Unix socket accepts a connection, 1 after a timeout. The
//! images' services use it to start a program only once the one it needs serves (the window manager and
//! the VNC server wait for Xvfb's socket). It was a Python script: ~15 ms of CPU per start, twice, taken
//! from the IPython kernel's start on the same cores; this is ~3 ms.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

/// How often the socket is tried: a program that waits on another's start loses at most this much.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

#[derive(Debug, Args)]
pub struct WaitSocketArgs {
    /// The Unix socket to connect to. A socket file left by a dead server refuses, so it does not count.
    pub path: PathBuf,

    /// Seconds to wait at most; then exit 1, saying why.
    #[arg(long, default_value = "10", value_parser = parse_timeout)]
    pub timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|timeout| *timeout <= Duration::from_secs(3600))
        .ok_or_else(|| format!("{text:?}: the timeout must be between 0 and 3600 seconds"))
}

pub fn main(args: WaitSocketArgs) -> ExitCode {
    match wait_for_socket(&args.path, args.timeout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!(
                "boxd wait-socket: {} accepted no connection in {:?}: {err}",
                args.path.display(),
                args.timeout
            );
            ExitCode::FAILURE
        }
    }
}

/// Connects to `path` until it accepts (the connection is closed at once) or `timeout` passes; the
/// error is the last attempt's.
pub fn wait_for_socket(path: &Path, timeout: Duration) -> std::io::Result<()> {
    let start = Instant::now();
    loop {
        let refused = match UnixStream::connect(path) {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(refused);
        }
        std::thread::sleep(POLL_INTERVAL.min(timeout.saturating_sub(waited)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn returns_once_the_socket_accepts_and_fails_after_the_timeout_otherwise() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("X1");

        let missing = wait_for_socket(&path, Duration::from_millis(50));
        assert_eq!(
            missing.map_err(|err| err.kind()),
            Err(std::io::ErrorKind::NotFound)
        );

        // A socket file nobody listens on (a killed server's) refuses.
        drop(UnixListener::bind(&path).expect("bind"));
        let stale = wait_for_socket(&path, Duration::from_millis(50));
        assert_eq!(
            stale.map_err(|err| err.kind()),
            Err(std::io::ErrorKind::ConnectionRefused)
        );
        std::fs::remove_file(&path).expect("remove the stale socket");

        let late = path.clone();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            UnixListener::bind(late).expect("bind")
        });
        let start = Instant::now();
        wait_for_socket(&path, Duration::from_secs(10)).expect("the socket accepts");
        assert!(start.elapsed() >= Duration::from_millis(100));
        drop(server.join());
    }

    #[test]
    fn the_timeout_is_a_bounded_number_of_seconds() {
        assert_eq!(parse_timeout("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_timeout("-1").is_err());
        assert!(parse_timeout("NaN").is_err());
        assert!(parse_timeout("1e9").is_err());
        assert!(parse_timeout("soon").is_err());
    }
}
