//! boxd: the one process inside every agent-sandbox container.

mod adb;
mod agent;
mod api;
mod browser;
mod cli;
mod computer;
mod core;
mod family;
mod filesystem;
mod git;
mod http;
mod init;
mod ipython;
mod launch;
mod limits;
mod mcp;
mod mcp_server;
mod processes;
mod sandboxd;
mod shell;
mod tools;
mod training;
mod watch;
mod workspace;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command, ServeArgs};
#[cfg(test)]
use cli::{FAMILIES, build_families, family_names};
use family::Setup;
use http::auth;
use tools::ToolRegistry;

/// How long the runtime waits for blocking work (a read stuck on a FIFO, a terminal reader) at exit.
const BLOCKING_WORK_GRACE: Duration = Duration::from_secs(1);

fn main() -> std::process::ExitCode {
    // Before anything else, in every command: closed to `/proc/<pid>/fd`, `mem` and ptrace (see
    // `init::handover`: `boxd init` starts serve already so, this keeps it so).
    if let Err(err) = init::handover::restore_group() {
        eprintln!("boxd: cannot make this process non-dumpable: {err}");
        return std::process::ExitCode::FAILURE;
    }
    // `boxd init` is every image's PID 1: the SDK probes its port once, ~15 ms after the engine's start
    // returns, and sleeps a whole second if refused. Its few flags are parsed alone, before the full
    // command line (every family's flags and environment fallbacks) is even built.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|command| command == "init")
    {
        let command = init::InitCommand::parse_from(std::env::args_os().skip(1));
        return init::main(command.args);
    }
    // The guard `boxd serve` starts to stop what its children leave if it is killed: not a command for
    // users, so not in the help.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|command| command == core::child::REAPER_COMMAND)
    {
        return core::child::reaper_main(std::env::args_os().skip(2));
    }
    // Every start of every image runs `boxd serve`: its flags are parsed alone, as init's are.
    let cli = if std::env::args_os()
        .nth(1)
        .is_some_and(|command| command == "serve")
    {
        let serve = cli::ServeCommand::parse_from(std::env::args_os().skip(1));
        Cli {
            command: Command::Serve(serve.args),
        }
    } else {
        Cli::parse()
    };
    if let Command::Limits(args) = &cli.command {
        print!("{}", limits::markdown(args));
        return std::process::ExitCode::SUCCESS;
    }
    let cli = match cli.command {
        Command::Launch(args) => return launch::main(args),
        Command::Init(args) => return init::main(args),
        Command::WaitSocket(args) => return init::wait_socket::main(args),
        command => Cli { command },
    };
    // While single-threaded (it may restore environment variables): what `boxd init` hands over.
    let handed = match &cli.command {
        Command::Serve(ServeArgs {
            handover_fd: Some(fd),
            ..
        }) => match init::handover::request(*fd) {
            Ok(handed) => Some(handed),
            Err(err) => {
                // Not a usage error: init keeps the secrets, and the next start asks again.
                eprintln!("boxd: cannot get the listener and the secrets from boxd init: {err}");
                return std::process::ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    // Before any thread or child exists: the token was read into `cli`; no child may inherit it.
    core::child::withhold_from_children(init::secrets::SECRET_VARIABLES);
    core::memory::configure_allocator();
    if let Err(err) = core::file_size::survive_file_size_limit() {
        eprintln!("boxd: cannot handle SIGXFSZ: {err}");
        return std::process::ExitCode::FAILURE;
    }
    let instance = match &cli.command {
        Command::Serve(args) => Some(core::child::instance_key(
            &std::path::absolute(&args.workspace).unwrap_or_else(|_| args.workspace.clone()),
            args.port,
        )),
        Command::McpStdio(_)
        | Command::Limits(_)
        | Command::Launch(_)
        | Command::Init(_)
        | Command::WaitSocket(_) => None,
    };
    if let Some(key) = &instance {
        core::child::mark_children(key);
    }
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
        .max_blocking_threads(limits::MAX_BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("boxd: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args, instance.unwrap_or_default(), handed)),
        Command::McpStdio(args) => runtime.block_on(mcp_server::relay::run(&args.url, &args.token)),
        Command::Limits(_) | Command::Launch(_) | Command::Init(_) | Command::WaitSocket(_) => {
            Ok(())
        }
    };
    // Dropping the runtime would wait without limit for blocking-pool threads; a stop is bounded.
    runtime.shutdown_timeout(BLOCKING_WORK_GRACE);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            eprintln!("boxd: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Pool mode under `boxd init`: the claim an earlier serve made holds again (a tenant that kills serve
/// must not reopen `POST /init` to the pool secret), and a claim made here is kept by init.
fn keep_claims(
    pool: &auth::Pool,
    claim: Option<init::handover::ClaimRecord>,
    claims: init::handover::ClaimReporter,
) {
    if let Some(claim) = claim {
        let token = claim.token;
        if pool.claim(&token, || core::child::set_runtime_environment(claim.env)) {
            tracing::info!(
                "pool mode: claimed before this start; only its session token is accepted"
            );
        }
    }
    pool.keep_claims_with(Arc::new(move |token: &str, env: &[(String, String)]| {
        let record = init::handover::ClaimRecord {
            token: token.to_string(),
            env: env.to_vec(),
        };
        claims.report(&record).map_err(|err| err.to_string())
    }));
}

async fn serve(
    mut args: ServeArgs,
    instance: String,
    handed: Option<init::handover::Received>,
) -> Result<(), String> {
    // `boxd init` handed over: it is PID 1 (or a subreaper) and stops what boxd's children leave the
    // moment boxd exits, whatever killed it (`init::supervise`), so no guard of boxd's own is needed.
    let under_init = handed.is_some();
    let mut handed_listener = None;
    let mut handed_claim = None;
    if let Some(mut handed) = handed {
        args.token = handed.secrets.remove(init::secrets::TOKEN);
        args.adb.adb_key = handed.secrets.remove(init::secrets::ADB_KEY);
        args.pool_secret = handed.secrets.remove(init::secrets::POOL_SECRET);
        handed_listener = handed.listener;
        handed_claim = Some((handed.claim, handed.claims));
    }
    let token = args.token.clone().filter(|token| !token.is_empty());
    let pool_secret = args.pool_secret.clone().filter(|secret| !secret.is_empty());
    let auth = match (pool_secret, &args.pool_secret_file, token) {
        (Some(_), Some(_), _) => {
            return Err(
                "pool mode takes one pool secret: BOXD_POOL_SECRET or --pool-secret-file, not both"
                    .into(),
            );
        }
        (Some(_), None, Some(_)) | (None, Some(_), Some(_)) => {
            return Err(
                "pool mode (BOXD_POOL_SECRET, --pool-secret-file) takes its token from POST /init; \
                 unset SECRET_TOKEN (--token)"
                    .into(),
            );
        }
        (Some(secret), None, None) => auth::Auth::pool_from_secret(&secret, "BOXD_POOL_SECRET")?,
        (None, Some(path), None) => auth::Auth::pool_from_file(path)?,
        (None, None, Some(token)) => {
            if token.len() < auth::MIN_POOL_SECRET {
                // Kept working (upstream's docs publish a 15-character token), but said loudly.
                tracing::warn!(
                    length = token.len(),
                    "SECRET_TOKEN is shorter than {} characters: guessable by anyone who reaches                      the port (the SDK's manager gives 32)",
                    auth::MIN_POOL_SECRET
                );
            }
            auth::Auth::fixed(&token)
        }
        (None, None, None) => {
            let token = core::secret::generate();
            eprintln!("boxd: SECRET_TOKEN is not set; generated token: {token}");
            auth::Auth::fixed(&token)
        }
    };
    if let (Some(pool), Some((claim, claims))) = (auth.pool_mode(), handed_claim) {
        keep_claims(pool, claim, claims);
    }
    if args.max_output == 0 {
        return Err("--max-output must be positive".into());
    }
    api::events::set_keep_alive(core::deadline::positive_seconds(
        "--keep-alive",
        args.keep_alive,
    )?);
    let workspace = core::confine::Workspace::open(&args.workspace)
        .map_err(|err| format!("cannot open workspace {}: {err}", args.workspace.display()))?;

    let tools = Arc::new(ToolRegistry::default());
    tools.reserve_group(tools::GENERIC_GROUP);
    let live = core::live::ProcessManager::new(
        Arc::new(workspace.clone()),
        processes::table_limits(&args.processes)?,
    );
    let claim = auth.claim_state();
    let commands = family::command_admission();
    let setup = Setup {
        allow_dirs: &args.allow_dirs,
        max_output: args.max_output,
        workspace: &workspace,
        tools: &tools,
        live: &live,
        claim: &claim,
        commands: &commands,
    };
    let families = Arc::new(cli::build_families(&setup, &args)?);
    families
        .register_tools(&tools)
        .map_err(|err| err.to_string())?;
    core::child::set_family_environment(families.child_environment());
    let confined_uids = families.confined_uids();
    if !confined_uids.is_empty() {
        tracing::info!(
            ?confined_uids,
            "users whose loopback connections boxd refuses"
        );
    }

    let stop_requested = stop_signal()?;
    // Idle clients must not be what runs boxd out of descriptors: take all the hard limit allows.
    let fd_limit = http::serve::raise_fd_limit();
    let listener = match handed_listener {
        Some(listener) => http::serve::adopt_listener(listener)?,
        None => TcpListener::bind((args.host.as_str(), args.port))
            .await
            .map_err(|err| format!("cannot listen on {}:{}: {err}", args.host, args.port))?,
    };
    let address: SocketAddr = listener.local_addr().map_err(|err| err.to_string())?;
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    // Only once the port is ours (another live boxd of the same instance cannot exist then), and before
    // any child exists (each carries the instance's marker): what a previous boxd left is stopped, then
    // the guard and the families start. Off the way of the listener, and after the first answer
    // (`core::start_gate`): a `/proc` scan takes milliseconds on a busy host, and until the families
    // start their tools and routes wait as for any family that is starting.
    let starting = Arc::clone(&families);
    let stopped = stop_rx.clone();
    tokio::spawn(async move {
        core::start_gate::opened().await;
        let previous = instance.clone();
        let leftovers = tokio::task::spawn_blocking(move || core::child::stop_leftovers(&previous))
            .await
            .unwrap_or(0);
        if leftovers > 0 {
            tracing::warn!(
                leftovers,
                "stopped processes a previous boxd of this workspace left running"
            );
        }
        if *stopped.borrow() {
            return;
        }
        // Before any child exists: whatever kills boxd from now on, what its children leave is stopped.
        if !under_init {
            core::child::spawn_reaper(instance);
        }
        starting.start();
    });
    tracing::info!(
        workspace = %workspace.root().display(),
        version = env!("CARGO_PKG_VERSION"),
        "boxd listening on http://{address}"
    );

    let stopping = Arc::clone(&families);
    tokio::spawn(async move {
        stop_requested.await;
        // Families stop first (live processes, kernel, hosted servers), so the streams following
        // them end and do not hold the stop.
        stopping.stop().await;
        let _ = stop_tx.send(true);
    });
    let mut graceful_stop = stop_rx.clone();
    let front = http::front::Front::new(&args.front, &auth)?;
    let router = http::router(http::Core {
        tools: Arc::clone(&tools),
        families: Arc::clone(&families),
        tool_routes: mcp_server::routes(Arc::clone(&tools)),
        auth,
        front,
        body_pace: http::body_pace::BodyPace {
            idle_timeout: core::deadline::positive_seconds(
                "--body-idle-timeout",
                args.body_idle_timeout,
            )?,
            min_rate: args.body_min_rate,
        },
    });
    let limits = http::serve::Limits {
        peers: Arc::new(core::peer::PeerRule::AllBut(confined_uids)),
        max_connections: http::serve::connection_cap(fd_limit),
        header_timeout: core::deadline::positive_seconds("--header-timeout", args.header_timeout)?,
    };
    tracing::debug!(
        fd_limit,
        max_connections = limits.max_connections,
        "connection limits"
    );
    core::memory::spawn_trimmer();
    let server = http::serve::serve(listener, router, limits, async move {
        let _ = graceful_stop.wait_for(|stopped| *stopped).await;
        tracing::info!("stop signal received; finishing in-flight requests");
    });
    tokio::select! {
        () = server => Ok(()),
        _ = async {
            let _ = stop_rx.wait_for(|stopped| *stopped).await;
            tokio::time::sleep(limits::SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!(grace = ?limits::SHUTDOWN_GRACE, "in-flight requests did not finish; exiting anyway");
            Ok(())
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve`'s arguments with every family on, on a scratch workspace.
    fn every_family_on(workspace: &std::path::Path) -> ServeArgs {
        let every: Vec<&str> = family_names().collect();
        let cli = Cli::try_parse_from([
            "boxd",
            "serve",
            "--workspace",
            &workspace.to_string_lossy(),
            "--tools",
            &every.join(","),
        ]);
        match cli {
            Ok(Cli {
                command: Command::Serve(args),
            }) => args,
            other => panic!("serve arguments do not parse: {other:?}"),
        }
    }

    /// Every family's tools, registered as `serve --tools <all of them>` registers them.
    fn every_tool() -> Vec<Arc<tools::Tool>> {
        let workspace = std::env::temp_dir().join(format!("boxd-families-{}", std::process::id()));
        let args = every_family_on(&workspace);
        let opened = core::confine::Workspace::open(&args.workspace);
        let Ok(opened) = opened else {
            panic!("workspace: {:?}", opened.err());
        };
        let registry = Arc::new(ToolRegistry::default());
        let live = core::live::ProcessManager::new(
            Arc::new(opened.clone()),
            processes::table_limits(&args.processes).unwrap_or_else(|err| panic!("{err}")),
        );
        let setup = Setup {
            allow_dirs: &args.allow_dirs,
            max_output: args.max_output,
            workspace: &opened,
            tools: &registry,
            live: &live,
            claim: &core::claim::Claim::claimed(),
            commands: &family::command_admission(),
        };
        let families = match build_families(&setup, &args) {
            Ok(families) => families,
            Err(err) => panic!("families: {err}"),
        };
        assert!(families.register_tools(&registry).is_ok());
        let _ = std::fs::remove_dir_all(&workspace);
        registry.snapshot()
    }

    #[tokio::test]
    async fn every_tool_is_declared_with_its_argument_struct() {
        let tools = every_tool();
        assert!(tools.len() > 30, "{} tools", tools.len());
        for tool in tools {
            assert!(
                tool.is_declared(),
                "{} is not declared with its argument struct (ToolSpec::declare)",
                tool.name
            );
        }
    }

    /// Upstream's listing of every built-in tool (description and input schema, exactly as the
    /// servers boxd replaces advertise them), kept in `tests/upstream-schemas/<group>.json`: what a
    /// tool advertises is derived from its declaration, and this holds the derivation to upstream's
    /// text key by key (names, types, required, enums, defaults, descriptions). The optional
    /// arguments boxd adds to an upstream tool are listed by name in
    /// `tests/upstream-schemas/extensions.json` (group -> tool -> names): each must be advertised,
    /// optional, and not upstream's, and the rest of the listing is held to upstream's as it is.
    /// `BOXD_BLESS=1` rewrites the files from the code (extensions left out), for a tool that is new
    /// or changed on purpose.
    #[tokio::test]
    async fn every_tool_advertises_upstream_s_listing() {
        type Listing = serde_json::Map<String, serde_json::Value>;
        let folder =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream-schemas");
        let extensions_path = folder.join("extensions.json");
        let extensions: std::collections::BTreeMap<
            String,
            std::collections::BTreeMap<String, Vec<String>>,
        > = serde_json::from_str(&std::fs::read_to_string(&extensions_path).unwrap_or_default())
            .unwrap_or_else(|err| panic!("{}: {err}", extensions_path.display()));
        let mut by_group: std::collections::BTreeMap<String, Listing> = Default::default();
        let mut extended = 0;
        for tool in every_tool() {
            let mut schema = (*tool.input_schema).clone();
            let added = extensions
                .get(&tool.group)
                .and_then(|tools| tools.get(&tool.name));
            for name in added.into_iter().flatten() {
                let required = schema["required"]
                    .as_array()
                    .is_some_and(|list| list.iter().any(|item| item == name.as_str()));
                assert!(
                    !required,
                    "{}: boxd's argument {name} is required",
                    tool.name
                );
                let removed = schema["properties"]
                    .as_object_mut()
                    .and_then(|properties| properties.remove(name));
                assert!(
                    removed.is_some(),
                    "{}: boxd's argument {name} is listed in {} but not advertised",
                    tool.name,
                    extensions_path.display()
                );
                extended += 1;
            }
            by_group.entry(tool.group.clone()).or_default().insert(
                tool.name.clone(),
                serde_json::json!({"description": tool.description, "inputSchema": schema}),
            );
        }
        let listed: usize = extensions
            .values()
            .flat_map(|tools| tools.values())
            .map(Vec::len)
            .sum();
        assert_eq!(
            extended,
            listed,
            "{} names a tool that does not exist",
            extensions_path.display()
        );
        let bless = std::env::var_os("BOXD_BLESS").is_some();
        for (group, listing) in by_group {
            let path = folder.join(format!("{group}.json"));
            if bless {
                let text = serde_json::to_string_pretty(&listing).unwrap_or_default() + "\n";
                assert!(std::fs::write(&path, text).is_ok(), "{}", path.display());
                continue;
            }
            let recorded: Listing =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default())
                    .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            let names = |map: &Listing| -> Vec<String> { map.keys().cloned().collect() };
            assert_eq!(names(&listing), names(&recorded), "tools of group {group}");
            for (name, advertised) in &listing {
                assert_eq!(
                    Some(advertised),
                    recorded.get(name),
                    "{name} (group {group}) advertises another listing than upstream's in {}",
                    path.display()
                );
            }
        }
    }

    /// The `--long` names of a family's own flags: those of its `{Name}Args`, which clap keeps as
    /// the group of the flattened struct.
    fn flags_of(family: &str) -> Vec<String> {
        use clap::CommandFactory;
        let mut name = family.chars();
        let group_id = name
            .next()
            .map(|first| format!("{}{}Args", first.to_uppercase(), name.as_str()))
            .unwrap_or_default();
        let cli = Cli::command();
        let Some(serve) = cli.find_subcommand("serve") else {
            return Vec::new();
        };
        let Some(group) = serve
            .get_groups()
            .find(|group| group.get_id() == group_id.as_str())
        else {
            return Vec::new();
        };
        group
            .get_args()
            .filter_map(|id| serve.get_arguments().find(|arg| arg.get_id() == id))
            // Hidden flags are not for users (a secret's flag is meant to come from the environment).
            .filter(|arg| !arg.is_hide_set())
            .filter_map(|arg| arg.get_long().map(|long| format!("`--{long}`")))
            .collect()
    }

    /// The README's family table, from the family list and each family's flags (its tools are listed
    /// with their routes in the README's sections, so a new tool does not touch this table).
    fn families_markdown() -> String {
        let mut table = String::from("| family | on by default | its flags |\n|---|---|---|\n");
        for entry in FAMILIES {
            let flags = flags_of(entry.name);
            table.push_str(&format!(
                "| `{}` | {} | {} |\n",
                entry.name,
                if entry.on_by_default { "yes" } else { "no" },
                if flags.is_empty() {
                    "–".to_owned()
                } else {
                    flags.join(", ")
                },
            ));
        }
        table
    }

    /// The README's family table is the code's but for its second column, "what it serves", which is
    /// prose: run this test, paste what it prints, and write a new family's cell. Read at run time, so
    /// editing the README recompiles nothing.
    #[test]
    fn the_readme_lists_the_families_as_the_code_has_them() {
        let table = families_markdown();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let readme = std::fs::read_to_string(path).unwrap_or_default();
        let listed = readme
            .split_once("<!-- families:start -->\n")
            .and_then(|(_, rest)| rest.split_once("<!-- families:end -->"))
            .map(|(listed, _)| {
                listed
                    .lines()
                    .map(|row| {
                        let mut cells: Vec<&str> = row.split('|').collect();
                        if cells.len() > 2 {
                            cells.remove(2);
                        }
                        cells.join("|") + "\n"
                    })
                    .collect::<String>()
            });
        assert_eq!(
            listed.as_deref(),
            Some(table.as_str()),
            "README's family table differs from the code; without its \"what it serves\" column it is:\n{table}"
        );
    }

    /// `--tools`' help names the families that are off by default.
    #[test]
    fn the_tools_help_names_the_families_off_by_default() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let help = cli
            .find_subcommand("serve")
            .and_then(|serve| {
                serve
                    .get_arguments()
                    .find(|arg| arg.get_long() == Some("tools"))
            })
            .and_then(|arg| arg.get_help())
            .map(|help| help.to_string())
            .unwrap_or_default();
        for entry in FAMILIES.iter().filter(|entry| !entry.on_by_default) {
            assert!(help.contains(&format!("`{}`", entry.name)), "{help}");
        }
    }
}
