//! boxd: the one process inside every agent-sandbox container.

mod child;
mod cli;
mod deadline;
mod error;
mod filesystem;
mod git;
mod http;
mod ipython;
mod mcp;
mod process;
mod processes;
mod shell;
mod tools;
mod watch;
mod workspace;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command, ServeArgs, ToolFamily};
use http::{AppState, auth};
use tools::ToolRegistry;

/// How long in-flight requests may finish after SIGTERM before boxd exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Before any thread or child exists: the token was read into `cli`; no child may inherit it.
    child::withhold_from_children(&["SECRET_TOKEN"]);
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    git::configure_library();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("boxd: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::McpStdio(args) => runtime.block_on(mcp::relay::run(&args.url, &args.token)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            eprintln!("boxd: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let token = match args.token.filter(|token| !token.is_empty()) {
        Some(token) => token,
        None => {
            let token = auth::generate();
            eprintln!("boxd: SECRET_TOKEN is not set; generated token: {token}");
            token
        }
    };
    let command_timeout = positive_seconds("--command-timeout", args.command_timeout)?;
    let cell_timeout = positive_seconds("--cell-timeout", args.cell_timeout)?;
    if args.max_output == 0 {
        return Err("--max-output must be positive".into());
    }
    let workspace = workspace::Workspace::open(&args.workspace)
        .map_err(|err| format!("cannot open workspace {}: {err}", args.workspace.display()))?;

    let tools = Arc::new(ToolRegistry::default());
    tools.reserve_group(tools::GENERIC_GROUP);
    if args.tools.contains(&ToolFamily::Shell) {
        tools
            .register_builtin(shell::tool(
                workspace.real_root().to_path_buf(),
                shell::ShellLimits {
                    default_timeout: command_timeout,
                    max_output_bytes: args.max_output,
                    kill_grace: Duration::from_secs(2),
                    drain: Duration::from_millis(200),
                },
            ))
            .map_err(|err| err.to_string())?;
    }
    if args.tools.contains(&ToolFamily::Ipython) {
        tools
            .register_builtin(ipython::tool(ipython::IpythonBridge::start(
                ipython::KernelConfig {
                    python: interpreter_path(&args.python),
                    workspace: workspace.real_root().to_path_buf(),
                    default_timeout: cell_timeout,
                    interrupt_grace: Duration::from_secs(3),
                    start_timeout: Duration::from_secs(60),
                    max_output_bytes: args.max_output,
                },
            )))
            .map_err(|err| err.to_string())?;
    }
    if args.tools.contains(&ToolFamily::Filesystem) {
        let mut dirs = vec![workspace.root().to_path_buf()];
        dirs.extend(args.allow_dirs.iter().cloned());
        let allowed =
            filesystem::AllowedDirs::new(&dirs).map_err(|err| format!("--allow-dir: {err}"))?;
        for tool in filesystem::tools(allowed) {
            tools
                .register_builtin(tool)
                .map_err(|err| err.to_string())?;
        }
    }

    let mcp_host = Arc::new(mcp::McpHost::new(
        Arc::clone(&tools),
        workspace.real_root().to_path_buf(),
    ));
    if let Some(config) = args.mcp_config.clone() {
        let host = Arc::clone(&mcp_host);
        // In the background: /healthz must not wait for servers that download themselves (npx, uvx).
        tokio::spawn(async move {
            match host.add_from_file(&config).await {
                Ok(()) => {
                    tracing::info!(config = %config.display(), "MCP servers from config started")
                }
                Err(err) => {
                    tracing::error!(config = %config.display(), "MCP servers from config: {err}")
                }
            }
        });
    }

    http::events::set_keep_alive(positive_seconds("--keep-alive", args.keep_alive)?);
    let processes = processes::ProcessManager::new(
        Arc::new(workspace.clone()),
        processes::ProcessLimits {
            max_running: args.max_processes.max(1),
            max_kept: (args.max_processes * 4).max(64),
            buffer_bytes: args.process_buffer.max(4096),
            retention: positive_seconds("--process-retention", args.process_retention)?,
            kill_grace: Duration::from_secs(2),
            drain: Duration::from_millis(200),
        },
    );
    let state = AppState {
        processes: Arc::clone(&processes),
        watches: Arc::new(watch::WatchHub::new(
            Arc::new(workspace.clone()),
            args.max_watches,
        )),
        mcp: Arc::clone(&mcp_host),
        tools,
        git: Arc::new(git::GitWatcher::new(workspace.real_root().to_path_buf())),
        workspace: Arc::new(workspace),
        token: auth::Token::new(&token),
    };
    let stop_requested = stop_signal()?;
    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .await
        .map_err(|err| format!("cannot listen on {}:{}: {err}", args.host, args.port))?;
    let address: SocketAddr = listener.local_addr().map_err(|err| err.to_string())?;
    tracing::info!(
        workspace = %state.workspace.root().display(),
        version = env!("CARGO_PKG_VERSION"),
        "boxd listening on http://{address}"
    );

    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_requested.await;
        // Live processes go first, so the streams following them end and do not hold the stop.
        let _ = tokio::task::spawn_blocking(move || processes.shutdown()).await;
        let _ = stop_tx.send(true);
    });
    let mut graceful_stop = stop_rx.clone();
    // Without TCP_NODELAY a streamed body's first small write waits on the client's delayed ACK of the
    // headers (~40 ms per small file read).
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {err}");
        }
    });
    let server = axum::serve(listener, http::router(state)).with_graceful_shutdown(async move {
        let _ = graceful_stop.wait_for(|stopped| *stopped).await;
        tracing::info!("stop signal received; finishing in-flight requests");
    });
    let served = tokio::select! {
        served = server => served.map_err(|err| format!("server failed: {err}")),
        _ = async {
            let _ = stop_rx.wait_for(|stopped| *stopped).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "in-flight requests did not finish; exiting anyway");
            Ok(())
        }
    };
    // Hosted MCP children run in their own process groups: stop them explicitly, or they outlive boxd.
    if tokio::time::timeout(SHUTDOWN_GRACE, mcp_host.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("hosted MCP servers did not stop in time");
    }
    served
}

/// A relative interpreter path (`.venv/bin/python`) means relative to where boxd was started, not to the
/// workspace the kernel runs in; a bare name (`python3`) is looked up on PATH as usual.
fn interpreter_path(python: &str) -> String {
    let path = std::path::Path::new(python);
    if path.is_relative()
        && path.components().count() > 1
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(path).to_string_lossy().into_owned();
    }
    python.to_owned()
}

fn positive_seconds(flag: &str, seconds: f64) -> Result<Duration, String> {
    tools::positive_seconds(seconds)
        .ok_or_else(|| format!("{flag} must be a positive number of seconds, got {seconds}"))
}

/// Installs the SIGTERM/SIGINT handlers now (before boxd reports it is listening, so a stop that arrives
/// right after start-up is still graceful) and returns a future that resolves on the first of them.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|err| format!("cannot handle SIGTERM: {err}"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|err| format!("cannot handle SIGINT: {err}"))?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
    })
}
