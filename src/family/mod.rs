//! A family owns one capability whole: its tools, its routes and their state, its start (in the
//! background), its health and its shutdown. `main` builds the enabled ones from the family list and
//! this module runs them; nothing else knows which families exist.

pub mod limits;

use crate::core::footprint::Held;
use crate::core::health::{Health, Status};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde_json::{Map, Value, json};

use crate::tools::{RegistryError, Tool, ToolRegistry};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How long one family may take to stop before boxd goes on without it.
pub const STOP_BUDGET: Duration = Duration::from_secs(5);

pub trait Family: Send + Sync + 'static {
    /// The `--tools` name (`shell`, `processes`, ...), also its key in `/readyz`.
    fn name(&self) -> &'static str;

    /// Its tools; each call is admitted only while the family serves.
    fn tools(&self) -> Vec<Tool> {
        Vec::new()
    }

    /// Groups only this family may register tools under (besides those of its tools).
    fn reserved_groups(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Its HTTP routes with their state applied; they are put behind the bearer check.
    fn routes(&self) -> Router {
        Router::new()
    }

    /// Routes served without the bearer check, whatever the family's health: only what holds no data
    /// (a page that asks for the token itself).
    fn public_routes(&self) -> Router {
        Router::new()
    }

    /// Whether this family's clients probe `GET /healthz` without a token (agentscope-runtime's training
    /// client does); then `/healthz` answers without one, for everyone. It tells only that boxd is up.
    fn health_without_token(&self) -> bool {
        false
    }

    /// What every child of boxd (commands, cells, processes, servers) gets in its environment from this
    /// family, such as the display its desktop runs on.
    fn child_environment(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The users this family's children run untrusted code as (Chromium's renderers, a training
    /// instance's policy code): boxd's listeners refuse loopback connections from them, so such code
    /// cannot reach the tokenless routes or sandboxd's listeners. Empty when boxd does not switch users.
    fn confined_uids(&self) -> Vec<std::ops::RangeInclusive<u32>> {
        Vec::new()
    }

    /// The processes this family holds (its kernel, its browser, its servers), as it can name them, for
    /// `GET /memory`; each is counted with everything below it. Called per reading: name what runs now.
    fn held_processes(&self) -> Vec<Held> {
        Vec::new()
    }

    /// Brings the family up, in the background: long-lived children are started and probed here, and
    /// `health` is kept current (it starts as `starting`). The default has nothing to start.
    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move { health.ready() })
    }

    /// Stops what the family started. Called in reverse order of the family list, each bounded by
    /// [`STOP_BUDGET`].
    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

struct Running {
    family: Arc<dyn Family>,
    health: Health,
}

/// The enabled families, in the order of the family list.
pub struct Families {
    running: Vec<Running>,
    /// Known but not enabled: shown as `disabled` in `/readyz`.
    disabled: Vec<&'static str>,
}

impl Families {
    pub fn new(enabled: Vec<Arc<dyn Family>>, disabled: Vec<&'static str>) -> Families {
        let running = enabled
            .into_iter()
            .map(|family| Running {
                health: Health::new(family.name(), Status::Starting),
                family,
            })
            .collect();
        Families { running, disabled }
    }

    /// Registers every family's tools (gated by its health) and reserves its groups.
    pub fn register_tools(&self, registry: &ToolRegistry) -> Result<(), RegistryError> {
        for Running { family, health } in &self.running {
            for group in family.reserved_groups() {
                registry.reserve_group(group);
            }
            for tool in family.tools() {
                registry.register_builtin(tool.admitted_by(health.clone()))?;
            }
        }
        Ok(())
    }

    /// Whether an enabled family needs `/healthz` open (see [`Family::health_without_token`]).
    pub fn health_without_token(&self) -> bool {
        self.running
            .iter()
            .any(|running| running.family.health_without_token())
    }

    /// What the enabled families add to every child's environment, in family order (a later family's
    /// value for the same name wins).
    pub fn child_environment(&self) -> Vec<(String, String)> {
        self.running
            .iter()
            .flat_map(|running| running.family.child_environment())
            .collect()
    }

    /// Every enabled family's [`Family::confined_uids`].
    pub fn confined_uids(&self) -> Vec<std::ops::RangeInclusive<u32>> {
        self.running
            .iter()
            .flat_map(|running| running.family.confined_uids())
            .collect()
    }

    /// Every family's routes in one router (without state; auth is added by the caller).
    pub fn routes(&self) -> Router {
        self.running.iter().fold(Router::new(), |router, running| {
            router.merge(
                running
                    .family
                    .routes()
                    .layer(axum::middleware::from_fn_with_state(
                        running.health.clone(),
                        admit_route,
                    )),
            )
        })
    }

    /// Every family's routes served without the token.
    pub fn public_routes(&self) -> Router {
        self.running.iter().fold(Router::new(), |router, running| {
            router.merge(running.family.public_routes())
        })
    }

    /// Starts every family in the background (each one's health logs how it went).
    pub fn start(&self) {
        for Running { family, health } in &self.running {
            tokio::spawn(Arc::clone(family).start(health.clone()));
        }
    }

    /// Stops the families in reverse order, each within [`STOP_BUDGET`].
    pub async fn stop(&self) {
        for Running { family, health } in self.running.iter().rev() {
            health.unavailable("boxd is stopping");
            if tokio::time::timeout(STOP_BUDGET, family.stop())
                .await
                .is_err()
            {
                tracing::warn!(family = family.name(), budget = ?STOP_BUDGET, "family did not stop in time");
            }
        }
    }

    /// Every enabled family's name with what it holds ([`Family::held_processes`]), in family order.
    pub fn held_processes(&self) -> Vec<(&'static str, Vec<Held>)> {
        self.running
            .iter()
            .map(|running| (running.family.name(), running.family.held_processes()))
            .collect()
    }

    /// `/readyz`: every known family's state; ready when every enabled one is `ready`.
    pub fn readiness(&self) -> (bool, Value) {
        let mut families = Map::new();
        let mut ready = true;
        for Running { family, health } in &self.running {
            ready &= health.status() == Status::Ready;
            families.insert(family.name().to_owned(), health.to_json());
        }
        for name in &self.disabled {
            families.insert((*name).to_owned(), json!({"status": Status::Disabled}));
        }
        (ready, json!({"ready": ready, "families": families}))
    }
}

/// A family's routes answer 503 with the reason while it is not serving, like its tools.
async fn admit_route(
    axum::extract::State(health): axum::extract::State<Health>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match health.admit().await {
        Ok(()) => next.run(request).await,
        Err(err) => crate::api::reject_unread_body(err, request.into_body()).await,
    }
}

/// One-shot commands running at once, whichever family runs them (shell commands, sandboxd's `Execute`
/// and legacy `/execute`); past it a call waits for a place at most [`COMMAND_ADMISSION_WAIT`], then is
/// answered busy (429 with `Retry-After`, or `RESOURCE_EXHAUSTED`). Long jobs belong in `/processes`,
/// which has its own cap. 128: a burst of an agent's parallel tool calls runs at once (#21), while a
/// runaway client still cannot fork without bound, through any door.
pub const MAX_CONCURRENT_COMMANDS: usize = 128;
/// How long a command waits for a place under [`MAX_CONCURRENT_COMMANDS`] before the busy answer.
pub const COMMAND_ADMISSION_WAIT: Duration = Duration::from_millis(500);

/// The one gate of one-shot commands (see [`MAX_CONCURRENT_COMMANDS`]).
pub fn command_admission() -> crate::core::admission::Admission {
    crate::core::admission::Admission::new(
        "one-shot commands",
        MAX_CONCURRENT_COMMANDS,
        COMMAND_ADMISSION_WAIT,
    )
}

/// What a family is built from besides its own flags: the parts every family shares.
pub struct Setup<'a> {
    /// More directories than the workspace that tools may use (`--allow-dir`).
    pub allow_dirs: &'a [std::path::PathBuf],
    /// Cap in bytes on each of a command's or a cell's stdout and stderr (`--max-output`).
    pub max_output: usize,
    pub workspace: &'a crate::core::confine::Workspace,
    /// The registry, for a family that registers tools while it runs (hosted MCP servers).
    pub tools: &'a Arc<ToolRegistry>,
    /// boxd's one table of live processes, which more than one family serves (`processes`, `sandboxd`).
    pub live: &'a Arc<crate::core::live::ProcessManager>,
    /// Whether the session is claimed (pool mode); what serves without the token waits for it.
    pub claim: &'a crate::core::claim::Claim,
    /// The gate every one-shot command passes, whichever family runs it.
    pub commands: &'a crate::core::admission::Admission,
}

impl Setup<'_> {
    /// The workspace and every `--allow-dir`, as the tools that take paths from anywhere in them
    /// confine them.
    pub fn allowed_dirs(&self) -> Result<crate::core::confine::AllowedDirs, String> {
        let mut dirs = vec![self.workspace.root().to_path_buf()];
        dirs.extend(self.allow_dirs.iter().cloned());
        crate::core::confine::AllowedDirs::new(&dirs).map_err(|err| format!("--allow-dir: {err}"))
    }
}

/// A family as its builder makes it, or why it cannot be built (boxd stops at start with that message).
pub type Built = Result<Arc<dyn Family>, String>;

/// A family with routes and nothing to start or stop (workspace files, git, watch).
pub struct RoutesOnly {
    pub name: &'static str,
    pub routes: Router,
}

impl Family for RoutesOnly {
    fn name(&self) -> &'static str {
        self.name
    }

    fn routes(&self) -> Router {
        self.routes.clone()
    }
}
