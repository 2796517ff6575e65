//! Who may call sandboxd's listeners. They take no token (agent-sandbox's SDK sends none) and run
//! anything as boxd's user, so they admit only those who could run code as that user anyway:
//! - a connection from this machine only from a process of boxd's own user (its socket's owner, read
//!   from `/proc/net/tcp*`: see `core::peer`), so the browser's and the training instances' users, and
//!   any other local user, are refused at accept; one from outside (another host or network namespace,
//!   where the operator bound the listeners off loopback) as the operator chose;
//! - nothing before the claim in pool mode: a warm pod nobody has claimed runs nothing for anyone;
//! - gRPC only as gRPC clients speak it (HTTP/2, `application/grpc`): tonic itself answers an HTTP/1.1
//!   POST of any content type, which a web page can send without a preflight;
//! - REST only under a host name that cannot be rebound: an IP literal, `localhost`, this machine's
//!   name or one the operator lists, so a DNS-rebinding page reaches nothing.
//!
//! Why the socket's owner and not a network namespace of their own: entering or making one needs
//! `CAP_SYS_ADMIN`, which containers lack under the engines' defaults, and the agent-sandbox SDK reaches
//! the listeners through a port-forward into the pod's own namespace.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::net::{TcpListener, TcpStream};

use crate::core::claim::Claim;
use crate::core::peer::PeerRule;

const NOT_CLAIMED: &str = "this sandbox has not been claimed yet (pool mode): sandboxd's listeners \
    answer once POST /init has set its session";

/// A listener that drops, at accept, every connection its rule refuses.
pub struct AdmittedListener {
    inner: TcpListener,
    rule: Arc<PeerRule>,
}

impl AdmittedListener {
    pub fn new(inner: TcpListener, rule: PeerRule) -> AdmittedListener {
        AdmittedListener {
            inner,
            rule: Arc::new(rule),
        }
    }
}

impl axum::serve::Listener for AdmittedListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let (stream, peer) = axum::serve::Listener::accept(&mut self.inner).await;
            let Ok(local) = stream.local_addr() else {
                continue;
            };
            let rule = Arc::clone(&self.rule);
            let admitted = tokio::task::spawn_blocking(move || rule.admits(peer, local))
                .await
                .unwrap_or(false);
            if admitted {
                return (stream, peer);
            }
            tracing::warn!(%peer, "sandboxd refused a connection from a process not of boxd's user");
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Who may connect to sandboxd: processes of boxd's own user here, and peers from outside this network
/// namespace (the operator bound the listener where they reach it).
pub fn peer_rule() -> PeerRule {
    // SAFETY: geteuid only reads this process's credentials.
    let uid = unsafe { libc::geteuid() };
    PeerRule::OnlyUser { uid, remote: true }
}

/// Nothing before the claim: a gRPC call gets `UNAVAILABLE`, a REST request 503.
pub async fn require_claim(State(claim): State<Claim>, request: Request, next: Next) -> Response {
    if claim.is_claimed() {
        return next.run(request).await;
    }
    if is_grpc(&request) {
        return tonic::Status::unavailable(NOT_CLAIMED).into_http();
    }
    (StatusCode::SERVICE_UNAVAILABLE, NOT_CLAIMED).into_response()
}

fn is_grpc(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value == "application/grpc"
                || value.starts_with("application/grpc+")
                || value.starts_with("application/grpc;")
        })
}

/// gRPC as gRPC clients send it: HTTP/2 and an `application/grpc` body.
pub async fn require_grpc(request: Request, next: Next) -> Response {
    if request.version() != Version::HTTP_2 {
        return (
            StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            "sandboxd's gRPC listener speaks HTTP/2 only (h2c)",
        )
            .into_response();
    }
    if !is_grpc(&request) {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "sandboxd's gRPC listener takes application/grpc only",
        )
            .into_response();
    }
    next.run(request).await
}

/// The host names REST answers under: IP literals, `localhost`, this machine's name and `extra`.
#[derive(Clone)]
pub struct AllowedHosts(Arc<Vec<String>>);

impl AllowedHosts {
    pub fn new(extra: &[String]) -> AllowedHosts {
        let mut names: Vec<String> = extra
            .iter()
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        names.push("localhost".into());
        if let Some(own) = hostname() {
            names.push(own.to_ascii_lowercase());
        }
        AllowedHosts(Arc::new(names))
    }

    /// Whether a request with `Host: host` may be served.
    pub fn allows(&self, host: &str) -> bool {
        let name = host_name(host);
        if name.parse::<std::net::IpAddr>().is_ok() {
            return true;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.0.contains(&name)
    }
}

/// `host` without its port (and an IPv6 literal without its brackets).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(inside, _)| inside);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|byte| byte.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

fn hostname() -> Option<String> {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most the given length into the buffer.
    if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0 {
        return None;
    }
    let end = buffer.iter().position(|byte| *byte == 0)?;
    String::from_utf8(buffer.get(..end)?.to_vec()).ok()
}

/// REST only under an allowed host name (HTTP/1.1 requires a Host; HTTP/2 gives the authority).
pub async fn require_allowed_host(
    State(allowed): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            request
                .uri()
                .authority()
                .map(|authority| authority.to_string())
        });
    match host {
        Some(host) if allowed.allows(&host) => next.run(request).await,
        _ => (
            StatusCode::MISDIRECTED_REQUEST,
            "sandboxd's REST API answers only under an IP address, localhost, this machine's name or \
             a name given to --sandboxd-allowed-hosts",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_that_cannot_be_rebound_are_allowed() {
        let allowed = AllowedHosts::new(&["sandbox.internal".to_string()]);
        for host in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "10.1.2.3:41234",
            "localhost:8080",
            "LOCALHOST",
            "sandbox.internal:8080",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "evil.example:8080",
            "localhost.evil.example",
            "",
            "127.0.0.1.nip.io",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
    }
}
