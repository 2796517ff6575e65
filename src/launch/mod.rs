//! `boxd launch`: the host-side launcher. Starts a sandbox image through the Docker Engine API (Docker,
//! or podman's compatible socket), waits until it is ready and prints what a client needs to reach it.
//! It shares nothing with the in-container families: it is a client of the image, like the SDK's
//! manager.
//!
//! The token is printed once and kept nowhere by the launcher: the engine keeps it, as the container's
//! `SECRET_TOKEN`, which is how the image receives it (the SDK's manager does the same); whoever can
//! inspect the container through the engine socket can also exec into it, so that adds no reader.

mod engine;
mod error;
mod ready;
mod spec;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use engine::{ContainerSpec, Engine};
pub use error::LaunchError;
use spec::{Launched, SandboxType, Started};

/// Log lines of a container that did not become ready, shown in the error.
const LOG_LINES: usize = 20;

#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// The engine's API: a Unix socket path, unix:///PATH or tcp://HOST:PORT. Default: DOCKER_HOST,
    /// else /run/podman/podman.sock if it exists, else /var/run/docker.sock.
    #[arg(long, global = true)]
    pub engine_socket: Option<String>,

    #[command(subcommand)]
    pub command: LaunchCommand,
}

#[derive(Debug, Subcommand)]
pub enum LaunchCommand {
    /// Start a sandbox, wait until it is ready, print {id, url, token, ...} as one JSON object.
    Up(UpArgs),
    /// List the sandboxes `boxd launch` started (running or not).
    Ls(LsArgs),
    /// Stop and remove sandboxes (only ones `boxd launch` started).
    Down(DownArgs),
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// The image type.
    #[arg(long = "type", value_name = "TYPE", value_enum, default_value = "base")]
    pub kind: SandboxType,

    /// Host directory bind-mounted at /workspace (created if missing). Default: the image's own.
    #[arg(long)]
    pub workspace: Option<PathBuf>,

    /// Host port on 127.0.0.1 for the container's port 80. Default: a free one.
    #[arg(long)]
    pub port: Option<u16>,

    /// The image. Default: [RUNTIME_SANDBOX_REGISTRY or docker.io]/[RUNTIME_SANDBOX_IMAGE_NAMESPACE or
    /// agentscope]/runtime-sandbox-TYPE:[RUNTIME_SANDBOX_IMAGE_TAG or latest], what `make images` tags.
    #[arg(long)]
    pub image: Option<String>,

    /// Seconds to wait for the sandbox to be ready before removing it and failing.
    #[arg(long, default_value_t = 60)]
    pub ready_timeout: u64,

    /// The image's proxy timeout in seconds (NGINX_TIMEOUT): a request's longest time.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    pub nginx_timeout: u32,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Container ids (or unique prefixes) or names.
    #[arg(required = true)]
    pub ids: Vec<String>,
}

/// Runs `boxd launch ...` on a runtime of its own; errors are one line on stderr (plus a not-ready
/// container's log lines), exit status 1.
pub fn main(args: LaunchArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("boxd launch: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("boxd launch: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: LaunchArgs) -> Result<(), LaunchError> {
    let endpoint = spec::resolve_endpoint(
        args.engine_socket.as_deref(),
        |name| std::env::var(name).ok(),
        Path::exists,
    )?;
    let engine = Engine::connect(&endpoint)?;
    match args.command {
        LaunchCommand::Up(up_args) => {
            let launched = up(&engine, up_args).await?;
            let json = serde_json::to_string(&launched).map_err(|err| LaunchError::Other {
                action: "printing the result",
                reason: err.to_string(),
            })?;
            print_line(&json)
        }
        LaunchCommand::Ls(ls_args) => ls(&engine, ls_args).await,
        LaunchCommand::Down(down_args) => {
            for id in &down_args.ids {
                down(&engine, id).await?;
                print_line(id)?;
            }
            Ok(())
        }
    }
}

fn print_line(line: &str) -> Result<(), LaunchError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|err| LaunchError::Other {
            action: "writing to stdout",
            reason: err.to_string(),
        })
}

async fn up(engine: &Engine, args: UpArgs) -> Result<Launched, LaunchError> {
    let workspace = args
        .workspace
        .as_deref()
        .map(prepare_workspace)
        .transpose()?;
    let image = args
        .image
        .clone()
        .filter(|image| !image.trim().is_empty())
        .unwrap_or_else(|| spec::default_image(args.kind, |name| std::env::var(name).ok()));
    let token = spec::generate_token()?;
    let name = spec::container_name(args.kind)?;
    let started = Instant::now();
    let id = engine
        .create(&ContainerSpec {
            name: &name,
            image: &image,
            kind: args.kind,
            token: &token,
            nginx_timeout: args.nginx_timeout,
            port: args.port,
            workspace: workspace.as_deref(),
        })
        .await?;
    // From here on the container exists: any failure, or a Ctrl-C, removes it before returning.
    let starting = async {
        engine.start(&id, args.port).await?;
        let port = engine.host_port(&id).await?;
        let deadline = Duration::from_secs(args.ready_timeout);
        ready::wait(engine, &id, &image, port, &token, deadline).await?;
        Ok::<u16, LaunchError>(port)
    };
    let outcome = tokio::select! {
        outcome = starting => outcome,
        () = interrupted() => Err(LaunchError::Interrupted(short(&id).to_owned())),
    };
    match outcome {
        Ok(port) => {
            tracing::debug!(elapsed = ?started.elapsed(), "ready");
            Ok(Launched::from(Started {
                id,
                name,
                kind: args.kind,
                image,
                port,
                token: &token,
                workspace: workspace.as_deref(),
            }))
        }
        Err(err) => {
            if let Err(cleanup) = engine.remove(&id).await {
                eprintln!(
                    "boxd launch: could not remove container {}: {cleanup}",
                    short(&id)
                );
            }
            Err(err)
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM; never if neither can be watched (then the wait's own
/// deadline still ends `up`).
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut interrupt), Ok(mut terminate)) => {
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
        }
        _ => std::future::pending().await,
    }
}

/// The workspace as an absolute, existing directory: the engine resolves a bind mount's source on its
/// side, where a relative path means nothing.
fn prepare_workspace(path: &Path) -> Result<PathBuf, LaunchError> {
    let failed = |reason: String| LaunchError::Workspace {
        path: path.to_owned(),
        reason,
    };
    std::fs::create_dir_all(path).map_err(|err| failed(format!("cannot create it: {err}")))?;
    let real = std::fs::canonicalize(path).map_err(|err| failed(err.to_string()))?;
    if !real.is_dir() {
        return Err(failed("not a directory".into()));
    }
    Ok(real)
}

async fn ls(engine: &Engine, args: LsArgs) -> Result<(), LaunchError> {
    let containers = engine.list().await?;
    let mut lines = Vec::with_capacity(containers.len() + 1);
    if !args.json {
        lines.push(format!(
            "{:<12}  {:<10}  {:<8}  {:<32}  NAME",
            "ID", "TYPE", "STATE", "URL"
        ));
    }
    for container in containers {
        let url = container.port.map(spec::api_url);
        if args.json {
            let row = serde_json::json!({
                "id": container.id,
                "name": container.name,
                "type": container.kind,
                "url": url,
                "state": container.state,
                "status": container.status,
            });
            lines.push(row.to_string());
        } else {
            lines.push(format!(
                "{:<12}  {:<10}  {:<8}  {:<32}  {}",
                short(&container.id),
                container.kind,
                container.state,
                url.as_deref().unwrap_or("-"),
                container.name
            ));
        }
    }
    for line in lines {
        print_line(&line)?;
    }
    Ok(())
}

async fn down(engine: &Engine, id: &str) -> Result<(), LaunchError> {
    if !engine.ours(id).await? {
        return Err(LaunchError::NotOurs(id.to_owned()));
    }
    engine.stop_and_remove(id).await
}

/// The 12-character id engines show.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(Debug, Subcommand)]
    enum Top {
        Launch(LaunchArgs),
    }

    fn parse(args: &[&str]) -> Result<LaunchArgs, clap::Error> {
        let argv = ["boxd", "launch"].iter().chain(args);
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Top::Launch(args) => args,
        })
    }

    #[test]
    fn up_takes_its_flags_and_the_engine_socket_anywhere() {
        let args = parse(&[
            "up",
            "--type",
            "gui",
            "--port",
            "8081",
            "--workspace",
            "/tmp/w",
            "--image",
            "x:1",
            "--engine-socket",
            "/tmp/p.sock",
        ])
        .map_err(|err| err.to_string());
        let Ok(LaunchArgs {
            engine_socket,
            command: LaunchCommand::Up(up),
        }) = args
        else {
            panic!("{args:?}");
        };
        assert_eq!(engine_socket.as_deref(), Some("/tmp/p.sock"));
        assert_eq!(up.kind, SandboxType::Gui);
        assert_eq!(up.port, Some(8081));
        assert_eq!(up.workspace.as_deref(), Some(Path::new("/tmp/w")));
        assert_eq!(up.image.as_deref(), Some("x:1"));
        assert_eq!((up.ready_timeout, up.nginx_timeout), (60, 60));
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for argv in [
            &["up", "--type", "desktop"][..],
            &["up", "--port", "70000"],
            &["up", "--nginx-timeout", "0"],
            &["down"],
        ] {
            let err = parse(argv).map(|_| ()).err();
            assert!(
                err.as_ref().is_some_and(|err| err.exit_code() == 2),
                "{argv:?}: {err:?}"
            );
        }
        assert!(matches!(
            parse(&["up"]).map(|args| args.command),
            Ok(LaunchCommand::Up(UpArgs {
                kind: SandboxType::Base,
                ..
            }))
        ));
    }

    #[test]
    fn a_workspace_is_made_absolute_and_created() {
        let scratch = std::env::temp_dir().join(format!("boxd-launch-ws-{}", std::process::id()));
        let nested = scratch.join("a/b");
        let prepared = prepare_workspace(&nested).map_err(|err| err.to_string());
        assert_eq!(
            prepared.as_deref().ok().map(Path::is_absolute),
            Some(true),
            "{prepared:?}"
        );
        assert!(nested.is_dir());
        let file = scratch.join("file");
        assert!(std::fs::write(&file, b"x").is_ok());
        let err = prepare_workspace(&file).map(|_| ()).err();
        assert!(
            matches!(err, Some(LaunchError::Workspace { .. })),
            "{err:?}"
        );
        let _ = std::fs::remove_dir_all(&scratch);
    }

    #[test]
    fn short_ids_never_slice_past_the_end() {
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
        assert_eq!(short("abc"), "abc");
    }
}
