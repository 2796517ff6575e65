//! OpenAI's `shell` tool (the Responses API's `shell_call`), run in the workspace as the OpenAI Agents
//! SDK's local shell executor runs it: each command in order with bash, stdin from `/dev/null`, in a
//! process group of its own that is killed whole at its timeout; the answer is the `shell_call_output`
//! (`output`, one `{stdout, stderr, outcome}` per command that ran, and `max_output_length`). `run`
//! runs one command; this file reads the call and builds the answer. docs/families/agent.md says
//! where each rule comes from.

mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::core::admission::Admission;
use crate::core::child;
use crate::family::Setup;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolError, ToolSpec};

use run::{Outcome, RunLimits};

/// The most commands one call runs.
pub const MAX_COMMANDS: usize = 32;
/// The largest command taken: Linux refuses a single exec argument of 128 KiB or more
/// (`MAX_ARG_STRLEN`, its terminating NUL included), and a command is one argument of `bash -c`.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1;
/// A command's timeout when the call gives none (or 0, which the SDK's executor reads as none):
/// boxd's `run_shell_command` default, so a command is never waited on without bound.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest timeout a command gets; a larger `timeout_ms` is lowered to it.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// How long output is still read after a command's shell exited, for a background child that holds
/// the pipes (it runs on; what it writes later is not this command's).
const DRAIN: Duration = Duration::from_millis(200);
/// How long a timed-out command's group is given to die of SIGKILL and close its pipes.
const KILL_WAIT: Duration = Duration::from_secs(5);

const SHELL: &str = "/bin/bash";
/// Where an image has no bash.
const FALLBACK_SHELL: &str = "/bin/sh";

const DESCRIPTION: &str = "OpenAI's `shell` tool: runs `commands` (the Responses API's shell_call action) in the workspace, one after another, each with `bash -c` in a process group of its own and stdin from /dev/null; a non-zero exit does not stop the rest. A command still running after `timeout_ms` (default 300000, at most 3600000) is killed with everything it started, its outcome is `timeout`, and the commands after it are not run. Answers the shell_call_output's `{output: [{stdout, stderr, outcome: {type: exit, exit_code} | {type: timeout}}], max_output_length}`; with `max_output_length`, that many characters of output in all are kept, stdout before stderr, command by command.";

#[derive(Deserialize, JsonSchema)]
struct ShellArgs {
    /// Ordered shell commands for the execution environment to run
    commands: Vec<String>,
    /// Maximum wall-clock time in milliseconds to allow the shell commands to run
    timeout_ms: Option<i64>,
    /// Maximum number of UTF-8 characters to capture from combined stdout and stderr output
    max_output_length: Option<i64>,
}

/// What a call runs with, besides its arguments.
struct Settings {
    shell: &'static str,
    workspace: PathBuf,
    /// Bytes of output one call keeps in all (`--max-output`).
    max_output_bytes: usize,
    admission: Admission,
}

pub fn tool(group: &'static str, setup: &Setup) -> Tool {
    let shell = if Path::new(SHELL).exists() {
        SHELL
    } else {
        FALLBACK_SHELL
    };
    let settings = Arc::new(Settings {
        shell,
        workspace: setup.workspace.real_root().to_path_buf(),
        max_output_bytes: setup.max_output,
        admission: setup.commands.clone(),
    });
    ToolSpec::declare::<ShellArgs>(group, "shell", DESCRIPTION).handler(
        move |args: ShellArgs, _| {
            let settings = Arc::clone(&settings);
            async move { call(&settings, args).await }
        },
    )
}

async fn call(settings: &Settings, args: ShellArgs) -> Result<CallToolResult, ToolError> {
    check_commands(&args.commands).map_err(ToolError::Reported)?;
    let timeout = timeout_of(args.timeout_ms).map_err(ToolError::Reported)?;
    // As the SDK: a negative length is 0 (no output at all), absent is no truncation.
    let max_output_length = args
        .max_output_length
        .map(|length| usize::try_from(length.max(0)).unwrap_or(usize::MAX));
    // One place for the whole call: its commands run one at a time.
    let _place = settings.admission.enter().await?;
    let mut budget = settings.max_output_bytes;
    let mut output = Vec::with_capacity(args.commands.len());
    for command in &args.commands {
        let limits = RunLimits {
            timeout,
            max_output_bytes: budget,
            drain: DRAIN,
            kill_wait: KILL_WAIT,
        };
        let ran = run::run(settings.shell, command, &settings.workspace, &limits)
            .await
            .map_err(|err| ToolError::from(child::spawn_failure(settings.shell, &err)))?;
        let timed_out = matches!(ran.outcome, Outcome::Timeout);
        let stdout = ran.stdout.keep(&mut budget);
        let stderr = ran.stderr.keep(&mut budget);
        output.push(CommandOutput {
            stdout,
            stderr,
            outcome: ran.outcome,
        });
        // As the SDK's executor: a timeout ends the call; a failure does not.
        if timed_out {
            break;
        }
    }
    if let Some(length) = max_output_length {
        truncate_outputs(&mut output, length);
    }
    let answer = json!({
        "output": output.iter().map(CommandOutput::to_json).collect::<Vec<_>>(),
        "max_output_length": max_output_length,
    });
    let text = serde_json::to_string(&answer)
        .map_err(|err| ToolError::Reported(format!("shell could not encode its answer: {err}")))?;
    let mut result = CallToolResult::new(vec![ContentItem::plain_text(text)], false);
    result.structured_content = Some(answer);
    Ok(result)
}

fn check_commands(commands: &[String]) -> Result<(), String> {
    if commands.is_empty() {
        return Err("shell needs at least one command in `commands`".to_owned());
    }
    if commands.len() > MAX_COMMANDS {
        return Err(format!(
            "shell runs at most {MAX_COMMANDS} commands in one call; {} were given",
            commands.len()
        ));
    }
    for (index, command) in commands.iter().enumerate() {
        if command.len() > MAX_COMMAND_BYTES {
            return Err(format!(
                "command {index} is {} bytes; shell takes commands of at most {MAX_COMMAND_BYTES} bytes",
                command.len()
            ));
        }
        if command.contains('\0') {
            return Err(format!(
                "command {index} contains a NUL byte, which no shell command can hold"
            ));
        }
    }
    Ok(())
}

/// Each command's timeout: the default without one (or with 0), at most [`MAX_TIMEOUT`].
fn timeout_of(timeout_ms: Option<i64>) -> Result<Duration, String> {
    match timeout_ms {
        None | Some(0) => Ok(DEFAULT_TIMEOUT),
        Some(ms) => match u64::try_from(ms) {
            Ok(ms) => Ok(Duration::from_millis(ms).min(MAX_TIMEOUT)),
            Err(_) => Err(format!(
                "`timeout_ms` must be a positive number of milliseconds; {ms} was given"
            )),
        },
    }
}

/// One command's entry of the `shell_call_output`.
struct CommandOutput {
    stdout: String,
    stderr: String,
    outcome: Outcome,
}

impl CommandOutput {
    fn to_json(&self) -> Value {
        let outcome = match self.outcome {
            Outcome::Exit(code) => json!({"type": "exit", "exit_code": code}),
            Outcome::Timeout => json!({"type": "timeout"}),
        };
        json!({"stdout": self.stdout, "stderr": self.stderr, "outcome": outcome})
    }
}

/// The SDK's `truncate_shell_outputs`: `max_length` characters in all, taken from each command's
/// stdout, then its stderr, command by command; the outcomes stay.
fn truncate_outputs(outputs: &mut [CommandOutput], max_length: usize) {
    let mut remaining = max_length;
    for output in outputs {
        keep_chars(&mut output.stdout, &mut remaining);
        keep_chars(&mut output.stderr, &mut remaining);
    }
}

/// Cuts `text` to its first `remaining` characters (Python's `str[:n]` counts code points too) and
/// takes what it kept from `remaining`.
fn keep_chars(text: &mut String, remaining: &mut usize) {
    let (end, kept) = text
        .char_indices()
        .nth(*remaining)
        .map_or((text.len(), None), |(end, _)| (end, Some(*remaining)));
    let kept = kept.unwrap_or_else(|| text.chars().count());
    text.truncate(end);
    *remaining = remaining.saturating_sub(kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(stdout: &str, stderr: &str) -> CommandOutput {
        CommandOutput {
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
            outcome: Outcome::Exit(0),
        }
    }

    fn truncated(outputs: Vec<CommandOutput>, max: usize) -> Vec<(String, String)> {
        let mut outputs = outputs;
        truncate_outputs(&mut outputs, max);
        outputs
            .into_iter()
            .map(|output| (output.stdout, output.stderr))
            .collect()
    }

    #[test]
    fn the_length_is_shared_stdout_first_command_by_command() {
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(out, err)| ((*out).to_owned(), (*err).to_owned()))
                .collect()
        };
        let outputs = || vec![output("abcdef", "XYZ"), output("123", "")];
        assert_eq!(truncated(outputs(), 4), pairs(&[("abcd", ""), ("", "")]));
        assert_eq!(
            truncated(outputs(), 8),
            pairs(&[("abcdef", "XY"), ("", "")])
        );
        assert_eq!(
            truncated(outputs(), 10),
            pairs(&[("abcdef", "XYZ"), ("1", "")])
        );
        assert_eq!(
            truncated(outputs(), 100),
            pairs(&[("abcdef", "XYZ"), ("123", "")])
        );
        assert_eq!(truncated(outputs(), 0), pairs(&[("", ""), ("", "")]));
        // Characters, not bytes.
        assert_eq!(
            truncated(vec![output("héllo", "ü")], 3),
            pairs(&[("hél", "")])
        );
    }

    #[test]
    fn bad_calls_are_refused_with_their_reason() {
        assert!(check_commands(&[]).is_err_and(|text| text.contains("at least one")));
        let many = vec!["true".to_owned(); MAX_COMMANDS + 1];
        assert!(check_commands(&many).is_err_and(|text| text.contains("at most 32")));
        let huge = vec!["x".repeat(MAX_COMMAND_BYTES + 1)];
        assert!(check_commands(&huge).is_err_and(|text| text.contains("bytes")));
        assert!(check_commands(&["a\0b".to_owned()]).is_err_and(|text| text.contains("NUL")));
        assert!(check_commands(&["x".repeat(MAX_COMMAND_BYTES)]).is_ok());
        assert_eq!(timeout_of(None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(timeout_of(Some(0)), Ok(DEFAULT_TIMEOUT));
        assert_eq!(timeout_of(Some(1500)), Ok(Duration::from_millis(1500)));
        assert_eq!(timeout_of(Some(i64::MAX)), Ok(MAX_TIMEOUT));
        assert!(timeout_of(Some(-1)).is_err());
    }
}
