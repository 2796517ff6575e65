//! The `training` family: the SDK's training sandboxes (BFCL, AppWorld) served natively, one supervised
//! Python worker per instance, a warm spare, idle release.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use super::instances::{Environment, InstanceLimits};
use super::worker::Launch;
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

    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            health.starting(format!(
                "loading the {} environment",
                self.environment.name()
            ));
            let directory = self.environment.directory().to_path_buf();
            let user = self.environment.user().cloned();
            let made = tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&directory)
                    .and_then(|()| user.map_or(Ok(()), |user| user.give(&directory)))
                    .map_err(|err| format!("cannot create {}: {err}", directory.display()))
            })
            .await;
            match made {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => return health.failed(reason),
                Err(err) => {
                    return health.failed(format!("cannot create the workers' directory: {err}"));
                }
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
            match self.environment.user() {
                Some(user) => tracing::info!(
                    "the {} workers run as {}",
                    self.environment.name(),
                    user.describe()
                ),
                None => tracing::info!(
                    "the {} workers run as boxd's own user",
                    self.environment.name()
                ),
            }
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
    #[arg(long, env = "BOXD_TRAINING_ENV", default_value = "bfcl",
          value_parser = clap::builder::PossibleValuesParser::new(["bfcl", "appworld"]))]
    pub training_env: String,
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
    /// MiB of address space one instance's worker may map (its `RLIMIT_AS`).
    #[arg(long, env = "BOXD_TRAINING_MEMORY_MAX", default_value_t = 4096)]
    pub training_memory_max: u64,
    /// The unprivileged user the environment workers run as when boxd runs as root (a name in
    /// /etc/passwd, or UID[:GID]): AppWorld's `execute` runs the policy's code in its worker. boxd
    /// unprivileged runs them as itself.
    #[arg(long, env = "BOXD_TRAINING_USER")]
    pub training_user: Option<String>,
}

pub fn family(_setup: &Setup, args: &TrainingArgs) -> Result<Arc<dyn Family>, String> {
    use crate::core::deadline::positive_seconds;
    let launch = Launch {
        python: crate::core::child::interpreter_path(&args.training_python),
        environment: args.training_env.clone(),
        directory: scratch_directory()?,
        start_timeout: WORKER_START_TIMEOUT,
        memory_max: args.training_memory_max.max(64).saturating_mul(1024 * 1024),
        user: crate::core::child::Identity::for_child(
            "training",
            "--training-user",
            args.training_user.as_deref(),
        )
        .map_err(|err| format!("--training-user: {err}"))?,
    };
    let limits = InstanceLimits {
        max_live: args.training_max_instances.max(1),
        idle_release: positive_seconds("--training-idle-release", args.training_idle_release)?,
        call_timeout: positive_seconds("--training-call-timeout", args.training_call_timeout)?,
    };
    Ok(Arc::new(Training {
        environment: Arc::new(Environment::new(launch, limits)),
    }))
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
            "address space of one instance's worker",
            format!("{} MiB (`--training-memory-max`)", args.training_memory_max),
            "allocations fail in that worker: an error answer (500), or the instance is gone (502)",
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
