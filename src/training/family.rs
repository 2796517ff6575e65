//! The `training` family: the SDK's training sandboxes (BFCL, AppWorld) served natively, one supervised
//! Python worker per instance, a warm spare, idle release.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use super::instances::{Environment, InstanceLimits};
use super::tenancy::{UidPool, Users};
use super::worker::{EnvironmentKind, Launch};
use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::family::limits::{Limit, bytes, count, flag_seconds, seconds};
use crate::family::{BoxFuture, Family, Setup};

/// How long a worker may take to import its library and load its data.
const WORKER_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How often idle instances are looked for, at most.
const IDLE_SWEEP_MAX: Duration = Duration::from_secs(60);

struct Training {
    environment: Arc<Environment>,
}

impl Family for Training {
    fn name(&self) -> &'static str {
        "training"
    }

    /// The client sends no token: these routes hold only the environments' simulated state (see the
    /// README's trust model).
    fn public_routes(&self) -> Router {
        super::routes::routes(Arc::clone(&self.environment))
    }

    /// The client polls `/healthz` without a token before every operation.
    fn health_without_token(&self) -> bool {
        true
    }

    /// The workers' uids when boxd switches users (the whole `--training-uids` range, or the one
    /// `--training-user`): the policy code of an instance must not reach boxd's tokenless routes over
    /// loopback where no network namespace of its own keeps it off them.
    fn confined_uids(&self) -> Vec<std::ops::RangeInclusive<u32>> {
        self.environment.users().confined_uids()
    }

    fn held_processes(&self) -> Vec<Held> {
        self.environment.held_processes()
    }

    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            health.starting(format!(
                "loading the {} environment",
                self.environment.name()
            ));
            if let Err(reason) = self.environment.prepare().await {
                return health.failed(reason);
            }
            let sweeper = Arc::clone(&self.environment);
            tokio::spawn(async move {
                let period = (sweeper.limits().idle_release / 4)
                    .clamp(Duration::from_millis(100), IDLE_SWEEP_MAX);
                let mut ticks = tokio::time::interval(period);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    sweeper.release_idle();
                }
            });
            tracing::info!(
                "the {} workers run as {}",
                self.environment.name(),
                self.environment.users().describe()
            );
            self.environment.start(health).await;
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.environment.stop().await;
            let directory = self.environment.directory().to_path_buf();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(directory)).await;
        })
    }
}

// The `training` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct TrainingArgs {
    /// The training environment served at `/create`, `/step`, ... (one per sandbox, as upstream).
    #[arg(long, env = "BOXD_TRAINING_ENV", default_value = "bfcl", value_enum)]
    pub training_env: EnvironmentKind,
    /// The Python interpreter that has the environment's library (`bfcl-eval`, `appworld`).
    #[arg(long, env = "BOXD_TRAINING_PYTHON", default_value = "python3")]
    pub training_python: String,
    /// Training instances alive at once (each one is a Python process).
    #[arg(long, env = "BOXD_TRAINING_MAX_INSTANCES", default_value_t = 64)]
    pub training_max_instances: usize,
    /// Seconds after which an instance no request touched is released.
    #[arg(long, env = "BOXD_TRAINING_IDLE_RELEASE", default_value_t = 3600.0)]
    pub training_idle_release: f64,
    /// Seconds one create, step, evaluate or get_info may take before its worker is stopped.
    #[arg(long, env = "BOXD_TRAINING_CALL_TIMEOUT", default_value_t = 600.0)]
    pub training_call_timeout: f64,
    /// MiB of address space one process of an instance may map (its `RLIMIT_AS`).
    #[arg(long, env = "BOXD_TRAINING_MEMORY_MAX", default_value_t = 4096)]
    pub training_memory_max: u64,
    /// Seconds of CPU time one process of an instance may use (its `RLIMIT_CPU`; past it the process is
    /// killed, and with the worker its instance).
    #[arg(long, env = "BOXD_TRAINING_CPU_MAX", default_value_t = 1800)]
    pub training_cpu_max: u64,
    /// Processes and threads one instance may have at once (`RLIMIT_NPROC`, counted per uid: taken only
    /// with `--training-uids`).
    #[arg(long, env = "BOXD_TRAINING_PROCESSES_MAX", default_value_t = 256)]
    pub training_processes_max: u64,
    /// The unprivileged user every environment worker runs as when boxd runs as root and
    /// `--training-uids` is not given (a name in /etc/passwd, or UID[:GID]; neither uid 0 nor gid 0):
    /// AppWorld's `execute` runs the policy's code in its worker. One user for all instances does not
    /// isolate them from each other: prefer `--training-uids`. boxd unprivileged runs them as itself.
    #[arg(long, env = "BOXD_TRAINING_USER")]
    pub training_user: Option<String>,
    /// FIRST-LAST: when boxd runs as root, every worker (one per instance, and the spare) runs as a uid of
    /// its own from this range, with a group of the same number and no other, in a home of its own (0700)
    /// removed at release, and release kills every process of that uid (even ones that left the group).
    /// Takes precedence over `--training-user`. The range must hold no uid 0 and be used by nothing
    /// else: processes of its uids are killed when boxd starts, and before a uid is handed out. It needs
    /// at least `--training-max-instances` + 2 uids (the images: 50000-50199). Ignored when boxd is
    /// unprivileged.
    #[arg(long, env = "BOXD_TRAINING_UIDS", value_name = "FIRST-LAST")]
    pub training_uids: Option<String>,
}

pub fn family(_setup: &Setup, args: &TrainingArgs) -> Result<Arc<dyn Family>, String> {
    use crate::core::deadline::positive_seconds;
    let max_live = args.training_max_instances.max(1);
    let users = users(args, max_live)?;
    let network_namespace = match super::tenancy::probe_network_namespace() {
        Ok(()) => {
            tracing::info!(
                "each training worker gets a network namespace of its own (no loopback to boxd)"
            );
            true
        }
        Err(err) if users.confined_uids().is_empty() => {
            tracing::info!(
                error = %err,
                "training workers cannot get a network namespace of their own, and they run as \
                 boxd's own user: their code can reach boxd's loopback listeners"
            );
            false
        }
        Err(err) => {
            tracing::info!(
                error = %err,
                confined_uids = ?users.confined_uids(),
                "training workers cannot get a network namespace of their own; boxd's listeners \
                 refuse loopback connections from the workers' uids instead"
            );
            false
        }
    };
    let launch = Launch {
        python: crate::core::child::interpreter_path(&args.training_python),
        environment: args.training_env,
        directory: scratch_directory()?,
        start_timeout: WORKER_START_TIMEOUT,
        memory_max: args.training_memory_max.max(64).saturating_mul(1024 * 1024),
        cpu_seconds: args.training_cpu_max.max(1),
        processes_max: args.training_processes_max.max(8),
        users,
        network_namespace,
    };
    let limits = InstanceLimits {
        max_live,
        idle_release: positive_seconds("--training-idle-release", args.training_idle_release)?,
        call_timeout: positive_seconds("--training-call-timeout", args.training_call_timeout)?,
    };
    Ok(Arc::new(Training {
        environment: Arc::new(Environment::new(launch, limits)),
    }))
}

/// Who the workers run as, from `--training-uids` and `--training-user`.
fn users(args: &TrainingArgs, max_live: usize) -> Result<Users, String> {
    use crate::core::child::{Identity, boxd_is_root};
    if let Some(spec) = args
        .training_uids
        .as_deref()
        .map(str::trim)
        .filter(|spec| !spec.is_empty())
    {
        let range = super::tenancy::parse_uid_range(spec)
            .map_err(|err| format!("--training-uids: {err}"))?;
        if !boxd_is_root() {
            tracing::info!(
                "boxd is not root, so its --training-uids is not taken: the workers run as boxd's own user"
            );
            return Ok(Users::Own);
        }
        let pool = UidPool::new(range);
        // The instances, the spare, and one starting while a released uid is being reaped.
        let needed = max_live.saturating_add(2);
        if pool.len() < needed {
            return Err(format!(
                "--training-uids: {spec} holds {} uids; --training-max-instances {max_live} needs at \
                 least {needed}",
                pool.len()
            ));
        }
        return Ok(Users::PerInstance(Arc::new(pool)));
    }
    let user = Identity::for_child("training", "--training-user", args.training_user.as_deref())
        .map_err(|err| format!("--training-user: {err}"))?;
    match user {
        Some(user) if user.gid == 0 || user.groups.contains(&0) => Err(format!(
            "--training-user: {} is in group 0 (root's): give a user outside it",
            user.describe()
        )),
        Some(user) => Ok(Users::Shared(user)),
        None => Ok(Users::Own),
    }
}

/// The workers' working directory: this boxd's own, private (0700, made by `start`), under the
/// temporary directory (bfcl-eval writes beside its cwd; a shared, predictable `/tmp` path would be
/// anyone's to plant).
fn scratch_directory() -> Result<std::path::PathBuf, String> {
    let mut random = [0u8; 6];
    getrandom::fill(&mut random).map_err(|err| format!("no randomness: {err}"))?;
    Ok(std::env::temp_dir().join(format!(
        "boxd-training-{}-{}",
        std::process::id(),
        hex::encode(random)
    )))
}

/// The bounds the `training` family keeps, for `boxd limits`.
pub fn limits(args: &TrainingArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "training",
            "instances alive at once",
            format!(
                "{} (`--training-max-instances`)",
                count(args.training_max_instances)
            ),
            "429; release one first",
        ),
        Limit::new(
            "training",
            "idle time of an instance",
            flag_seconds(args.training_idle_release, "--training-idle-release"),
            "the instance is released (its id then answers `not found`)",
        ),
        Limit::new(
            "training",
            "one create, step, evaluate or get_info",
            flag_seconds(args.training_call_timeout, "--training-call-timeout"),
            "504; the worker is stopped and the instance is gone",
        ),
        Limit::new(
            "training",
            "loading an environment (a worker's start)",
            seconds(WORKER_START_TIMEOUT),
            "503 naming the cause; `/readyz` says it",
        ),
        Limit::new(
            "training",
            "address space of one process of an instance",
            format!("{} MiB (`--training-memory-max`)", args.training_memory_max),
            "allocations fail in that worker: an error answer (500), or the instance is gone (502)",
        ),
        Limit::new(
            "training",
            "CPU time of one process of an instance",
            format!("{} s (`--training-cpu-max`)", args.training_cpu_max),
            "the process is killed (the worker: its instance is gone, 502)",
        ),
        Limit::new(
            "training",
            "processes and threads of one instance (with `--training-uids`)",
            format!(
                "{} (`--training-processes-max`)",
                count(usize::try_from(args.training_processes_max).unwrap_or(usize::MAX))
            ),
            "fork and thread creation fail in that instance",
        ),
        Limit::new(
            "training",
            "one step: content, tool calls, results (BFCL)",
            "256 Ki characters; 128 calls; 8 Mi characters of results",
            "400; calls past the results bound are not run and say so",
        ),
        Limit::new(
            "training",
            "one answer of an environment worker",
            bytes(super::worker::ANSWER_MAX as u64),
            "502; the instance is gone",
        ),
    ]
}
