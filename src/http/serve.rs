//! Accepting and serving connections, within bounds: idle keep-alive connections and slow request heads
//! are closed, the number of connections is capped below what the fd limit allows, and past the cap a
//! few more connections are still accepted to answer health checks (everything else on them gets a 503
//! naming the cap), so an orchestrator's probe is answered while idle clients hold every slot.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::core::error::ApiError;
use crate::core::peer::PeerRule;

/// Connections served with every route at once, at most; a lower fd limit lowers it (see
/// [`connection_cap`]).
pub const MAX_CONNECTIONS: usize = 4096;
/// Connections accepted past the cap, each for one health check (or a 503 naming the cap) and then
/// closed. When all are taken, a new one closes the oldest, so connections left idle cannot keep a
/// probe out.
pub const OVERFLOW_CONNECTIONS: usize = 64;
/// The request-head timeout of the overflow connections: they exist for one quick probe.
pub const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Out of file descriptors (or another accept failure): wait this long before accepting again, so the
/// loop does not spin while requests in flight give descriptors back.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// What a 503 past the cap asks the client to wait.
const OVERFLOW_RETRY_AFTER_SECONDS: u64 = 1;

/// Routes an overflow connection still serves: the probes an orchestrator uses.
const PROBES: &[&str] = &["/livez", "/healthz", "/readyz/status"];

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (what an unprivileged process may) and returns
/// the soft limit in force.
pub fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(
            "cannot read the file descriptor limit: {}",
            std::io::Error::last_os_error()
        );
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!(
                from = limit.rlim_cur,
                to = limit.rlim_max,
                "raised the file descriptor limit"
            );
            return limit.rlim_max;
        }
        tracing::warn!(
            "cannot raise the file descriptor limit: {}",
            std::io::Error::last_os_error()
        );
    }
    limit.rlim_cur
}

/// Connections boxd serves at once under `fd_limit`: half the descriptors, the other half being for
/// what the requests open (files, pipes, children's PTYs, the kernel), and never more than
/// [`MAX_CONNECTIONS`].
pub fn connection_cap(fd_limit: u64) -> usize {
    let half = usize::try_from(fd_limit / 2).unwrap_or(usize::MAX);
    half.saturating_sub(OVERFLOW_CONNECTIONS)
        .clamp(1, MAX_CONNECTIONS)
}

/// The listener `boxd init` handed over (close-on-exec already: it came with `MSG_CMSG_CLOEXEC`, so no
/// child inherits the public port), made a tokio one.
pub fn adopt_listener(listener: std::net::TcpListener) -> Result<TcpListener, String> {
    listener
        .local_addr()
        .map_err(|err| format!("the handed-over descriptor is not a listening socket: {err}"))?;
    listener
        .set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(listener))
        .map_err(|err| format!("cannot serve on the handed-over listener: {err}"))
}

pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// Who may connect: the families' confined users may not (see `Family::confined_uids`).
    pub peers: Arc<PeerRule>,
}

/// Serves `router` on `listener` until `stop` resolves; then every connection finishes its request in
/// flight (idle ones close at once) and this returns once all have.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    // `any_service` makes the router a handler, callable with no `tower` in scope.
    let service = axum::routing::any_service(router);
    let served = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Overflow::default());
    let over_cap = Arc::new(AtomicBool::new(false));
    let closing = CancellationToken::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // The peer gave up before the accept: nothing to wait for.
                    if !matches!(
                        err.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) {
                        tracing::warn!("cannot accept a connection: {err}");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                    continue;
                }
            },
        };
        // Without TCP_NODELAY a streamed body's first small write waits on the client's delayed ACK
        // of the headers (~40 ms per small file read).
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {err}");
        }
        let (slot, restricted) = match Arc::clone(&served).try_acquire_owned() {
            Ok(permit) => {
                over_cap.store(false, Ordering::Relaxed);
                (Slot::Served { _permit: permit }, false)
            }
            Err(_) => {
                if !over_cap.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max = limits.max_connections,
                        "connection limit reached; further connections answer only health checks"
                    );
                }
                (Slot::Overflow(overflow.admit()), true)
            }
        };
        let connection = Connection {
            service: service.clone(),
            restricted,
            max_connections: limits.max_connections,
            header_timeout: if restricted {
                OVERFLOW_HEADER_TIMEOUT.min(limits.header_timeout)
            } else {
                limits.header_timeout
            },
        };
        let peers = Arc::clone(&limits.peers);
        let closing = closing.clone();
        tokio::spawn(async move {
            if !peers.is_open() && !admitted(&peers, &stream, peer).await {
                tracing::debug!(%peer, "refused a connection from a confined user");
                return;
            }
            connection.serve(stream, slot, closing).await;
        });
    }
    closing.cancel();
    overflow.close_all();
    // Each served connection holds a permit until it is done: having them all back means all are.
    for _ in 0..limits.max_connections {
        match served.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => break,
        }
    }
}

/// Whether `rules` admit the connection `stream` from `peer` (read off the thread: it reads `/proc`).
async fn admitted(rules: &Arc<PeerRule>, stream: &TcpStream, peer: std::net::SocketAddr) -> bool {
    let Ok(local) = stream.local_addr() else {
        return false;
    };
    let rules = Arc::clone(rules);
    tokio::task::spawn_blocking(move || rules.admits(peer, local))
        .await
        .unwrap_or(false)
}

/// What a connection holds while it is open.
enum Slot {
    Served { _permit: OwnedSemaphorePermit },
    Overflow(OverflowTicket),
}

/// The connections past the cap, oldest first: each can be told to close at once.
#[derive(Default)]
struct Overflow {
    open: std::sync::Mutex<(u64, VecDeque<(u64, CancellationToken)>)>,
}

struct OverflowTicket {
    id: u64,
    evicted: CancellationToken,
    overflow: Arc<Overflow>,
}

impl Overflow {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, VecDeque<(u64, CancellationToken)>)> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn admit(self: &Arc<Self>) -> OverflowTicket {
        let evicted = CancellationToken::new();
        let mut open = self.lock();
        let (next_id, queue) = &mut *open;
        *next_id = next_id.wrapping_add(1);
        let id = *next_id;
        if queue.len() >= OVERFLOW_CONNECTIONS
            && let Some((_, oldest)) = queue.pop_front()
        {
            oldest.cancel();
        }
        queue.push_back((id, evicted.clone()));
        OverflowTicket {
            id,
            evicted,
            overflow: Arc::clone(self),
        }
    }

    fn close_all(&self) {
        for (_, connection) in self.lock().1.drain(..) {
            connection.cancel();
        }
    }
}

impl Drop for OverflowTicket {
    fn drop(&mut self) {
        self.overflow.lock().1.retain(|(id, _)| *id != self.id);
    }
}

struct Connection {
    service: axum::routing::MethodRouter,
    /// Past the connection cap: health checks only, then closed.
    restricted: bool,
    max_connections: usize,
    header_timeout: Duration,
}

impl Connection {
    async fn serve(self, stream: TcpStream, slot: Slot, closing: CancellationToken) {
        let evicted = match &slot {
            Slot::Overflow(ticket) => ticket.evicted.clone(),
            Slot::Served { .. } => CancellationToken::new(),
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .keep_alive(!self.restricted);
        let Connection {
            service,
            restricted,
            max_connections,
            ..
        } = self;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let service = service.clone();
            async move {
                let _busy = crate::core::memory::busy();
                crate::core::first_request::arrived();
                let request = request.map(Body::new);
                if restricted && !is_probe(request.uri().path()) {
                    return Ok::<Response, Infallible>(over_cap_response(max_connections));
                }
                let answer = axum::handler::Handler::call(service, request, ()).await;
                crate::core::start_gate::open();
                Ok(answer)
            }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        tokio::pin!(connection);
        let served = tokio::select! {
            served = connection.as_mut() => served,
            () = closing.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
            () = evicted.cancelled() => Ok(()),
        };
        drop(slot);
        if let Err(err) = served {
            // Timeouts of idle and slow clients end here too: routine, not worth more than debug.
            tracing::debug!("connection ended: {err}");
        }
    }
}

fn is_probe(path: &str) -> bool {
    let path = path.strip_prefix("/fastapi").unwrap_or(path);
    PROBES.contains(&path)
}

fn over_cap_response(max_connections: usize) -> Response {
    let mut response = ApiError::Unavailable {
        message: format!(
            "boxd is serving its limit of {max_connections} connections; close idle connections or retry later"
        ),
        retry_after_seconds: OVERFLOW_RETRY_AFTER_SECONDS,
    }
    .into_response();
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_half_the_descriptors_to_requests() {
        assert_eq!(connection_cap(1024), 512 - OVERFLOW_CONNECTIONS);
        assert_eq!(connection_cap(1 << 20), MAX_CONNECTIONS);
        assert_eq!(connection_cap(16), 1);
    }

    #[test]
    fn probes_are_recognised_under_both_prefixes() {
        assert!(is_probe("/healthz"));
        assert!(is_probe("/fastapi/livez"));
        assert!(!is_probe("/workspace/file"));
    }
}
