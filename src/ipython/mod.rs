//! `run_ipython_cell`: a real IPython shell in a supervised Python child process (see `helper.py`).
//!
//! One worker task owns the kernel and takes cells from a queue, so cells run strictly FIFO, each answer
//! holds only its own cell's output, and a client that disconnects mid-cell cannot desynchronise the pipe.
//! A cell past its timeout is interrupted (SIGINT, state kept); one that ignores the interrupt gets its
//! kernel killed and replaced. A kernel that dies is replaced on the next cell, which is told so; one
//! whose memory grows past `--kernel-max-rss` is replaced between cells, and the next cell is told so.
//! No kernel exists until the first request reaches boxd, unless `--kernel-start eager`. Once a cell has
//! been answered, a spare kernel is kept started (see [`Spare`]), so a restart takes ~1 ms, not the
//! ~0.2 s of a fresh interpreter importing IPython.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use family::{IpythonArgs, family, limits};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};

use crate::core::admission::BUSY_RETRY_AFTER_SECONDS;
use crate::core::child::{self, Backoff, ChildGroup, Grouping, StderrTail};
use crate::core::error::ApiError;
use crate::core::first_request;
use crate::core::health::Health;
use crate::tools::{
    BadArguments, CallContext, CallToolResult, ContentItem, GENERIC_GROUP, ProgressSink, Tool,
    ToolResult, ToolSpec, timeout_argument,
};
use tokio_util::sync::CancellationToken;

mod family;
mod rss;

const HELPER: &str = include_str!("helper.py");
/// Cells waiting behind the running one, at most; one more is answered 429 with `Retry-After` at once.
/// One agent runs one cell at a time: a long queue only means many clients share the kernel.
const MAX_QUEUED_CELLS: usize = 16;
/// How long a queued cell waits for its turn; a cell not started by then is not run, and its caller
/// gets a 429 with `Retry-After` (the kernel is busy with earlier cells) rather than a long stall.
const CELL_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// Answers carry whole cell outputs; a large buffer avoids ping-ponging the pipe in small reads.
const ANSWER_BUFFER: usize = 1024 * 1024;
/// How long the spare kernel is kept while no cell comes (the next cell's answer warms a new one): a
/// sandbox its agent left holds one Python process again.
const SPARE_IDLE: Duration = Duration::from_secs(600);
/// How often an idle kernel's RSS is read (it is also read after each cell): a thread a cell left
/// running may keep growing between cells.
const RSS_CHECK_INTERVAL: Duration = Duration::from_secs(5);
const MIB: u64 = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct KernelConfig {
    pub python: String,
    pub workspace: PathBuf,
    pub default_timeout: Duration,
    pub interrupt_grace: Duration,
    pub start_timeout: Duration,
    pub max_output_bytes: usize,
    /// No kernel until the first request reaches boxd (`--kernel-start on-first-request`).
    pub wait_for_a_client: bool,
    /// Bytes of RSS (the kernel's process tree) past which it is restarted between cells.
    pub max_rss: Option<u64>,
    /// Keep a spare kernel for restarts (`--kernel-spare on`).
    pub spare: bool,
}

/// The tool's arguments, as upstream's server declared them.
#[derive(Debug, Deserialize, JsonSchema)]
struct CellRequest {
    /// IPython code to execute
    code: String,
    /// Seconds before the cell is interrupted (default set by the server)
    timeout: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
struct CellAnswer {
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    #[serde(default)]
    images: Vec<CellImage>,
}

#[derive(Debug, Deserialize)]
struct CellImage {
    #[serde(rename = "mimeType")]
    mime_type: String,
    data: String,
}

struct QueuedCell {
    code: String,
    timeout: Duration,
    /// For streaming calls: where the cell's output goes as it is written.
    progress: Option<ProgressSink>,
    /// Cancelled when the caller went away: a cell still queued then is not run at all.
    cancel: CancellationToken,
    /// Set by whichever comes first: the worker starting the cell, or its caller giving up waiting
    /// ([`CELL_QUEUE_WAIT`]); so a cell is either run and answered, or refused and never run.
    claimed: Arc<AtomicBool>,
    reply: oneshot::Sender<CallToolResult>,
}

/// Handle to the kernel worker; cheap to clone.
#[derive(Clone)]
pub struct IpythonBridge {
    queue: mpsc::Sender<QueuedCell>,
    /// Taken by the worker when the family starts.
    cells: Arc<std::sync::Mutex<Option<mpsc::Receiver<QueuedCell>>>>,
    stop: CancellationToken,
    stopped: Arc<tokio::sync::Notify>,
    default_timeout: Duration,
}

impl IpythonBridge {
    pub fn new(default_timeout: Duration) -> Self {
        let (queue, cells) = mpsc::channel(MAX_QUEUED_CELLS);
        IpythonBridge {
            queue,
            cells: Arc::new(std::sync::Mutex::new(Some(cells))),
            stop: CancellationToken::new(),
            stopped: Arc::new(tokio::sync::Notify::new()),
            default_timeout,
        }
    }

    /// Starts the worker, which warms a kernel at once (or once a client comes) so the first cell does
    /// not pay all of the start-up.
    pub fn run_worker(&self, config: KernelConfig, health: Health) {
        let cells = self
            .cells
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(cells) = cells else {
            return;
        };
        let stop = self.stop.clone();
        let stopped = Arc::clone(&self.stopped);
        tokio::spawn(async move {
            tokio::select! {
                () = worker(config, cells, health) => {},
                () = stop.cancelled() => {},
            }
            // The kernel was dropped with the worker, and its process group killed with it.
            stopped.notify_one();
        });
    }

    pub async fn stop(&self) {
        let stopped = self.stopped.notified();
        self.stop.cancel();
        stopped.await;
    }

    async fn run_cell(
        &self,
        code: String,
        timeout: Duration,
        context: CallContext,
    ) -> Result<CallToolResult, ApiError> {
        let (reply, answer) = oneshot::channel();
        let claimed = Arc::new(AtomicBool::new(false));
        self.queue
            .try_send(QueuedCell {
                code,
                timeout,
                progress: context.progress,
                cancel: context.cancel,
                claimed: Arc::clone(&claimed),
                reply,
            })
            .map_err(|err| match err {
                mpsc::error::TrySendError::Full(_) => ApiError::Busy {
                    message: format!(
                        "the IPython kernel is busy: {MAX_QUEUED_CELLS} cells are already waiting for it (the most boxd queues); retry later"
                    ),
                    retry_after_seconds: BUSY_RETRY_AFTER_SECONDS,
                },
                mpsc::error::TrySendError::Closed(_) => {
                    ApiError::Internal("the IPython worker stopped".into())
                }
            })?;
        let stopped = || ApiError::Internal("the IPython worker stopped".into());
        tokio::pin!(answer);
        tokio::select! {
            answer = &mut answer => return answer.map_err(|_| stopped()),
            () = tokio::time::sleep(CELL_QUEUE_WAIT) => {}
        }
        if !claimed.swap(true, Ordering::AcqRel) {
            return Err(ApiError::Busy {
                message: format!(
                    "the IPython kernel is busy: earlier cells kept it for {} s and this cell did not start (it was not run); retry later",
                    CELL_QUEUE_WAIT.as_secs_f64()
                ),
                retry_after_seconds: BUSY_RETRY_AFTER_SECONDS,
            });
        }
        // The worker took the cell just in time: it runs, and its answer comes.
        answer.await.map_err(|_| stopped())
    }
}

pub fn tool(bridge: IpythonBridge) -> Tool {
    ToolSpec::declare::<CellRequest>(GENERIC_GROUP, "run_ipython_cell", "Run an IPython cell.")
        .bad_arguments(BadArguments::Unprocessable)
        .handler(move |request, context: CallContext| call(bridge.clone(), request, context))
}

async fn call(bridge: IpythonBridge, request: CellRequest, context: CallContext) -> ToolResult {
    if request.code.trim().is_empty() {
        return Err(ApiError::BadRequest("Code is required.".into()).into());
    }
    let timeout = timeout_argument(request.timeout, bridge.default_timeout)?;
    Ok(bridge.run_cell(request.code, timeout, context).await?)
}

fn cell_result(answer: CellAnswer, notice: Option<String>, note: Option<String>) -> CallToolResult {
    let mut stdout = notice.unwrap_or_default();
    stdout.push_str(&answer.stdout);
    let mut stderr = answer.stderr;
    if let Some(note) = note {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(&note);
    }
    let mut content = vec![ContentItem::described_text("stdout", stdout)];
    let is_error = !stderr.is_empty();
    if is_error {
        content.push(ContentItem::described_text("stderr", stderr));
    }
    content.extend(answer.images.into_iter().map(|image| ContentItem::Image {
        data: image.data,
        mime_type: image.mime_type,
    }));
    CallToolResult::new(content, is_error)
}

/// Longest wait between two attempts to start a kernel that keeps failing.
const MAX_START_BACKOFF: Duration = Duration::from_secs(60);

/// Starts a kernel, retrying with backoff while it fails (the family shows `failed` with the reason
/// meanwhile, so calls are refused with it rather than queued). `waiting`, the cell that needs the
/// kernel, comes back to run on it if the first attempt succeeds; on a failure it and every cell
/// admitted before are answered with the reason.
async fn start_kernel(
    config: &KernelConfig,
    cells: &mut mpsc::Receiver<QueuedCell>,
    health: &Health,
    mut waiting: Option<QueuedCell>,
) -> (Kernel, Option<QueuedCell>) {
    let mut backoff = Backoff::new(Duration::from_secs(1), MAX_START_BACKOFF);
    loop {
        match Kernel::start(config).await {
            Ok(mut kernel) => {
                // Asked before `ready`: calls waiting for the family queue their cells only after it.
                let idle = waiting.is_none() && cells.is_empty() && health.waiting_calls() == 0;
                health.ready();
                if idle {
                    kernel.finish_start_while_idle().await;
                }
                return (kernel, waiting);
            }
            Err(err) => {
                let retry_in = backoff.next_delay();
                tracing::error!(?retry_in, "IPython kernel did not start: {err}");
                health.failed(err.clone());
                let refused = std::iter::from_fn(|| cells.try_recv().ok());
                for cell in waiting.take().into_iter().chain(refused) {
                    let answer = cell_result(CellAnswer::default(), None, Some(err.clone()));
                    let _ = cell.reply.send(answer);
                }
                tokio::time::sleep(retry_in).await;
            }
        }
    }
}

/// A kernel in place of one that is gone: the spare when it is fit to take over (waiting for the rest of
/// its start if it is still starting), else a fresh start, as [`start_kernel`] does it.
async fn replacement(
    config: &KernelConfig,
    cells: &mut mpsc::Receiver<QueuedCell>,
    health: &Health,
    spare: &mut Spare,
    waiting: Option<QueuedCell>,
) -> (Kernel, Option<QueuedCell>) {
    if let Some(kernel) = spare.take().await {
        tracing::info!("the spare IPython kernel takes over");
        health.ready();
        return (kernel, waiting);
    }
    start_kernel(config, cells, health, waiting).await
}

/// A kernel started ahead of need, so a restart (a cell that ignored its interrupt, a kernel that died,
/// the RSS cap) swaps it in instead of waiting for a fresh interpreter to import IPython. It is started
/// by [`Kernel::start`] like any kernel (same user, environment with the claim's, process group, OOM
/// score, limits, stderr, greeting), then finishes its start at once, as a kernel warmed before its first
/// cell does (unless a restart already waits for it): nothing tells it apart from a kernel started at the
/// restart. It is warmed after a cell's answer, so a sandbox whose kernel ran no cell holds one Python
/// process, and dropped after [`SPARE_IDLE`] without a cell. It is not a child of the kernel, so
/// `--kernel-max-rss` never counts it.
#[derive(Default)]
struct Spare {
    start: Option<SpareStart>,
}

/// The spare's start, in a task of its own so the worker serves cells meanwhile. Dropping it aborts the
/// task, or drops the kernel the task made: either way that kernel's process group is killed.
struct SpareStart {
    task: tokio::task::JoinHandle<Result<Kernel, String>>,
    /// Set when a restart waits for this spare: its first cell then comes before the rest of its start
    /// (which follows that cell's answer), as for a kernel started at the restart.
    needed: Arc<AtomicBool>,
}

impl Drop for SpareStart {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Spare {
    /// Starts a spare unless one is kept (started, starting, or failed to start: that is learnt, and a
    /// new one tried, at the next restart, so a Python that cannot start costs one attempt per restart).
    fn warm(&mut self, config: &KernelConfig) {
        if !config.spare || self.start.is_some() {
            return;
        }
        let config = config.clone();
        let needed = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let needed = Arc::clone(&needed);
            async move {
                let mut kernel = Kernel::start(&config).await?;
                if !needed.load(Ordering::Acquire) {
                    kernel.finish_start_while_idle().await;
                }
                Ok(kernel)
            }
        });
        self.start = Some(SpareStart { task, needed });
    }

    fn is_kept(&self) -> bool {
        self.start.is_some()
    }

    fn discard(&mut self) {
        self.start = None;
    }

    /// The spare, once its start is done (within the start's own timeout), if it is alive and has the
    /// claim's environment; else `None` (it is dropped), and the caller starts a kernel itself.
    async fn take(&mut self) -> Option<Kernel> {
        let mut start = self.start.take()?;
        start.needed.store(true, Ordering::Release);
        let mut kernel = match (&mut start.task).await {
            Ok(Ok(kernel)) => kernel,
            Ok(Err(err)) => {
                tracing::warn!("the spare IPython kernel did not start: {err}");
                return None;
            }
            Err(err) => {
                tracing::warn!("the spare IPython kernel's start failed: {err}");
                return None;
            }
        };
        if kernel.misses_the_claims_environment() {
            tracing::info!(
                "the spare IPython kernel predates the claim's environment; not using it"
            );
            return None;
        }
        if let Some(status) = kernel.exited().await {
            tracing::warn!(%status, "the spare IPython kernel died while idle; starting a fresh one");
            return None;
        }
        Some(kernel)
    }
}

async fn worker(config: KernelConfig, mut cells: mpsc::Receiver<QueuedCell>, health: Health) {
    if config.wait_for_a_client && !first_request::has_come() {
        // A call meanwhile waits for the family (as for any start): its own request starts the kernel.
        health.starting(
            "no kernel yet: it starts when the first request reaches boxd (--kernel-start on-first-request)",
        );
        first_request::wait().await;
        health.starting("starting the kernel: a request came");
    }
    let (first, _) = start_kernel(&config, &mut cells, &health, None).await;
    let mut kernel = Some(first);
    let mut spare = Spare::default();
    let mut last_answer = tokio::time::Instant::now();
    let mut lost_state: Option<String> = None;
    loop {
        let stale = kernel
            .as_ref()
            .is_some_and(Kernel::misses_the_claims_environment);
        let cell = tokio::select! {
            // A claim's restart goes before a cell already queued, which must see the claim's env.
            biased;
            () = std::future::ready(()), if stale => {
                // Pool mode: the kernel started before the claim (no cell can have run: every tool
                // route was closed), so a fresh one with the claim's env costs no state.
                tracing::info!("restarting the IPython kernel with the claim's environment");
                drop(kernel.take());
                let (fresh, _) = replacement(&config, &mut cells, &health, &mut spare, None).await;
                kernel = Some(fresh);
                continue;
            }
            () = child::runtime_environment_set(), if !stale => continue,
            cell = cells.recv() => match cell {
                Some(cell) => cell,
                None => break,
            },
            () = tokio::time::sleep(RSS_CHECK_INTERVAL), if config.max_rss.is_some() && kernel.is_some() => {
                if let Some(notice) = recycle_past_the_cap(&config, &mut kernel, &mut cells, &health, &mut spare).await {
                    lost_state = Some(notice);
                }
                continue;
            }
            () = tokio::time::sleep_until(last_answer + SPARE_IDLE), if spare.is_kept() => {
                tracing::info!(idle = ?SPARE_IDLE, "no cell for a while: dropping the spare IPython kernel");
                spare.discard();
                continue;
            }
        };
        if cell.cancel.is_cancelled() || cell.reply.is_closed() {
            tracing::info!("skipping a queued cell whose caller went away");
            continue;
        }
        if cell.claimed.swap(true, Ordering::AcqRel) {
            tracing::debug!("skipping a queued cell whose caller stopped waiting for its turn");
            continue;
        }
        if kernel
            .as_ref()
            .is_some_and(Kernel::misses_the_claims_environment)
        {
            // The claim landed between the check above and this cell (its notice can be missed while
            // the select is being set up): the cell still runs on a kernel with the claim's env.
            tracing::info!("restarting the IPython kernel with the claim's environment");
            kernel = None;
        }
        if let Some(idle) = kernel.as_mut()
            && let Some(status) = idle.exited().await
        {
            tracing::warn!(%status, "IPython kernel died while idle; starting a fresh one");
            health.restarted(format!("died while idle ({status})"));
            lost_state = Some(format!(
                "[boxd: this is a fresh IPython kernel; the previous one died ({status}), and all earlier state is gone]\n"
            ));
            kernel = None;
        }
        let cell = match kernel {
            Some(_) => cell,
            None => {
                let (fresh, waiting) =
                    replacement(&config, &mut cells, &health, &mut spare, Some(cell)).await;
                kernel = Some(fresh);
                match waiting {
                    Some(cell) => cell,
                    None => continue,
                }
            }
        };
        let Some(running) = kernel.as_mut() else {
            continue;
        };
        let notice = lost_state.take();
        let seconds = cell.timeout.as_secs_f64();
        let result = match running
            .execute(
                &cell.code,
                cell.timeout,
                config.interrupt_grace,
                cell.progress.as_ref(),
            )
            .await
        {
            Execution::Done(answer) => cell_result(answer, notice, None),
            Execution::Interrupted(answer) => cell_result(
                answer,
                notice,
                Some(format!(
                    "[boxd: cell timed out after {seconds}s and was interrupted; kernel state is kept]\n"
                )),
            ),
            Execution::Unresponsive => {
                kernel = None;
                health.restarted("killed: a cell ignored its interrupt");
                lost_state = Some("[boxd: this is a fresh IPython kernel; the previous one was restarted after a cell ignored its interrupt, and all earlier state is gone]\n".into());
                cell_result(
                    CellAnswer::default(),
                    notice,
                    Some(format!(
                        "[boxd: cell timed out after {seconds}s and did not stop on interrupt; the kernel was killed and will restart, so all state (variables, imports) is lost. Output of this cell is lost.]\n"
                    )),
                )
            }
            Execution::Died(status) => {
                kernel = None;
                health.restarted(format!("died during a cell ({status})"));
                lost_state = Some(format!(
                    "[boxd: this is a fresh IPython kernel; the previous one died ({status}), and all earlier state is gone]\n"
                ));
                cell_result(
                    CellAnswer::default(),
                    notice,
                    Some(format!(
                        "[boxd: the IPython kernel died during this cell ({status}); the next cell gets a fresh kernel and all state is lost]\n"
                    )),
                )
            }
        };
        let _ = cell.reply.send(result);
        if let Some(notice) =
            recycle_past_the_cap(&config, &mut kernel, &mut cells, &health, &mut spare).await
        {
            lost_state = Some(notice);
        }
        last_answer = tokio::time::Instant::now();
        spare.warm(&config);
    }
}

/// Between cells: replaces a kernel whose RSS (with its children's) is past `--kernel-max-rss` with a
/// fresh one (the spare, or one started at once), and answers the line the next cell's stdout starts with.
async fn recycle_past_the_cap(
    config: &KernelConfig,
    kernel: &mut Option<Kernel>,
    cells: &mut mpsc::Receiver<QueuedCell>,
    health: &Health,
    spare: &mut Spare,
) -> Option<String> {
    let cap = config.max_rss?;
    let rss = kernel.as_ref()?.resident_bytes().await?;
    if rss <= cap {
        return None;
    }
    let (rss_mib, cap_mib) = (rss.div_ceil(MIB), cap / MIB);
    tracing::warn!(
        rss_mib,
        cap_mib,
        "the IPython kernel is over its RSS cap; restarting it between cells"
    );
    health.restarted(format!(
        "recycled between cells: RSS {rss_mib} MiB over the cap of {cap_mib} MiB"
    ));
    // Dropping it kills its process group, which gives the memory back (before a fresh one starts, when
    // there is no spare).
    drop(kernel.take());
    let (fresh, _) = replacement(config, cells, health, spare, None).await;
    *kernel = Some(fresh);
    Some(format!(
        "[boxd: this is a fresh IPython kernel; the previous one was restarted between cells because its memory (RSS {rss_mib} MiB) went over the cap of {cap_mib} MiB (--kernel-max-rss), and all earlier state is gone]\n"
    ))
}

enum Execution {
    Done(CellAnswer),
    Interrupted(CellAnswer),
    Unresponsive,
    Died(String),
}

struct Kernel {
    child: Child,
    stdin: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
    /// Killed with the kernel (dropping it kills whatever the cells started too).
    group: Option<ChildGroup>,
    stderr: StderrTail,
    next_id: u64,
    /// Variables of the claim's layer when it started (pool mode sets the layer once, after start).
    runtime_variables: usize,
}

impl Kernel {
    /// Resident bytes of the kernel and every process below it; None once it is gone.
    async fn resident_bytes(&self) -> Option<u64> {
        let pid = self.child.id()?;
        tokio::task::spawn_blocking(move || rss::tree_rss(pid))
            .await
            .ok()
            .flatten()
    }

    fn misses_the_claims_environment(&self) -> bool {
        child::runtime_environment().len() != self.runtime_variables
    }

    async fn start(config: &KernelConfig) -> Result<Kernel, String> {
        let started = Instant::now();
        let runtime_variables = child::runtime_environment().len();
        let mut child = child::command(&config.python, Grouping::OwnGroup)
            .args(["-u", "-c", HELPER])
            .current_dir(&config.workspace)
            .env("BOXD_MAX_OUTPUT", config.max_output_bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| {
                format!(
                    "cannot start the Python interpreter {:?}: {err}",
                    config.python
                )
            })?;
        let group = ChildGroup::of(child.id(), Grouping::OwnGroup);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("kernel pipes missing".into());
        };
        let mut kernel = Kernel {
            child,
            stdin,
            answers: BufReader::with_capacity(ANSWER_BUFFER, stdout).lines(),
            group,
            stderr: StderrTail::forward(stderr, "ipython-kernel".into()),
            next_id: 1,
            runtime_variables,
        };
        let greeting = match tokio::time::timeout(config.start_timeout, kernel.answers.next_line())
            .await
        {
            Err(_) => {
                return Err(format!(
                    "the IPython kernel did not start within {:?}{}",
                    config.start_timeout,
                    kernel.stderr.text()
                ));
            }
            Ok(Err(err)) => return Err(format!("reading from the IPython kernel failed: {err}")),
            Ok(Ok(None)) => {
                let words = kernel.stderr.last_words(Duration::from_millis(500)).await;
                return Err(format!("{} exited at start{words}", config.python));
            }
            Ok(Ok(Some(greeting))) => greeting,
        };
        let greeting: Value = serde_json::from_str(&greeting)
            .map_err(|_| format!("unexpected first line from the kernel: {greeting}"))?;
        if let Some(fatal) = greeting.get("fatal").and_then(Value::as_str) {
            return Err(fatal.to_owned());
        }
        tracing::info!(
            python = %greeting["python"].as_str().unwrap_or("?"),
            ipython = %greeting["ipython"].as_str().unwrap_or("?"),
            ready_ms = started.elapsed().as_millis() as u64,
            "IPython kernel ready"
        );
        Ok(kernel)
    }

    /// Tells a kernel that no cell waits for it, so it finishes its start now (IPython's magics, the
    /// completer: see the helper's `finish_start`) instead of right after its first cell. A cell written
    /// meanwhile waits for it (~0.1 s); a write that fails shows again at the next cell, as a dead kernel.
    async fn finish_start_while_idle(&mut self) {
        const FINISH_START: &[u8] = b"{\"finish_start\": true}\n";
        if self.stdin.write_all(FINISH_START).await.is_err() || self.stdin.flush().await.is_err() {
            tracing::debug!("the kernel was not told to finish its start: its input is closed");
        }
    }

    async fn execute(
        &mut self,
        code: &str,
        timeout: Duration,
        grace: Duration,
        progress: Option<&ProgressSink>,
    ) -> Execution {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = json!({"id": id, "code": code, "stream": progress.is_some()}).to_string();
        request.push('\n');
        if self.stdin.write_all(request.as_bytes()).await.is_err()
            || self.stdin.flush().await.is_err()
        {
            return Execution::Died(self.exit_status().await);
        }
        match tokio::time::timeout(timeout, self.answer(id, progress)).await {
            Ok(Some(answer)) => return Execution::Done(answer),
            Ok(None) => return Execution::Died(self.exit_status().await),
            Err(_) => {}
        }
        if let Some(group) = &self.group {
            tracing::info!(?timeout, "cell timed out; interrupting the kernel");
            group.signal(libc::SIGINT);
        }
        match tokio::time::timeout(grace, self.answer(id, progress)).await {
            Ok(Some(answer)) => Execution::Interrupted(answer),
            Ok(None) => Execution::Died(self.exit_status().await),
            Err(_) => {
                tracing::warn!("kernel ignored the interrupt; killing it");
                Execution::Unresponsive
            }
        }
    }

    /// The answer to request `id`, forwarding its output lines to `progress` on the way; `None` once
    /// the kernel's stdout closes.
    async fn answer(&mut self, id: u64, progress: Option<&ProgressSink>) -> Option<CellAnswer> {
        loop {
            let line = self.answers.next_line().await.ok()??;
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                tracing::warn!("ignoring an unexpected line from the kernel");
                continue;
            };
            if message["id"].as_u64() != Some(id) {
                tracing::warn!("ignoring a line from the kernel for another cell");
                continue;
            }
            if let Some(output) = message.get("output") {
                if let Some(sink) = progress {
                    let event = json!({
                        "type": "output",
                        "stream": output["stream"],
                        "data": output["data"],
                    });
                    // Never waits: a caller that stopped reading loses only its progress events,
                    // and the kernel everyone shares keeps going.
                    sink.send(event);
                }
                continue;
            }
            match serde_json::from_value::<CellAnswer>(message) {
                Ok(answer) => return Some(answer),
                Err(err) => tracing::warn!("ignoring a malformed answer from the kernel: {err}"),
            }
        }
    }

    /// How the kernel ended, if it has. The child's own status can lag its death (the runtime learns it
    /// through an event), so a zombie in `/proc` counts too: a cell must not be sent to a dead kernel.
    async fn exited(&mut self) -> Option<String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status.to_string());
        }
        let pid = self.child.id()?;
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        let dead = state.as_deref().is_none_or(|stat| {
            stat.rsplit_once(')').is_some_and(|(_, rest)| {
                matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))
            })
        });
        if dead {
            Some(self.exit_status().await)
        } else {
            None
        }
    }

    async fn exit_status(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            _ => "no exit status".into(),
        }
    }
}
