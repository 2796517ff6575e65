//! Hosted MCP server configs in upstream's `mcp_server_configs.json` format:
//! `{"mcpServers": {NAME: {"command", "args", "env"} | {"type", "url", "headers", "timeout", "sse_read_timeout"}}}`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::core::error::{ApiError, ApiResult};

/// Handshake bound when a config gives no `timeout`: a server that cannot initialise in this long fails.
pub(super) const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest handshake a config may ask for (10 min: room for `npx`/`uvx` to download a server on its
/// first start). A longer one is refused rather than trusted: a hung server holds its name until then.
pub(super) const MAX_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
    },
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub name: String,
    pub transport: Transport,
    pub initialize_timeout: Duration,
}

/// Parses `{"mcpServers": {...}}`, naming the first problem found.
pub fn parse_servers(configs: &Value) -> ApiResult<Vec<ServerSpec>> {
    let servers = configs
        .get("mcpServers")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            ApiError::BadRequest("server_configs must contain an \"mcpServers\" object".into())
        })?;
    if servers.is_empty() {
        return Err(ApiError::BadRequest(
            "\"mcpServers\" lists no servers".into(),
        ));
    }
    servers
        .iter()
        .map(|(name, config)| parse_server(name, config))
        .collect()
}

fn parse_server(name: &str, config: &Value) -> ApiResult<ServerSpec> {
    let bad = |problem: &str| ApiError::BadRequest(format!("MCP server {name:?}: {problem}"));
    if name.trim().is_empty() {
        return Err(bad("the server name is empty"));
    }
    let config = config
        .as_object()
        .ok_or_else(|| bad("the config must be an object"))?;
    let text = |key: &str| {
        config
            .get(key)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
    };
    let strings = |key: &str| -> ApiResult<BTreeMap<String, String>> {
        match config.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Number(n) => Ok((k.clone(), n.to_string())),
                    Value::Bool(b) => Ok((k.clone(), b.to_string())),
                    _ => Err(bad(&format!("{key}.{k} must be a string"))),
                })
                .collect(),
            Some(_) => Err(bad(&format!("{key} must be an object of strings"))),
        }
    };
    let initialize_timeout = match config.get("timeout") {
        None | Some(Value::Null) => DEFAULT_INITIALIZE_TIMEOUT,
        Some(value) => {
            let seconds = value
                .as_f64()
                .filter(|seconds| *seconds > 0.0)
                .ok_or_else(|| bad("timeout must be a positive number of seconds"))?;
            if seconds > MAX_INITIALIZE_TIMEOUT.as_secs_f64() {
                return Err(bad(&format!(
                    "timeout must be at most {} seconds, got {seconds}",
                    MAX_INITIALIZE_TIMEOUT.as_secs()
                )));
            }
            Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|timeout| !timeout.is_zero())
                .ok_or_else(|| bad("timeout must be a positive number of seconds"))?
        }
    };
    let transport = if let Some(command) = text("command") {
        let args = match config.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| bad("args must be strings"))
                })
                .collect::<ApiResult<_>>()?,
            Some(_) => return Err(bad("args must be a list of strings")),
        };
        Transport::Stdio {
            command: command.to_owned(),
            args,
            env: strings("env")?,
        }
    } else if let Some(url) = text("url") {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad("url must be http:// or https://"));
        }
        let headers = strings("headers")?;
        match text("type") {
            None | Some("sse") => Transport::Sse {
                url: url.to_owned(),
                headers,
            },
            Some("streamable_http" | "streamableHttp" | "streamable-http" | "http") => {
                Transport::StreamableHttp {
                    url: url.to_owned(),
                    headers,
                }
            }
            Some(other) => {
                return Err(bad(&format!(
                    "unknown type {other:?} (sse or streamable_http)"
                )));
            }
        }
    } else {
        return Err(bad(
            "a config needs either \"command\" (stdio) or \"url\" (sse, streamable_http)",
        ));
    };
    Ok(ServerSpec {
        name: name.to_owned(),
        transport,
        initialize_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_transports() {
        let specs = parse_servers(&json!({"mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
            "remote": {"url": "http://127.0.0.1:9/sse", "timeout": 5},
            "stream": {"type": "streamableHttp", "url": "http://127.0.0.1:9/mcp", "headers": {"X": "1"}}
        }}))
        .unwrap();
        assert_eq!(specs.len(), 3);
        // In the config's order (serde_json keeps object order).
        assert!(
            matches!(&specs[0].transport, Transport::Stdio { command, .. } if command == "uvx")
        );
        assert!(matches!(specs[1].transport, Transport::Sse { .. }));
        assert_eq!(specs[1].initialize_timeout, Duration::from_secs(5));
        assert!(matches!(
            specs[2].transport,
            Transport::StreamableHttp { .. }
        ));
    }

    #[test]
    fn bad_configs_are_named() {
        for (configs, needle) in [
            (json!({}), "mcpServers"),
            (json!({"mcpServers": {}}), "no servers"),
            (json!({"mcpServers": {"x": {}}}), "\"x\""),
            (
                json!({"mcpServers": {"x": {"command": "a", "args": [1]}}}),
                "args",
            ),
            (json!({"mcpServers": {"x": {"url": "ftp://h"}}}), "url"),
            (
                json!({"mcpServers": {"x": {"url": "http://h", "type": "ws"}}}),
                "ws",
            ),
            (
                json!({"mcpServers": {"x": {"command": "a", "timeout": 601}}}),
                "at most 600 seconds",
            ),
            (
                json!({"mcpServers": {"x": {"command": "a", "timeout": 1e19}}}),
                "at most 600 seconds",
            ),
            (
                json!({"mcpServers": {"x": {"command": "a", "timeout": -1}}}),
                "positive",
            ),
        ] {
            let err = parse_servers(&configs).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} lacks {needle}");
        }
    }
}
