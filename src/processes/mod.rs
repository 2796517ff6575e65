//! The `/processes/*` routes over boxd's one table of live processes (`core::live`): start by shell
//! string or argv, status, stdin, signals, resize, output pages, event streams and the WebSocket.

mod family;
pub use family::{ProcessesArgs, family, limits, table_limits};

mod routes;
use routes::routes;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::core::error::{ApiError, ApiResult};
use crate::core::live::{Launch, TerminalSize};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// Run with `/bin/sh -c`.
    #[serde(default)]
    command: Option<String>,
    /// Run directly (no shell).
    #[serde(default)]
    argv: Option<Vec<String>>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    pty: Option<PtyRequest>,
    /// Seconds before the group gets SIGTERM (then SIGKILL after a grace).
    #[serde(default)]
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PtyRequest {
    Enabled(bool),
    Size { rows: u16, cols: u16 },
}

impl StartRequest {
    /// What to start: exactly one of a shell string and an argv, a timeout within the shared bound.
    fn launch(self) -> ApiResult<Launch> {
        let argv = match (self.command, self.argv) {
            (Some(command), None) if !command.trim().is_empty() => {
                vec!["/bin/sh".to_owned(), "-c".to_owned(), command]
            }
            (None, Some(argv)) if argv.first().is_some_and(|program| !program.is_empty()) => argv,
            _ => {
                return Err(ApiError::BadRequest(
                    "give exactly one of `command` (a shell string) or `argv` (a non-empty list)"
                        .into(),
                ));
            }
        };
        let timeout = self
            .timeout
            .map(|seconds| crate::tools::timeout_argument(Some(seconds), Duration::ZERO))
            .transpose()?;
        let terminal = match self.pty {
            None | Some(PtyRequest::Enabled(false)) => None,
            Some(PtyRequest::Enabled(true)) => Some(TerminalSize::DEFAULT),
            Some(PtyRequest::Size { rows, cols }) => Some(TerminalSize { rows, cols }),
        };
        Ok(Launch {
            argv,
            cwd: self.cwd.unwrap_or_default(),
            env: self.env,
            terminal,
            timeout,
        })
    }
}
