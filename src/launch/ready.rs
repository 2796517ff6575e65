//! Waiting until a started image serves: its status-only readiness route through nginx (200 once every
//! family of the image is up), or `/healthz` for an image whose agent has no such route.

use std::time::{Duration, Instant};

use super::engine::{Engine, State};
use super::error::LaunchError;
use super::spec;

/// The first probes come fast (a ready image answers in ~0.1-0.3 s); later ones back off to this.
const MAX_PROBE_INTERVAL: Duration = Duration::from_millis(200);
const FIRST_PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// One probe's time: nginx answers at once even while the agent starts (502).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the container's state is asked while probes fail, so a crashed image fails `up` at once
/// instead of at the deadline.
const STATE_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Log lines read for the error's tail: enough that the launcher's own probes, which the agent logs
/// too and the tail leaves out, do not crowd out the lines that explain the failure.
const LOG_SCAN: usize = 400;
/// The detailed readiness quoted in the error, at most.
const MAX_DETAIL_CHARS: usize = 400;

/// What one probe found.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    Ready,
    NotYet(String),
    /// The agent has no status-only readiness route: probe `/healthz` (with the token) instead.
    NoReadinessRoute,
}

fn classify(status: u16, path: &str) -> Probe {
    match status {
        200 => Probe::Ready,
        404 if path.ends_with("/readyz/status") => Probe::NoReadinessRoute,
        // 502/503/504: nginx up, the agent not yet, or some family still starting.
        status => Probe::NotYet(format!("{path} answered {status}")),
    }
}

pub async fn wait(
    engine: &Engine,
    id: &str,
    image: &str,
    port: u16,
    token: &str,
    within: Duration,
) -> Result<(), LaunchError> {
    let http = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|err| LaunchError::Other {
            action: "making the readiness probe's client",
            reason: err.to_string(),
        })?;
    let base = spec::api_url(port);
    let mut path = "/readyz/status";
    let started = Instant::now();
    let mut interval = FIRST_PROBE_INTERVAL;
    let mut last_state_check = started;
    loop {
        let mut request = http.get(format!("{base}{path}"));
        if path == "/healthz" {
            request = request.bearer_auth(token);
        }
        let probe = match request.send().await {
            Ok(response) => classify(response.status().as_u16(), path),
            Err(err) => Probe::NotYet(format!("{path}: {}", without_url(&err))),
        };
        let last_probe = match probe {
            Probe::Ready => return Ok(()),
            Probe::NoReadinessRoute => {
                path = "/healthz";
                continue;
            }
            Probe::NotYet(what) => what,
        };
        if last_state_check.elapsed() >= STATE_CHECK_INTERVAL {
            last_state_check = Instant::now();
            if let State::Stopped { exit_code } = engine.state(id).await? {
                return Err(LaunchError::Exited {
                    id: id.get(..12).unwrap_or(id).to_owned(),
                    image: image.to_owned(),
                    status: exit_code.map_or_else(|| "unknown".into(), |code| code.to_string()),
                    logs: spec::tail_lines(&engine.logs(id, LOG_SCAN).await, super::LOG_LINES),
                });
            }
        }
        if started.elapsed() + interval >= within {
            let detail = match unready_families(&http, &base, token).await {
                Some(families) => format!("{last_probe}; /readyz: {families}"),
                None => last_probe,
            };
            return Err(LaunchError::NotReady {
                id: id.get(..12).unwrap_or(id).to_owned(),
                image: image.to_owned(),
                seconds: within.as_secs(),
                last_probe: detail,
                logs: spec::tail_lines(&engine.logs(id, LOG_SCAN).await, super::LOG_LINES),
            });
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 3 / 2).min(MAX_PROBE_INTERVAL);
    }
}

/// Which families an image that answers but is not ready is waiting for: its detailed readiness
/// (bearer), compact and cut short. None when it does not say.
async fn unready_families(http: &reqwest::Client, base: &str, token: &str) -> Option<String> {
    let response = http
        .get(format!("{base}/readyz"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    let body: serde_json::Value = response.json().await.ok()?;
    let text = not_ready(&body).unwrap_or_else(|| body.to_string());
    Some(match text.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((cut, _)) => format!("{}...", text.get(..cut).unwrap_or_default()),
        None => text,
    })
}

/// The families of a `/readyz` answer that are not ready, as `name: status (reason)`.
fn not_ready(body: &serde_json::Value) -> Option<String> {
    let families = body.get("families")?.as_object()?;
    let waiting: Vec<String> = families
        .iter()
        .filter_map(|(name, family)| {
            let status = family.get("status")?.as_str()?;
            (status != "ready" && status != "disabled").then(|| {
                match family.get("reason").and_then(|r| r.as_str()) {
                    Some(reason) if !reason.is_empty() => format!("{name}: {status} ({reason})"),
                    _ => format!("{name}: {status}"),
                }
            })
        })
        .collect();
    (!waiting.is_empty()).then(|| waiting.join(", "))
}

/// reqwest's message names the URL, which the error already gives; keep the cause.
fn without_url(err: &reqwest::Error) -> String {
    let mut current: &dyn std::error::Error = err;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_only_the_families_not_ready() {
        let body = serde_json::json!({"ready": false, "families": {
            "shell": {"status": "ready", "reason": ""},
            "adb": {"status": "failed", "reason": "adb server unreachable"},
            "computer": {"status": "starting"},
            "browser": {"status": "disabled"},
        }});
        assert_eq!(
            not_ready(&body).as_deref(),
            Some("adb: failed (adb server unreachable), computer: starting")
        );
        assert_eq!(not_ready(&serde_json::json!({"ready": false})), None);
    }

    #[test]
    fn probes_are_classified() {
        assert_eq!(classify(200, "/readyz/status"), Probe::Ready);
        assert_eq!(classify(200, "/healthz"), Probe::Ready);
        assert_eq!(classify(404, "/readyz/status"), Probe::NoReadinessRoute);
        assert_eq!(
            classify(404, "/healthz"),
            Probe::NotYet("/healthz answered 404".into())
        );
        assert_eq!(
            classify(502, "/readyz/status"),
            Probe::NotYet("/readyz/status answered 502".into())
        );
        assert_eq!(
            classify(503, "/readyz/status"),
            Probe::NotYet("/readyz/status answered 503".into())
        );
    }
}
