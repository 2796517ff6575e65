//! What upstream's images configure through nginx, translated into boxd's own settings: the one
//! timeout (`NGINX_TIMEOUT`) becomes the answer deadline and the limits that keep work inside it.

use std::ffi::OsString;

/// nginx's default in upstream's images.
const DEFAULT_TIMEOUT: u64 = 60;
/// Idle streams send keep-alives at least this often, and at half the timeout when that is shorter.
const MAX_KEEP_ALIVE: u64 = 15;
/// Upstream's images read this file when it exists (their MCP servers).
const IMAGE_MCP_CONFIG: &str = "/etc/boxd/mcp_server_configs.json";

/// `NGINX_TIMEOUT` in whole seconds, at least 1; anything else is reported and replaced by 60.
pub fn nginx_timeout(value: &str) -> u64 {
    match value.trim().parse::<u64>() {
        Ok(seconds) if seconds >= 1 => seconds,
        _ => {
            eprintln!(
                "boxd init: NGINX_TIMEOUT must be whole seconds, got '{value}'; using {DEFAULT_TIMEOUT}"
            );
            DEFAULT_TIMEOUT
        }
    }
}

/// `boxd serve`'s environment: `base` plus, for each setting `base` does not set itself, the value
/// derived from `timeout`: requests unanswered after it get 504; commands, cells and training calls
/// stop a little before it, so a slow one returns its result, not a 504; idle streams send keep-alives
/// well inside it.
pub fn serve_environment(timeout: u64, base: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let work_limit = if timeout > 10 {
        timeout.saturating_sub(5)
    } else {
        timeout.saturating_mul(3) / 4
    }
    .max(1);
    let keep_alive = (timeout / 2).clamp(1, MAX_KEEP_ALIVE);
    let mut derived = vec![
        ("BOXD_RESPONSE_TIMEOUT", timeout.to_string()),
        ("BOXD_COMMAND_TIMEOUT", work_limit.to_string()),
        ("BOXD_CELL_TIMEOUT", work_limit.to_string()),
        ("BOXD_TRAINING_CALL_TIMEOUT", work_limit.to_string()),
        ("BOXD_KEEP_ALIVE", keep_alive.to_string()),
    ];
    if std::path::Path::new(IMAGE_MCP_CONFIG).is_file() {
        derived.push(("BOXD_MCP_CONFIG", IMAGE_MCP_CONFIG.to_string()));
    }
    let mut environment = base.to_vec();
    for (name, value) in derived {
        if !base.iter().any(|(set, _)| set == name) {
            environment.push((name.into(), value.into()));
        }
    }
    environment
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(environment: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
        environment
            .iter()
            .find(|(set, _)| set == name)
            .and_then(|(_, value)| value.to_str())
    }

    #[test]
    fn the_timeout_is_whole_positive_seconds() {
        assert_eq!(nginx_timeout("120"), 120);
        assert_eq!(nginx_timeout("0"), DEFAULT_TIMEOUT);
        assert_eq!(nginx_timeout("1.5"), DEFAULT_TIMEOUT);
        assert_eq!(nginx_timeout("-3"), DEFAULT_TIMEOUT);
        assert_eq!(nginx_timeout("99999999999999999999999"), DEFAULT_TIMEOUT);
    }

    #[test]
    fn work_stops_before_the_timeout_and_set_values_win() {
        let environment = serve_environment(60, &[]);
        assert_eq!(value(&environment, "BOXD_RESPONSE_TIMEOUT"), Some("60"));
        assert_eq!(value(&environment, "BOXD_COMMAND_TIMEOUT"), Some("55"));
        assert_eq!(value(&environment, "BOXD_KEEP_ALIVE"), Some("15"));
        let short = serve_environment(4, &[("BOXD_CELL_TIMEOUT".into(), "2".into())]);
        assert_eq!(value(&short, "BOXD_COMMAND_TIMEOUT"), Some("3"));
        assert_eq!(value(&short, "BOXD_CELL_TIMEOUT"), Some("2"));
        assert_eq!(value(&short, "BOXD_KEEP_ALIVE"), Some("2"));
        let one = serve_environment(1, &[]);
        assert_eq!(value(&one, "BOXD_COMMAND_TIMEOUT"), Some("1"));
        assert_eq!(value(&one, "BOXD_KEEP_ALIVE"), Some("1"));
    }
}
