//! Command line: `boxd serve ...`. Every flag has an environment fallback, because images configure boxd
//! through env (`SECRET_TOKEN`, `WORKSPACE_DIR`, ...).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::family::{self, Families, Setup};
use crate::{
    adb, agent, browser, computer, filesystem, git, ipython, mcp, processes, sandboxd, shell,
    training, watch, workspace,
};

#[derive(Debug, Parser)]
#[command(
    name = "boxd",
    version,
    about = "The agent inside a sandbox container: shell, files, git and tools over HTTP"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API.
    Serve(ServeArgs),
    /// Be a container's first process: bind the public port, then start and keep running `boxd serve`
    /// and the image's services, holding the token so that no other process sees it.
    Init(crate::init::InitArgs),
    /// Be a stdio MCP server that relays to a remote boxd (for stdio-only MCP clients).
    McpStdio(McpStdioArgs),
    /// Print every bound boxd keeps (connections, sizes, concurrency, timeouts) for the configuration
    /// the same flags and environment give `serve`, as a Markdown table.
    Limits(ServeArgs),
    /// On the host: start, list and stop sandbox containers through the Docker Engine API.
    Launch(crate::launch::LaunchArgs),
    /// Wait until a Unix socket accepts a connection (an image's service waiting for another's server,
    /// e.g. the window manager for Xvfb); exit 1 after the timeout.
    WaitSocket(crate::init::wait_socket::WaitSocketArgs),
}

// `boxd serve`'s own command line, parsed without the other commands' (see `main`): building the
// whole command tree (`limits` repeats every serve flag) cost a quarter of a millisecond of every start.
// Not a doc comment, which clap would show as its description.
#[derive(Debug, Parser)]
#[command(
    name = "boxd serve",
    bin_name = "boxd serve",
    version,
    about = "Serve the HTTP API."
)]
pub struct ServeCommand {
    #[command(flatten)]
    pub args: ServeArgs,
}

#[derive(Debug, Args)]
pub struct McpStdioArgs {
    /// The remote boxd: its base URL (`http://host:port`, or with `/fastapi`) or its `/mcp` endpoint.
    #[arg(long)]
    pub url: String,

    /// The remote's bearer token. Prefer the env var: argv is visible to other processes.
    #[arg(long, env = "SECRET_TOKEN", hide_env_values = true)]
    pub token: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "HOST", default_value = "0.0.0.0")]
    pub host: String,

    /// Port to listen on (0 picks a free one; the address is logged).
    #[arg(long, env = "PORT", default_value_t = 8000)]
    pub port: u16,

    /// The workspace directory every file path is confined to; created if missing.
    #[arg(long, env = "WORKSPACE_DIR", default_value = "/workspace")]
    pub workspace: PathBuf,

    /// Bearer token clients must send. Prefer the env var: argv is visible to other processes.
    /// Unset or empty: a random token is generated and printed once on stderr.
    #[arg(long, env = "SECRET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Ask `boxd init` on this inherited socket for the listener to serve on and the secrets (the
    /// token, the pool secret, the device key), so they are in no environment, argv, file or pipe.
    #[arg(long, hide = true)]
    pub handover_fd: Option<i32>,

    /// Pool mode, for a warm pool's pods that start before anyone claims them: the pool secret itself,
    /// only from the environment (`BOXD_POOL_SECRET`, or `boxd init`'s pipe): kept out of every child's
    /// environment, and no file holds it. Same rules as `--pool-secret-file`, which it excludes.
    #[arg(
        long = "pool-secret",
        env = "BOXD_POOL_SECRET",
        hide = true,
        hide_env_values = true
    )]
    pub pool_secret: Option<String>,

    /// Pool mode, for a warm pool's pods that start before anyone claims them: the file holding the
    /// pool secret (a mounted Secret; weaker than `BOXD_POOL_SECRET`, since tenant code can read a file
    /// in its container). Until one `POST /init` authenticated with it sets the session
    /// token, only `/livez`, `/readyz/status` and `/init` answer; afterwards only that token works.
    /// Excludes `SECRET_TOKEN`.
    #[arg(long, env = "BOXD_POOL_SECRET_FILE")]
    pub pool_secret_file: Option<PathBuf>,

    /// Families to enable (comma-separated): their tools and their routes. An image offers only what
    /// it needs. Default: every family that needs no display, browser, device or environment library
    /// (all but `computer`, `adb`, `browser` and `training`), and not `sandboxd`, whose listeners take
    /// no token (the images turn it on).
    #[arg(
        long,
        env = "BOXD_TOOLS",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(family_names())
    )]
    pub tools: Vec<String>,

    /// More directories the filesystem tools may use besides the workspace (repeatable; in the env
    /// var, separated by `:`). Each must exist.
    #[arg(long = "allow-dir", env = "BOXD_ALLOW_DIRS", value_delimiter = ':')]
    pub allow_dirs: Vec<PathBuf>,

    /// Seconds between keep-alives on idle event streams and WebSocket pings: below the read timeout of
    /// any proxy in front (images set it from NGINX_TIMEOUT).
    #[arg(long, env = "BOXD_KEEP_ALIVE", default_value_t = 15.0)]
    pub keep_alive: f64,

    /// Seconds a connection may take to send a request's headers, counted from the accept or from the
    /// previous response (so it is also the idle timeout), before it is closed. Longer than clients'
    /// own keep-alive expiry (httpx 5 s, aiohttp 15 s), so a client never reuses a closing connection.
    #[arg(long, env = "BOXD_HEADER_TIMEOUT", default_value_t = 30.0)]
    pub header_timeout: f64,

    /// Seconds a request body may send nothing before it is cut (the request then fails with a 4xx).
    #[arg(long, env = "BOXD_BODY_IDLE_TIMEOUT", default_value_t = 30.0)]
    pub body_idle_timeout: f64,

    /// Bytes a second a request body must average once `--body-idle-timeout` has passed since it
    /// began; slower, it is cut (a client dripping a byte at a time cannot hold a request forever).
    #[arg(long, env = "BOXD_BODY_MIN_RATE", default_value_t = 1024)]
    pub body_min_rate: u64,

    /// Cap in bytes on each of a command's stdout and stderr (head and tail are kept).
    #[arg(long, env = "BOXD_MAX_OUTPUT", default_value_t = 4 * 1024 * 1024)]
    pub max_output: usize,

    #[command(flatten)]
    pub front: crate::http::front::FrontArgs,

    #[command(flatten)]
    pub shell: crate::shell::ShellArgs,

    #[command(flatten)]
    pub ipython: crate::ipython::IpythonArgs,

    #[command(flatten)]
    pub processes: crate::processes::ProcessesArgs,

    #[command(flatten)]
    pub sandboxd: crate::sandboxd::SandboxdArgs,

    #[command(flatten)]
    pub watch: crate::watch::WatchArgs,

    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,

    #[command(flatten)]
    pub computer: crate::computer::ComputerArgs,

    #[command(flatten)]
    pub adb: crate::adb::AdbArgs,

    #[command(flatten)]
    pub browser: crate::browser::BrowserArgs,

    #[command(flatten)]
    pub training: crate::training::TrainingArgs,
}

/// One line of the family list.
pub struct FamilyEntry {
    /// The `--tools` name, also the family's key in `/readyz`.
    pub name: &'static str,
    /// On when `--tools` is not given; families that need a display, a browser or a device are not.
    pub on_by_default: bool,
    build: fn(&Setup, &ServeArgs) -> family::Built,
    /// Its rows of `boxd limits`.
    pub limits: fn(&ServeArgs) -> Vec<family::limits::Limit>,
}

/// The entry of the family whose module is `$module`: it has `family(&Setup, &Flags)` and
/// `limits(&Flags)`, its flags being the `ServeArgs` field of the same name (`flags`), or
/// `family(&Setup)` and `limits()` when it has none.
macro_rules! family {
    ($module:ident, on_by_default: $on:expr) => {
        FamilyEntry {
            name: stringify!($module),
            on_by_default: $on,
            build: |setup, _| $module::family(setup),
            limits: |_| $module::limits(),
        }
    };
    ($module:ident, on_by_default: $on:expr, flags) => {
        FamilyEntry {
            name: stringify!($module),
            on_by_default: $on,
            build: |setup, args| $module::family(setup, &args.$module),
            limits: |args| $module::limits(&args.$module),
        }
    };
}

/// Every family, in start order (they stop in reverse). Adding a family is a module, one line here
/// and, if it has flags, its `#[command(flatten)]` field in [`ServeArgs`].
pub const FAMILIES: &[FamilyEntry] = &[
    family!(shell, on_by_default: true, flags),
    family!(ipython, on_by_default: true, flags),
    family!(filesystem, on_by_default: true),
    family!(workspace, on_by_default: true),
    family!(git, on_by_default: true),
    family!(processes, on_by_default: true, flags),
    family!(watch, on_by_default: true, flags),
    family!(mcp, on_by_default: true, flags),
    family!(agent, on_by_default: true),
    family!(sandboxd, on_by_default: false, flags),
    family!(computer, on_by_default: false, flags),
    family!(adb, on_by_default: false, flags),
    family!(browser, on_by_default: false, flags),
    family!(training, on_by_default: false, flags),
];

pub fn family_names() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().map(|entry| entry.name)
}

/// Builds the families `--tools` names (or those on by default), in family-list order, and names the
/// others.
pub fn build_families(setup: &Setup, args: &ServeArgs) -> Result<Families, String> {
    let mut enabled = Vec::new();
    let mut disabled = Vec::new();
    for entry in FAMILIES {
        let on = if args.tools.is_empty() {
            entry.on_by_default
        } else {
            args.tools.iter().any(|wanted| wanted == entry.name)
        };
        if on {
            enabled.push((entry.build)(setup, args)?);
        } else {
            disabled.push(entry.name);
        }
    }
    Ok(Families::new(enabled, disabled))
}
