//! Command line: `boxd serve ...`. Every flag has an environment fallback, because images configure boxd
//! through env (`SECRET_TOKEN`, `WORKSPACE_DIR`, ...).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// Be a stdio MCP server that relays to a remote boxd (for stdio-only MCP clients).
    McpStdio(McpStdioArgs),
    /// Print every bound boxd keeps (connections, sizes, concurrency, timeouts) for the configuration
    /// the same flags and environment give `serve`, as a Markdown table.
    Limits(ServeArgs),
    /// On the host: start, list and stop sandbox containers through the Docker Engine API.
    Launch(crate::launch::LaunchArgs),
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

    /// Pool mode, for a warm pool's pods that start before anyone claims them: the file holding the
    /// pool secret (a mounted Secret). Until one `POST /init` authenticated with it sets the session
    /// token, only `/livez`, `/readyz/status` and `/init` answer; afterwards only that token works.
    /// Excludes `SECRET_TOKEN`.
    #[arg(long, env = "BOXD_POOL_SECRET_FILE")]
    pub pool_secret_file: Option<PathBuf>,

    /// Families to enable (comma-separated): their tools and their routes. An image offers only what
    /// it needs. Default: every family that needs no display, browser or device (all but `computer`,
    /// `adb` and `browser`).
    #[arg(
        long,
        env = "BOXD_TOOLS",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(crate::family_names())
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

    /// The X display the `computer` family drives (images run Xvfb on `:1`).
    #[arg(long, env = "DISPLAY", default_value = ":1")]
    pub display: String,

    /// Screenshots larger than WIDTHxHEIGHT are scaled down to fit, and every coordinate the
    /// `computer` tool takes or gives is in the screenshot's pixels (default: the screen's own size).
    #[arg(long, env = "BOXD_SCREENSHOT_MAX")]
    pub screenshot_max: Option<String>,

    /// The adb server the `adb` family asks for its device (`tcp:HOST:PORT`, as adb itself reads it).
    #[arg(long, env = "ADB_SERVER_SOCKET", default_value = "tcp:127.0.0.1:5037")]
    pub adb_server: String,

    /// The device the `adb` family drives when the adb server has several (its serial, as `adb
    /// devices` lists it). Unset: the only device.
    #[arg(long, env = "ANDROID_SERIAL")]
    pub adb_serial: Option<String>,

    /// A device the `adb` family reaches straight over TCP (HOST:PORT, e.g. redroid's or an emulator's
    /// adbd on 5555), with no adb server in between. Set, it wins over the adb server.
    #[arg(long, env = "BOXD_ADB_CONNECT")]
    pub adb_connect: Option<String>,

    /// The Chromium the `browser` family starts (a name on PATH or a path).
    #[arg(long, env = "BOXD_BROWSER_EXECUTABLE", default_value = "chromium")]
    pub browser_executable: String,

    /// Run the `browser` family's Chromium headless even when a display is set (it is headless
    /// anyway without `DISPLAY`).
    #[arg(long, env = "BOXD_BROWSER_HEADLESS")]
    pub browser_headless: bool,

    /// Cap in bytes on each of a command's stdout and stderr (head and tail are kept).
    #[arg(long, env = "BOXD_MAX_OUTPUT", default_value_t = 4 * 1024 * 1024)]
    pub max_output: usize,

    #[command(flatten)]
    pub shell: crate::shell::ShellArgs,

    #[command(flatten)]
    pub ipython: crate::ipython::IpythonArgs,

    #[command(flatten)]
    pub processes: crate::processes::ProcessesArgs,

    #[command(flatten)]
    pub watch: crate::watch::WatchArgs,

    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,
}
