//! `boxd init`: the first process of every image (PID 1). It owns the public port from its first
//! millisecond, so an orchestrator's first probe is answered rather than refused; it holds the token so
//! that no other process's environment, argv or file does; and it keeps boxd and the image's own
//! programs (Xvfb, the window manager, the VNC server) running.
//!
//! Why not a shell script under tini, as before: the port was bound only once bash had rendered nginx's
//! configuration and nginx had started (the SDK's first probe at ~15 ms after the engine's start failed,
//! and it sleeps a whole second on failure), and the token sat in the environment of tini, bash, nginx,
//! Xvfb and every program started from the desktop.
//!
//! What it does, in order: takes `SECRET_TOKEN` out of its environment (blanking the bytes the kernel
//! shows as `/proc/1/environ`) and makes itself non-dumpable, so `/proc/1/mem` and `/proc/1/fd` are
//! closed to tenant code; binds the listener; starts `boxd serve` and hands it the listener and the
//! secrets once it asks (see `handover`: nothing another process can read); starts `/etc/boxd/services/*`; then reaps every orphan and restarts whatever exits, with a
//! backoff. `boxd serve` exiting with status 2 (a usage error: the same flags would fail forever) stops
//! the container with boxd's message as its last words.

pub mod handover;
pub mod secrets;
mod settings;
mod supervise;
pub mod wait_socket;

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

// `boxd init`'s own command line, parsed without the rest of boxd's (see `main`); not a doc comment,
// which clap would show as its description.
#[derive(Debug, clap::Parser)]
#[command(
    name = "boxd init",
    bin_name = "boxd init",
    version,
    about = "Be a container's first process: bind the public port, then start and keep running `boxd \
             serve` and the image's services, holding the token so that no other process sees it"
)]
pub struct InitCommand {
    #[command(flatten)]
    pub args: InitArgs,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The public address, bound before anything else starts; `boxd serve` answers on it.
    #[arg(long, env = "BOXD_LISTEN", default_value = "0.0.0.0:80")]
    pub listen: String,

    /// Programs to start beside boxd and restart when they exit (each executable file, in name order).
    #[arg(long, env = "BOXD_SERVICES", default_value = "/etc/boxd/services")]
    pub services: PathBuf,

    /// How long a program that exited (boxd serve, a service) waits before it starts again, in
    /// milliseconds; the wait doubles with each exit up to `--max-restart-delay-ms`, and starts over once
    /// the program had run a minute.
    #[arg(long, env = "BOXD_RESTART_DELAY_MS", default_value_t = 1000)]
    pub restart_delay_ms: u64,

    /// The longest wait before a restart, in milliseconds.
    #[arg(long, env = "BOXD_MAX_RESTART_DELAY_MS", default_value_t = 30_000)]
    pub max_restart_delay_ms: u64,

    /// Upstream's nginx timeout, in whole seconds: a request unanswered for this long gets 504, and
    /// commands, cells and training calls stop 5 s before it so they answer first. Not a number: 60.
    #[arg(long, env = "NGINX_TIMEOUT", default_value = "60")]
    pub nginx_timeout: String,
}

/// Pool mode with the secret in a file (the older, weaker way: tenant code can read the file); with the
/// secret itself in `BOXD_POOL_SECRET`, it travels on the secrets' pipe like the token.
const POOL_SECRET_FILE_VARIABLE: &str = "BOXD_POOL_SECRET_FILE";

pub fn main(args: InitArgs) -> ExitCode {
    // The port first: nothing before it but the exec itself (see `main`), so the first probe connects.
    let listener = match TcpListener::bind(args.listen.as_str()) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("boxd init: cannot listen on {}: {err}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    // First, while single-threaded: the secrets leave the environment (and /proc/1/environ) before any
    // child exists, and this process's memory and descriptors close to everyone else.
    let mut secrets = secrets::from_environment();
    crate::core::child::withhold_from_children(secrets::SECRET_VARIABLES);
    if let Err(err) = make_undumpable() {
        eprintln!("boxd init: cannot make this process non-dumpable: {err}");
        return ExitCode::FAILURE;
    }
    // Pool mode: the token comes with the claim (`POST /init`), never from the environment.
    let pool_mode = std::env::var_os(POOL_SECRET_FILE_VARIABLE).is_some()
        || secrets.contains_key(secrets::POOL_SECRET);
    if pool_mode {
        if secrets.remove(secrets::TOKEN).is_some() {
            eprintln!(
                "boxd init: {} or {POOL_SECRET_FILE_VARIABLE} is set (pool mode): the token comes \
                 with the claim; {} is ignored",
                secrets::POOL_SECRET,
                secrets::TOKEN
            );
        }
    } else if !secrets.contains_key(secrets::TOKEN) {
        let token = crate::core::secret::generate();
        // Printed once, to the container's log: the only place the operator can read it from.
        eprintln!(
            "boxd init: {} is not set; generated token: {token}",
            secrets::TOKEN
        );
        secrets.insert(secrets::TOKEN.to_string(), token);
    }
    let timeout = settings::nginx_timeout(&args.nginx_timeout);
    let environment = settings::serve_environment(timeout, &base_environment());
    let offer = match handover::Offer::new(&secrets, &environment) {
        Ok(offer) => offer,
        Err(err) => {
            eprintln!("boxd init: {err}");
            return ExitCode::from(2);
        }
    };
    let executable = match std::env::current_exe() {
        Ok(path) => path,
        Err(err) => {
            eprintln!("boxd init: cannot find its own executable: {err}");
            return ExitCode::FAILURE;
        }
    };
    let boxd = supervise::Program::boxd(executable, listener, offer, environment);
    let mut programs = vec![boxd];
    programs.extend(supervise::Program::services(&args.services));
    let first = std::time::Duration::from_millis(args.restart_delay_ms.max(1));
    let backoff = supervise::Backoff {
        first,
        max: std::time::Duration::from_millis(args.max_restart_delay_ms).max(first),
    };
    supervise::run(programs, backoff)
}

/// This process's environment as children get it (the token already removed).
fn base_environment() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

/// Non-dumpable: `/proc/<pid>/mem`, `environ` and `fd` need `CAP_SYS_PTRACE`, which containers lack
/// by default, even for root. Children start dumpable again (an exec resets it).
fn make_undumpable() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
