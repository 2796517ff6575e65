//! The launcher's decisions that need no engine: which image, which engine address, the token, the
//! container's labels and name, and the JSON `up` prints.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::LaunchError;

/// Every container `boxd launch up` creates carries this label (value `1`): `ls` lists only those and
/// `down` refuses any other.
pub const LABEL: &str = "boxd.launch";
/// The sandbox type the container was started as.
pub const LABEL_TYPE: &str = "boxd.launch.type";
/// The container port nginx serves on in every image (the SDK's manager publishes the same).
pub const CONTAINER_PORT: &str = "80/tcp";

/// The image types, named as the SDK names them (`runtime-sandbox-<type>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxType {
    Base,
    Gui,
    Browser,
    Filesystem,
    Mobile,
}

impl SandboxType {
    pub fn name(self) -> &'static str {
        match self {
            SandboxType::Base => "base",
            SandboxType::Gui => "gui",
            SandboxType::Browser => "browser",
            SandboxType::Filesystem => "filesystem",
            SandboxType::Mobile => "mobile",
        }
    }

    /// The SDK's GUI mixin (noVNC at `/vnc/`) is on these classes.
    fn has_desktop(self) -> bool {
        matches!(
            self,
            SandboxType::Gui | SandboxType::Browser | SandboxType::Filesystem
        )
    }
}

/// The image the SDK's manager would run for `kind`, as its `build_image_uri` builds it from
/// `RUNTIME_SANDBOX_REGISTRY`, `RUNTIME_SANDBOX_IMAGE_NAMESPACE` and `RUNTIME_SANDBOX_IMAGE_TAG`. One
/// difference: no registry means `docker.io/` spelled out, because podman's Docker API files a short
/// name elsewhere than `make images` tags it. Empty variables count as unset.
pub fn default_image(kind: SandboxType, env: impl Fn(&str) -> Option<String>) -> String {
    let set = |name: &str| {
        env(name)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
    };
    let registry = set("RUNTIME_SANDBOX_REGISTRY").unwrap_or_else(|| "docker.io".into());
    let namespace = set("RUNTIME_SANDBOX_IMAGE_NAMESPACE").unwrap_or_else(|| "agentscope".into());
    let tag = set("RUNTIME_SANDBOX_IMAGE_TAG").unwrap_or_else(|| "latest".into());
    format!(
        "{registry}/{namespace}/runtime-sandbox-{}:{tag}",
        kind.name()
    )
}

/// Where the engine's API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    /// `tcp://HOST:PORT` or `http://HOST:PORT`, as given.
    Http(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Http(address) => f.write_str(address),
        }
    }
}

/// Podman's rootful API socket, where `podman system service` puts it by default.
pub const PODMAN_SOCKET: &str = "/run/podman/podman.sock";
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// The engine address: `--engine-socket`, else `DOCKER_HOST`, else podman's socket if it exists, else
/// Docker's (whose absence then shows as an unreachable engine).
pub fn resolve_endpoint(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    exists: impl Fn(&Path) -> bool,
) -> Result<Endpoint, LaunchError> {
    let given = flag
        .map(str::to_owned)
        .or_else(|| env("DOCKER_HOST"))
        .filter(|value| !value.trim().is_empty());
    match given {
        Some(value) => parse_endpoint(value.trim()),
        None if exists(Path::new(PODMAN_SOCKET)) => Ok(Endpoint::Unix(PODMAN_SOCKET.into())),
        None => Ok(Endpoint::Unix(DOCKER_SOCKET.into())),
    }
}

fn parse_endpoint(value: &str) -> Result<Endpoint, LaunchError> {
    if let Some(path) = value.strip_prefix("unix://") {
        if path.starts_with('/') {
            return Ok(Endpoint::Unix(path.into()));
        }
    } else if value.starts_with("tcp://") || value.starts_with("http://") {
        return Ok(Endpoint::Http(value.to_owned()));
    } else if !value.contains("://") {
        return Ok(Endpoint::Unix(value.into()));
    }
    Err(LaunchError::UnsupportedEngine(value.to_owned()))
}

/// A fresh token, 16 random bytes in hex: what the SDK's manager makes (`secrets.token_hex(16)`).
pub fn generate_token() -> Result<String, LaunchError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| LaunchError::Other {
        action: "reading random bytes for the token",
        reason: err.to_string(),
    })?;
    Ok(hex::encode(bytes))
}

/// `boxd-<type>-<8 hex>`: readable in `podman ps`, unique enough that two launches do not collide.
pub fn container_name(kind: SandboxType) -> Result<String, LaunchError> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).map_err(|err| LaunchError::Other {
        action: "reading random bytes for the name",
        reason: err.to_string(),
    })?;
    Ok(format!("boxd-{}-{}", kind.name(), hex::encode(bytes)))
}

/// The base URL `SandboxHttpClient` talks to. The client builds its own as
/// `urljoin(ContainerModel.url, "fastapi")`, which gives this same URL whether `url` is this one or the
/// manager's bare `http://HOST:PORT`; this one also works as is with curl and `boxd mcp-stdio --url`.
pub fn api_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/fastapi")
}

/// What `boxd launch up` prints, one JSON object.
#[derive(Debug, Serialize)]
pub struct Launched {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub image: String,
    pub url: String,
    pub port: u16,
    pub token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// noVNC, logged in with the token (the VNC password), as the SDK's `desktop_url` gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desktop_url: Option<String>,
    /// The screen stream, as the SDK's `mobile_url` gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mobile_url: Option<String>,
}

pub struct Started<'a> {
    pub id: String,
    pub name: String,
    pub kind: SandboxType,
    pub image: String,
    pub port: u16,
    pub token: &'a str,
    pub workspace: Option<&'a Path>,
}

impl From<Started<'_>> for Launched {
    fn from(started: Started<'_>) -> Self {
        let origin = format!("http://127.0.0.1:{}", started.port);
        // The token is hex (ours) or, with a hand-made one, whatever the user chose: the query wants it
        // percent-encoded either way.
        let password = percent_encode(started.token);
        let desktop_url = started
            .kind
            .has_desktop()
            .then(|| format!("{origin}/vnc/vnc_lite.html?password={password}"));
        let mobile_url = (started.kind == SandboxType::Mobile)
            .then(|| format!("{origin}/websockify/?password={password}"));
        Launched {
            id: started.id,
            name: started.name,
            kind: started.kind.name(),
            image: started.image,
            url: api_url(started.port),
            port: started.port,
            token: started.token.to_owned(),
            workspace: started.workspace.map(|path| path.display().to_string()),
            desktop_url,
            mobile_url,
        }
    }
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The last `count` non-empty lines of a log, indented, for an error message; the agent's log lines
/// of the launcher's own readiness probes are left out (they say only "503" or "200").
pub fn tail_lines(log: &str, count: usize) -> String {
    let probe =
        |line: &str| line.contains(" path=/readyz/status ") || line.contains(" path=/healthz ");
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| !line.trim().is_empty() && !probe(line))
        .collect();
    let first = lines.len().saturating_sub(count);
    match lines.get(first..) {
        Some(tail) if !tail.is_empty() => tail
            .iter()
            .map(|line| format!("  {line}"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => "  (no output)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_default_image_is_what_make_images_tags() {
        assert_eq!(
            default_image(SandboxType::Gui, env_of(&[])),
            "docker.io/agentscope/runtime-sandbox-gui:latest"
        );
        for kind in <SandboxType as clap::ValueEnum>::value_variants() {
            // `--type`'s spelling is the SDK's, which the image name and the label carry.
            let flag =
                clap::ValueEnum::to_possible_value(kind).map(|value| value.get_name().to_owned());
            assert_eq!(flag.as_deref(), Some(kind.name()));
            let image = default_image(*kind, env_of(&[]));
            assert!(
                image.ends_with(&format!("/runtime-sandbox-{}:latest", kind.name())),
                "{image}"
            );
        }
    }

    #[test]
    fn the_default_image_reads_the_sdk_variables_and_ignores_empty_ones() {
        let env = env_of(&[
            ("RUNTIME_SANDBOX_REGISTRY", " registry.example:5000 "),
            ("RUNTIME_SANDBOX_IMAGE_NAMESPACE", "team"),
            ("RUNTIME_SANDBOX_IMAGE_TAG", "v2"),
        ]);
        assert_eq!(
            default_image(SandboxType::Base, env),
            "registry.example:5000/team/runtime-sandbox-base:v2"
        );
        let empty = env_of(&[
            ("RUNTIME_SANDBOX_REGISTRY", ""),
            ("RUNTIME_SANDBOX_IMAGE_NAMESPACE", " "),
            ("RUNTIME_SANDBOX_IMAGE_TAG", ""),
        ]);
        assert_eq!(
            default_image(SandboxType::Mobile, empty),
            "docker.io/agentscope/runtime-sandbox-mobile:latest"
        );
    }

    #[test]
    fn the_engine_is_the_flag_then_docker_host_then_podman_then_docker() {
        let nowhere = |_: &Path| false;
        let podman_there = |path: &Path| path == Path::new(PODMAN_SOCKET);
        let docker_host = env_of(&[("DOCKER_HOST", "unix:///tmp/d.sock")]);
        assert_eq!(
            resolve_endpoint(Some("/tmp/flag.sock"), &docker_host, podman_there).ok(),
            Some(Endpoint::Unix("/tmp/flag.sock".into()))
        );
        assert_eq!(
            resolve_endpoint(None, &docker_host, podman_there).ok(),
            Some(Endpoint::Unix("/tmp/d.sock".into()))
        );
        assert_eq!(
            resolve_endpoint(None, env_of(&[]), podman_there).ok(),
            Some(Endpoint::Unix(PODMAN_SOCKET.into()))
        );
        assert_eq!(
            resolve_endpoint(None, env_of(&[("DOCKER_HOST", "")]), nowhere).ok(),
            Some(Endpoint::Unix(DOCKER_SOCKET.into()))
        );
    }

    #[test]
    fn engine_addresses_parse_or_are_refused_by_name() {
        let none = env_of(&[]);
        let parse = |flag: &str| resolve_endpoint(Some(flag), &none, |_: &Path| false);
        assert_eq!(
            parse("unix:///run/x.sock").ok(),
            Some(Endpoint::Unix("/run/x.sock".into()))
        );
        assert_eq!(
            parse("tcp://127.0.0.1:2375").ok(),
            Some(Endpoint::Http("tcp://127.0.0.1:2375".into()))
        );
        for bad in [
            "ssh://user@host",
            "unix://relative.sock",
            "npipe:////./pipe/docker",
        ] {
            match parse(bad) {
                Err(LaunchError::UnsupportedEngine(value)) => assert_eq!(value, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(
            Endpoint::Unix("/run/x.sock".into()).to_string(),
            "unix:///run/x.sock"
        );
    }

    #[test]
    fn tokens_are_32_hex_digits_and_fresh() {
        let (a, b) = (generate_token().ok(), generate_token().ok());
        let a = a.unwrap_or_default();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|digit| digit.is_ascii_hexdigit()), "{a}");
        assert_ne!(Some(a), b);
    }

    fn started(kind: SandboxType) -> Launched {
        Launched::from(Started {
            id: "abc123".into(),
            name: "boxd-x".into(),
            kind,
            image: "img".into(),
            port: 41234,
            token: "0f0f",
            workspace: Some(Path::new("/tmp/ws")),
        })
    }

    #[test]
    fn up_prints_the_url_token_and_desktop_as_the_sdk_builds_them() {
        let json = serde_json::to_value(started(SandboxType::Gui)).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "id": "abc123",
                "name": "boxd-x",
                "type": "gui",
                "image": "img",
                "url": "http://127.0.0.1:41234/fastapi",
                "port": 41234,
                "token": "0f0f",
                "workspace": "/tmp/ws",
                "desktop_url": "http://127.0.0.1:41234/vnc/vnc_lite.html?password=0f0f",
            })
        );
        for kind in [SandboxType::Browser, SandboxType::Filesystem] {
            assert!(started(kind).desktop_url.is_some(), "{kind:?}");
        }
    }

    #[test]
    fn base_has_no_desktop_and_mobile_has_its_screen_url() {
        let base = serde_json::to_value(started(SandboxType::Base)).unwrap_or_default();
        assert!(
            base.get("desktop_url").is_none() && base.get("mobile_url").is_none(),
            "{base}"
        );
        let mobile = started(SandboxType::Mobile);
        assert_eq!(mobile.desktop_url, None);
        assert_eq!(
            mobile.mobile_url.as_deref(),
            Some("http://127.0.0.1:41234/websockify/?password=0f0f")
        );
    }

    #[test]
    fn a_hand_made_token_is_percent_encoded_in_the_query() {
        assert_eq!(percent_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn log_tails_keep_the_last_non_empty_lines() {
        assert_eq!(tail_lines("a\n\nb\nc\n", 2), "  b\n  c");
        assert_eq!(tail_lines("", 5), "  (no output)");
        assert_eq!(tail_lines("only\n", 5), "  only");
        let probes = "adb: no device\n\
            INFO boxd::http::log: request request_id=1 method=GET path=/readyz/status status=503\n\
            INFO boxd::http::log: request request_id=2 method=GET path=/healthz status=200\n";
        assert_eq!(tail_lines(probes, 2), "  adb: no device");
    }

    #[test]
    fn names_are_typed_and_distinct() {
        let a = container_name(SandboxType::Browser).unwrap_or_default();
        assert!(
            a.starts_with("boxd-browser-") && a.len() == "boxd-browser-".len() + 8,
            "{a}"
        );
        assert_ne!(Some(a), container_name(SandboxType::Browser).ok());
    }
}
