//! The `sandboxd` family: its two listeners (gRPC `ProcessService`, REST files and runtime), started
//! with the family and stopped with it, and the legacy python-runtime routes on boxd's router.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::admission::{self, AdmittedListener, AllowedHosts};
use super::grpc::Processes;
use super::pb::process_service_server::ProcessServiceServer;
use super::rest::{Rest, metadata_env};
use crate::core::admission::Admission;
use crate::core::claim::Claim;
use crate::core::confine::Workspace;
use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::core::live::ProcessManager;
use crate::family::limits::{Limit, bytes, flag_seconds};
use crate::family::{BoxFuture, Family, Setup};

struct Sandboxd {
    exec_timeout: Duration,
    /// The gate one-shot commands share with the shell family.
    commands: Admission,
    /// Nothing is served before the claim (pool mode).
    claim: Claim,
    /// The host names REST answers under.
    allowed_hosts: AllowedHosts,
    grpc_address: String,
    rest_address: String,
    workspace: Arc<Workspace>,
    live: Arc<ProcessManager>,
    rest: Arc<Rest>,
    /// Flipped at stop: both servers finish their open calls and close.
    stop: watch::Sender<bool>,
}

// The `sandboxd` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct SandboxdArgs {
    /// Where sandboxd's gRPC ProcessService listens (HOST:PORT; agent-sandbox's SDK dials it). No
    /// token: keep it on loopback unless the pod network is fenced (README)
    #[arg(
        long = "sandboxd-grpc-addr",
        env = "SANDBOXD_GRPC_ADDR",
        default_value = "127.0.0.1:9090"
    )]
    pub sandboxd_grpc_addr: String,
    /// Where sandboxd's Filesystem & Runtime REST API listens (HOST:PORT). No token, as above
    #[arg(
        long = "sandboxd-rest-addr",
        env = "SANDBOXD_REST_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub sandboxd_rest_addr: String,
    /// Seconds a legacy `/execute` command may run when its request names no `timeout_seconds` (the
    /// python-runtime's own variable); then its process group is killed
    #[arg(
        long = "sandboxd-exec-timeout",
        env = "SANDBOX_EXEC_TIMEOUT_SECONDS",
        default_value_t = 300.0
    )]
    pub sandboxd_exec_timeout: f64,
    /// More host names sandboxd's REST API answers under (comma-separated), besides IP addresses,
    /// `localhost` and this machine's name: a name a DNS-rebinding page could use is refused
    #[arg(
        long = "sandboxd-allowed-hosts",
        env = "SANDBOXD_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub sandboxd_allowed_hosts: Vec<String>,
}

pub fn family(setup: &Setup, args: &SandboxdArgs) -> crate::family::Built {
    let workspace = Arc::new(setup.workspace.clone());
    let (stop, _) = watch::channel(false);
    let exec_timeout = crate::core::deadline::positive_seconds(
        "--sandboxd-exec-timeout",
        args.sandboxd_exec_timeout,
    )?;
    Ok(Arc::new(Sandboxd {
        exec_timeout,
        commands: setup.commands.clone(),
        claim: setup.claim.clone(),
        allowed_hosts: AllowedHosts::new(&args.sandboxd_allowed_hosts),
        grpc_address: args.sandboxd_grpc_addr.clone(),
        rest_address: args.sandboxd_rest_addr.clone(),
        rest: Arc::new(Rest {
            workspace: Arc::clone(&workspace),
            started: Instant::now(),
            stopping: Arc::new(AtomicBool::new(false)),
            metadata: metadata_env(std::env::vars()),
        }),
        workspace,
        live: Arc::clone(setup.live),
        stop,
    }))
}

pub fn limits(args: &SandboxdArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "sandboxd",
            "default time of a legacy `/execute` command",
            flag_seconds(args.sandboxd_exec_timeout, "--sandboxd-exec-timeout"),
            "its process group is killed; exit code 124, `timed_out`",
        ),
        Limit::new(
            "sandboxd",
            "output kept per stream of one `Execute` or legacy `/execute`",
            bytes(crate::family::limits::as_u64(super::run::OUTPUT_MAX)),
            "the first and last halves kept, with `[boxd: output truncated, N bytes omitted]` between",
        ),
    ]
}

impl Family for Sandboxd {
    fn name(&self) -> &'static str {
        "sandboxd"
    }

    fn routes(&self) -> Router {
        super::legacy::routes(
            Arc::clone(&self.workspace),
            self.exec_timeout,
            self.commands.clone(),
        )
    }

    /// The running processes of the table of live processes, when no earlier family (`processes`)
    /// counted them.
    fn held_processes(&self) -> Vec<Held> {
        self.live
            .running_pids()
            .into_iter()
            .map(Held::Tree)
            .collect()
    }

    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let (grpc, rest) = match (
                TcpListener::bind(self.grpc_address.as_str()).await,
                TcpListener::bind(self.rest_address.as_str()).await,
            ) {
                (Ok(grpc), Ok(rest)) => (grpc, rest),
                (Err(err), _) => {
                    return health.failed(format!(
                        "cannot listen on {} (--sandboxd-grpc-addr): {err}",
                        self.grpc_address
                    ));
                }
                (_, Err(err)) => {
                    return health.failed(format!(
                        "cannot listen on {} (--sandboxd-rest-addr): {err}",
                        self.rest_address
                    ));
                }
            };
            let (grpc_at, rest_at) = (local(&grpc), local(&rest));
            let grpc_router = self
                .grpc_router()
                .layer(axum::middleware::from_fn(admission::require_grpc));
            let rest_router = super::rest::router(Arc::clone(&self.rest)).layer(
                axum::middleware::from_fn_with_state(
                    self.allowed_hosts.clone(),
                    admission::require_allowed_host,
                ),
            );
            for (listener, router) in [(grpc, grpc_router), (rest, rest_router)] {
                let router = router
                    .layer(axum::middleware::from_fn_with_state(
                        self.claim.clone(),
                        admission::require_claim,
                    ))
                    .layer(axum::middleware::from_fn(note_the_request));
                let listener = AdmittedListener::new(listener, admission::peer_rule());
                tokio::spawn(serve(listener, router, self.stop.subscribe()));
            }
            tracing::info!(
                grpc = %grpc_at,
                rest = %rest_at,
                "sandboxd listening: gRPC on {grpc_at}, REST on {rest_at}; no token: only processes of \
                 boxd's own user (and peers from outside this network namespace) may connect"
            );
            health.ready();
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.rest.stopping.store(true, Ordering::Relaxed);
            // Start streams end once their processes do; the processes family (if on) does the same.
            let live = Arc::clone(&self.live);
            let _ = tokio::task::spawn_blocking(move || live.shutdown()).await;
            let _ = self.stop.send(true);
        })
    }
}

impl Sandboxd {
    /// `ProcessService` and server reflection (v1 and v1alpha: grpcurl asks for either).
    fn grpc_router(&self) -> Router {
        let processes = ProcessServiceServer::new(Processes {
            live: Arc::clone(&self.live),
            workspace: Arc::clone(&self.workspace),
            exec_timeout: self.exec_timeout,
            commands: self.commands.clone(),
        });
        let mut routes = tonic::service::Routes::new(processes);
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(super::pb::FILE_DESCRIPTOR_SET);
        match reflection.build_v1() {
            Ok(service) => routes = routes.add_service(service),
            Err(err) => tracing::warn!(%err, "gRPC reflection (v1) is off"),
        }
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(super::pb::FILE_DESCRIPTOR_SET);
        match reflection.build_v1alpha() {
            Ok(service) => routes = routes.add_service(service),
            Err(err) => tracing::warn!(%err, "gRPC reflection (v1alpha) is off"),
        }
        routes.into_axum_router()
    }
}

fn local(listener: &TcpListener) -> String {
    listener.local_addr().map_or_else(
        |_| "?".to_owned(),
        |address: SocketAddr| address.to_string(),
    )
}

/// A request on these listeners is a client come, as on boxd's own port (see `core::first_request`).
async fn note_the_request(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    crate::core::first_request::arrived();
    next.run(request).await
}

/// Serves `router` on `listener` (HTTP/1 and h2c) until `stop` flips, letting open calls finish.
async fn serve(listener: AdmittedListener, router: Router, mut stop: watch::Receiver<bool>) {
    let stopped = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    if let Err(err) = axum::serve(listener, router)
        .with_graceful_shutdown(stopped)
        .await
    {
        tracing::warn!(%err, "a sandboxd listener failed");
    }
}
