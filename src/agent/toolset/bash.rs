//! `bash {command?, restart?, timeout_ms?}`: one persistent `/bin/bash` per session, as the reference's
//! `BashSession`: commands framed by a per-call sentinel that carries the exit code, stdin from
//! `/dev/null`, stdout and stderr together, the last 100 KiB kept, ANSI escapes stripped, the
//! `ANTHROPIC_*` variables left out. A timeout or a cancelled call ends the shell (its process group);
//! the next call says a restart is required. Where the reference reports a `BrokenResourceError` after
//! the shell exited by itself (`exit`), boxd says what its documentation promises: restart required.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use fancy_regex::Regex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::time::Instant;

use super::{Answer, Block};
use crate::core::child::{self, ChildGroup, Grouping};

/// Output kept per command, its tail (the reference's `BASH_OUTPUT_LIMIT`).
pub const BASH_OUTPUT_LIMIT: usize = 100 * 1024;
/// A command's timeout when the call gives none (`BASH_DEFAULT_TIMEOUT`).
pub const BASH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest timeout a call may ask for.
pub const BASH_MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Shells kept at once (one per session); the least recently used idle one makes room.
pub const MAX_BASH_SESSIONS: usize = 32;
/// A shell unused this long is closed.
pub const BASH_IDLE: Duration = Duration::from_secs(30 * 60);
/// How often idle shells are looked for.
const IDLE_CHECK: Duration = Duration::from_secs(60);
/// Room after the marker for its line's exit code and line break (`-2147483648\n` at most).
const MARKER_LINE_TAIL: usize = 32;
/// Bytes read from the shell at once.
const READ_BYTES: usize = 64 * 1024;

static ANSI: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]").ok());

/// The shells of every session.
pub struct BashSessions {
    workdir: PathBuf,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Whether the task that closes idle shells runs.
    reaping: std::sync::atomic::AtomicBool,
}

struct Session {
    shell: tokio::sync::Mutex<Shell>,
    last_used: Mutex<Instant>,
}

enum Shell {
    /// Not started yet: the first command starts it.
    Fresh,
    Running(Box<Bash>),
    /// Ended by a timeout, a cancelled call or by itself: only a restart brings it back.
    Terminated,
}

struct Bash {
    stdin: ChildStdin,
    output: tokio::net::unix::pipe::Receiver,
    child: Child,
    /// Killed whole when dropped.
    _group: ChildGroup,
}

impl BashSessions {
    pub fn new(workdir: PathBuf) -> BashSessions {
        BashSessions {
            workdir,
            sessions: Mutex::new(HashMap::new()),
            reaping: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// One `bash` call for `session` (the caller's; `""` for calls that name none).
    pub async fn call(
        self: &Arc<Self>,
        session_key: &str,
        command: Option<&str>,
        restart: bool,
        timeout_ms: Option<i64>,
    ) -> Answer {
        let session = self.session(session_key)?;
        let mut shell = session.shell.lock().await;
        if let Ok(mut last_used) = session.last_used.lock() {
            *last_used = Instant::now();
        }
        if restart {
            // The old shell (and its process group) goes when it is dropped.
            *shell = Shell::Fresh;
            *shell = Shell::Running(Box::new(self.start()?));
            return Ok(Block::text("bash session restarted".to_owned()));
        }
        // A blank command would break the framing and end the shell (the reference's fate for it).
        let Some(command) = command.filter(|command| !command.trim().is_empty()) else {
            return Err("bash: command is required".to_owned());
        };
        let given = timeout_ms.filter(|ms| *ms != 0);
        let timeout = given.map_or(BASH_DEFAULT_TIMEOUT, |ms| {
            Duration::from_millis(ms.unsigned_abs()).min(BASH_MAX_TIMEOUT)
        });
        let shown_timeout = given.map_or_else(
            || python_float(BASH_DEFAULT_TIMEOUT.as_secs_f64()),
            |ms| python_float(ms as f64 / 1000.0),
        );
        // Taken out for the call: if the call is dropped half way (its caller went away), the shell
        // goes with it and the session is left terminated, never with a command still queued.
        let mut bash = match std::mem::replace(&mut *shell, Shell::Terminated) {
            Shell::Running(bash) => bash,
            Shell::Fresh => Box::new(self.start()?),
            Shell::Terminated => {
                return Err("bash: bash session terminated; restart required".to_owned());
            }
        };
        if given.is_some_and(|ms| ms < 0) {
            return Err(format!(
                "bash: bash command timed out after {shown_timeout}s"
            ));
        }
        let ran = tokio::time::timeout(timeout, bash.exec(command)).await;
        let Ok(ran) = ran else {
            tracing::info!(session = session_key, "bash command timed out; shell ended");
            return Err(format!(
                "bash: bash command timed out after {shown_timeout}s"
            ));
        };
        let (output, code, alive) = ran.map_err(|err| format!("bash: {err}"))?;
        if alive {
            *shell = Shell::Running(bash);
        }
        if code != 0 {
            return Err(output);
        }
        Ok(Block::text(output))
    }

    fn session(self: &Arc<Self>, name: &str) -> Result<Arc<Session>, String> {
        if !self
            .reaping
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let sessions = Arc::downgrade(self);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(IDLE_CHECK).await;
                    let Some(sessions) = sessions.upgrade() else {
                        return;
                    };
                    sessions.close_idle();
                }
            });
        }
        let mut sessions = self
            .sessions
            .lock()
            .map_err(|_| "bash: the session table is unavailable".to_owned())?;
        if let Some(session) = sessions.get(name) {
            return Ok(Arc::clone(session));
        }
        sessions.retain(|_, session| !session.idle_for(BASH_IDLE));
        if sessions.len() >= MAX_BASH_SESSIONS {
            // The least recently used session no call holds makes room.
            let oldest = sessions
                .iter()
                .filter(|(_, session)| session.shell.try_lock().is_ok())
                .min_by_key(|(_, session)| session.last_used())
                .map(|(name, _)| name.clone());
            match oldest {
                Some(oldest) => {
                    tracing::info!(session = %oldest, "closed the least recently used bash shell to make room");
                    sessions.remove(&oldest);
                }
                None => {
                    return Err(format!(
                        "bash: {MAX_BASH_SESSIONS} bash sessions are busy; try again when one is done"
                    ));
                }
            }
        }
        let session = Arc::new(Session {
            shell: tokio::sync::Mutex::new(Shell::Fresh),
            last_used: Mutex::new(Instant::now()),
        });
        sessions.insert(name.to_owned(), Arc::clone(&session));
        Ok(session)
    }

    /// Closes the shells nobody used for [`BASH_IDLE`].
    fn close_idle(&self) {
        if let Ok(mut sessions) = self.sessions.lock() {
            let before = sessions.len();
            sessions.retain(|_, session| !session.idle_for(BASH_IDLE));
            let closed = before.saturating_sub(sessions.len());
            if closed > 0 {
                tracing::info!(closed, "closed idle bash shells");
            }
        }
    }

    fn start(&self) -> Result<Bash, String> {
        Bash::start(&self.workdir).map_err(|err| {
            tracing::warn!(%err, "bash did not start");
            format!("bash: could not start /bin/bash: {err}")
        })
    }
}

impl Session {
    fn last_used(&self) -> Instant {
        self.last_used
            .lock()
            .map_or_else(|_| Instant::now(), |last| *last)
    }

    /// Idle: unused for `idle` and no call holding it.
    fn idle_for(&self, idle: Duration) -> bool {
        self.last_used().elapsed() >= idle && self.shell.try_lock().is_ok()
    }
}

impl Bash {
    fn start(workdir: &std::path::Path) -> std::io::Result<Bash> {
        let (reader, writer) = std::io::pipe()?;
        let mut command = child::command("/bin/bash", Grouping::OwnGroup);
        command
            .args(["--noprofile", "--norc"])
            .current_dir(workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(OwnedFd::from(writer.try_clone()?)))
            .stderr(Stdio::from(OwnedFd::from(writer)))
            .kill_on_drop(true);
        // The runner's credentials stay out of model-driven commands, as in the reference.
        let inherited = std::env::vars_os()
            .filter_map(|(key, _)| key.into_string().ok())
            .chain(
                child::runtime_environment()
                    .iter()
                    .map(|(key, _)| key.clone()),
            );
        for key in inherited.filter(|key| key.starts_with("ANTHROPIC_")) {
            command.env_remove(key);
        }
        command.env("PS1", "").env("PS2", "").env("TERM", "dumb");
        let mut spawned = command.spawn()?;
        // The command (and so the write end) is dropped with this scope: only bash holds the pipe.
        drop(command);
        let group = ChildGroup::of(spawned.id(), Grouping::OwnGroup)
            .ok_or_else(|| std::io::Error::other("bash exited at once"))?;
        let stdin = spawned
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("bash has no stdin"))?;
        let output = tokio::net::unix::pipe::Receiver::from_file(std::fs::File::from(
            OwnedFd::from(reader),
        ))?;
        Ok(Bash {
            stdin,
            output,
            child: spawned,
            _group: group,
        })
    }

    /// Runs one command: its output (tail kept, escapes stripped), its exit code (-1 when the shell
    /// ended before saying it) and whether the shell is still there.
    async fn exec(&mut self, command: &str) -> Result<(String, i64, bool), String> {
        let sentinel = sentinel();
        // The split keeps the marker itself out of what the shell echoes back if it prints its input.
        let (head, tail) = sentinel.split_at(8);
        let wrapped =
            format!("{{ {command}\n}} </dev/null 2>&1; printf '\\n{head}''{tail}%d\\n' $?\n");
        if self.stdin.write_all(wrapped.as_bytes()).await.is_err() {
            return Err("bash session terminated; restart required".to_owned());
        }
        let marker = sentinel.as_bytes();
        let mut kept: Vec<u8> = Vec::new();
        let mut truncated = false;
        let mut chunk = vec![0u8; READ_BYTES];
        let mut ended = false;
        loop {
            let read = match self.output.read(&mut chunk).await {
                Ok(read) => read,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            if read == 0 {
                ended = true;
                break;
            }
            kept.extend_from_slice(chunk.get(..read).unwrap_or_default());
            if kept.len() > BASH_OUTPUT_LIMIT {
                kept.drain(..kept.len() - BASH_OUTPUT_LIMIT);
                truncated = true;
            }
            // Only what this read could have completed: the marker, and the short exit-code line
            // behind it, end within the bytes just read.
            let window = kept.len().saturating_sub(
                read.saturating_add(marker.len())
                    .saturating_add(MARKER_LINE_TAIL),
            );
            if let Some(at) = find_last(kept.get(window..).unwrap_or_default(), marker)
                .map(|at| at.saturating_add(window))
                && kept
                    .get(at.saturating_add(marker.len())..)
                    .is_some_and(|rest| rest.contains(&b'\n'))
            {
                break;
            }
        }
        let text = String::from_utf8_lossy(&kept);
        let text = match ANSI.as_ref() {
            Some(ansi) => ansi.replace_all(&text, ""),
            None => text,
        };
        let alive = !ended && matches!(self.child.try_wait(), Ok(None));
        let Some(at) = text.rfind(sentinel.as_str()) else {
            return Ok((text.trim().to_owned(), -1, alive));
        };
        let mut output = text
            .get(..at)
            .unwrap_or_default()
            .trim_end_matches('\n')
            .to_owned();
        let code = text
            .get(at.saturating_add(sentinel.len())..)
            .unwrap_or_default()
            .trim()
            .lines()
            .next()
            .and_then(|line| line.parse::<i64>().ok())
            .unwrap_or(-1);
        if truncated {
            output.insert_str(0, "[output truncated]\n");
        }
        Ok((output, code, alive))
    }
}

/// A per-call marker of the reference's shape and length (`__ANT_CMD_<32 hex>_DONE__`), so a command
/// cannot print it and output is kept exactly as long as the reference keeps it.
fn sentinel() -> String {
    let mut nonce = [0u8; 16];
    if getrandom::fill(&mut nonce).is_err() {
        // No randomness: a nonce from the clock still differs per call.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        nonce = now.to_le_bytes();
    }
    let hex: String = nonce.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("__ANT_CMD_{hex}_DONE__")
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    (0..=haystack.len() - needle.len())
        .rev()
        .find(|&at| haystack.get(at..at.saturating_add(needle.len())) == Some(needle))
}

/// Python's `str()` of a float, for the seconds the timeout message shows (`120.0`, `0.5`).
fn python_float(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_python_prints_them() {
        assert_eq!(python_float(120.0), "120.0");
        assert_eq!(python_float(0.5), "0.5");
        assert_eq!(python_float(0.333), "0.333");
        assert_eq!(python_float(-0.5), "-0.5");
    }

    #[test]
    fn the_sentinel_has_the_reference_s_length() {
        assert_eq!(sentinel().len(), "__ANT_CMD_".len() + 32 + "_DONE__".len());
    }
}
