//! The `computer` family: the desktop on an X display (`--display`, `DISPLAY`; images use `:1`). Not in
//! the default family list: only images with a display name it. Its health follows the display:
//! `starting` until it first answers (calls wait for it, as for a kernel starting), ready once
//! connected, `degraded` with the reason while it does not answer (calls then fail at once), `failed`
//! with the reason while it is unreachable after it came up, or when it never came up within its start
//! bound (calls then answer 503 with that reason); it reconnects with backoff until the display is back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Computer;
use super::desktop::{Desktop, DesktopError};
use crate::core::child::Backoff;
use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::family::limits::{Limit, count, seconds};
use crate::family::{BoxFuture, Family, Setup};
use crate::tools::Tool;

/// How long a display that has not answered yet is `starting` (calls wait for it) before it is
/// `failed`: Xvfb starts beside boxd and answers within a few seconds.
pub const START_BUDGET: Duration = Duration::from_secs(15);
/// How often a display that has not come up yet is tried.
const START_PROBE: Duration = Duration::from_millis(100);
/// How often a display that stopped answering is tried (each try waits up to the X bound).
const STALL_PROBE: Duration = Duration::from_millis(500);

/// The desktop's programs the images start beside boxd (`images/gui/rootfs/etc/boxd/services`): the X
/// server, the window manager, the VNC server. Not boxd's children, so named by name.
const DESKTOP_PROGRAMS: [&str; 3] = ["Xvfb", "jwm", "x11vnc"];

struct ComputerFamily {
    computer: Arc<Computer>,
    display: String,
}

impl Family for ComputerFamily {
    fn name(&self) -> &'static str {
        "computer"
    }

    fn tools(&self) -> Vec<Tool> {
        super::tools(&self.computer)
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::GROUP]
    }

    /// Every child (a shell command, a cell, a browser) draws on the same display.
    fn child_environment(&self) -> Vec<(String, String)> {
        vec![("DISPLAY".to_owned(), self.display.clone())]
    }

    fn held_processes(&self) -> Vec<Held> {
        DESKTOP_PROGRAMS
            .map(|name| Held::Named(name.to_owned()))
            .to_vec()
    }

    /// Probes the display: `starting` until it first answers (at most [`START_BUDGET`], then
    /// `failed`), `ready` while it answers, `degraded` while it stops answering (a server grab, a
    /// stopped server: calls fail at once), `failed` once it is gone; probed again with backoff.
    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let desktop = self.computer.desktop.clone();
            desktop.set_health(health.clone());
            let started = Instant::now();
            let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
            loop {
                match desktop.probe().await {
                    Ok(()) => {
                        health.ready();
                        backoff.reset();
                        desktop.changed().await;
                    }
                    Err(err) if !desktop.came_up() && started.elapsed() < START_BUDGET => {
                        health.starting(format!(
                            "waiting for display {} to come up: {err}",
                            self.display
                        ));
                        tokio::time::sleep(START_PROBE).await;
                    }
                    Err(err @ DesktopError::Stalled { .. }) if desktop.came_up() => {
                        health.degraded(err.to_string());
                        tokio::time::sleep(STALL_PROBE).await;
                    }
                    Err(err) => {
                        let reason = if desktop.came_up() {
                            format!("display {} unreachable: {err}", self.display)
                        } else {
                            format!(
                                "display {} did not come up within {} s: {err}",
                                self.display,
                                START_BUDGET.as_secs()
                            )
                        };
                        health.failed(reason);
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                }
            }
        })
    }
}

// The `computer` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct ComputerArgs {
    /// The X display the `computer` family drives (images run Xvfb on `:1`).
    #[arg(long, env = "DISPLAY", default_value = ":1")]
    pub display: String,
    /// Screenshots larger than WIDTHxHEIGHT are scaled down to fit, and every coordinate the
    /// `computer` tool takes or gives is in the screenshot's pixels (default: the screen's own size).
    #[arg(long, env = "BOXD_SCREENSHOT_MAX")]
    pub screenshot_max: Option<String>,
}

pub fn family(_: &Setup, args: &ComputerArgs) -> Result<Arc<dyn Family>, String> {
    let display = args.display.clone();
    let max_image = match &args.screenshot_max {
        None => None,
        Some(size) => Some(parse_size(size).ok_or_else(|| {
            format!("--screenshot-max must be WIDTHxHEIGHT (e.g. 1280x800), got {size:?}")
        })?),
    };
    let desktop = Desktop::start(display.clone())?;
    Ok(Arc::new(ComputerFamily {
        computer: Arc::new(Computer { desktop, max_image }),
        display,
    }))
}

fn parse_size(size: &str) -> Option<(u32, u32)> {
    let (width, height) = size.trim().split_once(['x', 'X'])?;
    let size = (width.trim().parse().ok()?, height.trim().parse().ok()?);
    (size.0 > 0 && size.1 > 0).then_some(size)
}

/// The bounds the `computer` family keeps, for `boxd limits`.
pub fn limits(_: &ComputerArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "computer",
            "actions waiting for the desktop",
            count(super::desktop::MAX_QUEUED_ACTIONS),
            "429",
        ),
        Limit::new(
            "computer",
            "wait for the action's turn; any one wait on the X server",
            format!(
                "{}; {}",
                seconds(super::desktop::TURN_WAIT),
                seconds(super::x11::X_REPLY_TIMEOUT)
            ),
            "504, the action withdrawn (never run); 503, `degraded` until the display answers",
        ),
        Limit::new(
            "computer",
            "a display that has not come up yet",
            seconds(START_BUDGET),
            "`starting` (calls wait), then `failed`",
        ),
        Limit::new(
            "computer",
            "actions of one `computer_batch`; keys of one chord",
            format!(
                "{}; {}",
                super::MAX_BATCH_ACTIONS,
                super::keys::MAX_CHORD_KEYS
            ),
            "an error result; nothing runs",
        ),
        Limit::new(
            "computer",
            "`hold_key` and `wait` duration",
            seconds(super::actions::MAX_ACTION_DURATION),
            "an error result",
        ),
        Limit::new(
            "computer",
            "text of one `type`; presses of one `key` (`repeat`)",
            format!(
                "{} characters; {}",
                super::actions::MAX_TYPED_CHARS,
                super::actions::MAX_KEY_REPEAT
            ),
            "an error result",
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_width_by_height() {
        assert_eq!(super::parse_size("1280x800"), Some((1280, 800)));
        assert_eq!(super::parse_size(" 1024 X 768 "), Some((1024, 768)));
        assert_eq!(super::parse_size("0x10"), None);
        assert_eq!(super::parse_size("wide"), None);
    }
}
