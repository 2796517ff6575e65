//! What nginx did in front of boxd in upstream's images, done by boxd itself on the public port, so
//! that the port answers from the container's first millisecond and the desktop stream is gated by the
//! whole token:
//!
//! - a deadline on every answer (`--response-timeout`, the images' `NGINX_TIMEOUT`): a request still
//!   unanswered then gets 504, as nginx gave;
//! - the desktop viewer's pages (noVNC) at `/vnc/`; opening one with the whole token in its query
//!   (`GuiSandbox.desktop_url`: `/vnc/vnc_lite.html?password=TOKEN`) gives the browser a short-lived,
//!   HttpOnly pass for the stream;
//! - the desktop stream at `/websockify`, relayed to the VNC server (the images': a Unix socket only
//!   root may open; or a loopback port) only for a client that shows the pass, the token as a bearer
//!   header, or the token in its query (the SDK's remote manager relays the page's query): anyone else
//!   gets 403 before a single RFB byte;
//! - a view-only desktop: `POST /desktop/view_url` (bearer) mints a view pass and answers the viewer's
//!   URL with it; `/websockify-view` relays to the same VNC server for a view pass (or the token),
//!   reading the viewer's RFB messages and dropping every input one (`view_only`).

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use hyper_util::rt::TokioIo;
use subtle::ConstantTimeEq;

use super::auth::Auth;
use crate::core::error::ApiError;

#[derive(Debug, Args)]
pub struct FrontArgs {
    /// Seconds a request may go unanswered before it gets 504, as nginx's timeout in upstream's images
    /// (`boxd init` sets it from `NGINX_TIMEOUT`). Unset: no deadline.
    #[arg(long, env = "BOXD_RESPONSE_TIMEOUT")]
    pub response_timeout: Option<f64>,

    /// The desktop viewer's pages (noVNC's directory), served at `/vnc/`.
    #[arg(long, env = "BOXD_DESKTOP_PAGES")]
    pub desktop_pages: Option<PathBuf>,

    /// The VNC server (speaking WebSocket itself, as x11vnc does): an absolute path is its Unix socket
    /// (the images': in a directory only root may enter, so no other local user reaches the desktop),
    /// anything else a loopback `HOST:PORT`. `/websockify` is relayed there for clients that showed the
    /// whole token.
    #[arg(long, env = "BOXD_DESKTOP_STREAM")]
    pub desktop_stream: Option<StreamAddress>,
}

/// Where the VNC server listens (`--desktop-stream`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for StreamAddress {
    type Err = String;

    fn from_str(value: &str) -> Result<StreamAddress, String> {
        if value.starts_with('/') {
            return Ok(StreamAddress::Unix(PathBuf::from(value)));
        }
        value.parse().map(StreamAddress::Tcp).map_err(|err| {
            format!("{value:?}: neither a Unix socket's absolute path nor HOST:PORT ({err})")
        })
    }
}

impl fmt::Display for StreamAddress {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamAddress::Tcp(address) => fmt::Display::fmt(address, formatter),
            StreamAddress::Unix(path) => write!(formatter, "unix:{}", path.display()),
        }
    }
}

/// A connection to the VNC server, whichever its kind.
trait StreamIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> StreamIo for T {}

impl StreamAddress {
    async fn connect(&self) -> std::io::Result<Box<dyn StreamIo>> {
        Ok(match self {
            StreamAddress::Tcp(address) => Box::new(tokio::net::TcpStream::connect(address).await?),
            StreamAddress::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
        })
    }

    /// The `Host` (and, when the client sent none, `Origin`) of the relayed handshake.
    fn host(&self) -> String {
        match self {
            StreamAddress::Tcp(address) => address.to_string(),
            StreamAddress::Unix(_) => "localhost".to_owned(),
        }
    }
}

/// How long a pass from the viewer's page opens the stream: enough for the page to load and connect.
const PASS_LIFETIME: Duration = Duration::from_secs(120);
/// Passes kept at once; the oldest goes first (each page load makes one).
const MAX_PASSES: usize = 64;
const PASS_COOKIE: &str = "boxd_desktop";
/// How long a view-only URL opens the view-only stream (each stream, once open, stays open).
const VIEW_PASS_LIFETIME: Duration = Duration::from_secs(600);
const VIEW_PASS_COOKIE: &str = "boxd_desktop_view";
/// The view-only stream's path (noVNC's `path` setting).
const VIEW_STREAM_PATH: &str = "websockify-view";
/// What is read from the VNC server at once for a view-only viewer.
const VIEW_READ_CHUNK: usize = 64 * 1024;
/// The VNC server must answer the relayed handshake within this.
const STREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The front's settings, checked.
#[derive(Clone)]
pub struct Front {
    response_timeout: Option<Duration>,
    desktop: Option<Arc<Desktop>>,
}

struct Desktop {
    pages: Option<PathBuf>,
    stream: Option<StreamAddress>,
    auth: Auth,
    /// Passes for the whole stream, from a viewer page opened with the token.
    passes: Passes,
    /// Passes for the view-only stream, from `POST /desktop/view_url`.
    view_passes: Passes,
}

/// Short-lived random passes: each one valid until its expiry, at most [`MAX_PASSES`] (the oldest goes
/// first).
struct Passes {
    lifetime: Duration,
    entries: Mutex<VecDeque<(String, Instant)>>,
}

impl Passes {
    fn new(lifetime: Duration) -> Passes {
        Passes {
            lifetime,
            entries: Mutex::new(VecDeque::new()),
        }
    }

    fn issue(&self) -> String {
        let pass = crate::core::secret::generate();
        let now = Instant::now();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.retain(|(_, expires)| *expires > now);
        while entries.len() >= MAX_PASSES {
            entries.pop_front();
        }
        entries.push_back((pass.clone(), now + self.lifetime));
        pass
    }

    /// How long `presented` stays valid; `None` when it is no live pass (compared in constant time).
    fn remaining(&self, presented: &str) -> Option<Duration> {
        let now = Instant::now();
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        entries
            .iter()
            .filter(|(_, expires)| *expires > now)
            .find(|(pass, _)| bool::from(pass.as_bytes().ct_eq(presented.as_bytes())))
            .map(|(_, expires)| expires.saturating_duration_since(now))
    }

    /// Whether a cookie `name` in `headers` holds a live pass.
    fn in_cookie(&self, headers: &HeaderMap, name: &str) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
            .any(|presented| self.remaining(presented).is_some())
    }
}

impl Front {
    pub fn new(args: &FrontArgs, auth: &Auth) -> Result<Front, String> {
        let response_timeout = args
            .response_timeout
            .map(|seconds| crate::core::deadline::positive_seconds("--response-timeout", seconds))
            .transpose()?;
        if let Some(pages) = &args.desktop_pages
            && !pages.is_dir()
        {
            return Err(format!(
                "--desktop-pages {}: not a directory",
                pages.display()
            ));
        }
        let desktop = (args.desktop_pages.is_some() || args.desktop_stream.is_some()).then(|| {
            Arc::new(Desktop {
                pages: args.desktop_pages.clone(),
                stream: args.desktop_stream.clone(),
                auth: auth.clone(),
                passes: Passes::new(PASS_LIFETIME),
                view_passes: Passes::new(VIEW_PASS_LIFETIME),
            })
        });
        Ok(Front {
            response_timeout,
            desktop,
        })
    }

    /// The desktop's routes (none without a desktop).
    pub fn routes(&self) -> Router {
        let Some(desktop) = &self.desktop else {
            return Router::new();
        };
        let mut routes = Router::new();
        if let Some(pages) = &desktop.pages {
            let files =
                tower_http::services::ServeDir::new(pages).append_index_html_on_directories(false);
            routes = routes.merge(Router::new().nest_service("/vnc", files).layer(
                middleware::from_fn_with_state(Arc::clone(desktop), viewer_page),
            ));
        }
        if desktop.stream.is_some() {
            routes = routes
                .route(
                    "/websockify",
                    get(relay_stream).with_state(Arc::clone(desktop)),
                )
                .route(
                    &format!("/{VIEW_STREAM_PATH}"),
                    get(relay_view).with_state(Arc::clone(desktop)),
                );
            for prefix in ["", "/fastapi"] {
                routes = routes.route(
                    &format!("{prefix}/desktop/view_url"),
                    post(view_url).with_state(Arc::clone(desktop)),
                );
            }
        }
        routes
    }

    /// `router` with the answer deadline, when there is one.
    pub fn wrap(&self, router: Router) -> Router {
        match self.response_timeout {
            Some(limit) => router.layer(middleware::from_fn_with_state(limit, answer_within)),
            None => router,
        }
    }
}

async fn answer_within(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::GatewayTimeout(format!(
            "no answer within {} s (the sandbox's NGINX_TIMEOUT)",
            limit.as_secs_f64()
        ))
        .into_response(),
    }
}

/// Serves a viewer page; when its query holds the whole token, with a pass for the stream. Pages hold
/// no data, so they are served to anyone; the token is what the stream needs.
async fn viewer_page(
    State(desktop): State<Arc<Desktop>>,
    mut request: Request,
    next: Next,
) -> Response {
    let pass = query_token(request.uri())
        .filter(|token| desktop.auth.accepts(token.as_bytes()))
        .map(|_| desktop.passes.issue());
    // A page opened from a view-only URL: its pass goes into a cookie for the view-only stream.
    let view_pass = query_value(request.uri(), &["view"]).and_then(|pass| {
        desktop
            .view_passes
            .remaining(&pass)
            .map(|remaining| (pass, remaining))
    });
    if matches!(request.uri().path(), "/vnc" | "/vnc/")
        && let Ok(uri) = "/vnc/vnc.html".parse::<Uri>()
    {
        *request.uri_mut() = uri;
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    // The page's URL holds the token: browsers must not pass it on as a Referer.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Some(pass) = pass {
        let cookie = format!(
            "{PASS_COOKIE}={pass}; Path=/websockify; Max-Age={}; HttpOnly; SameSite=Strict",
            PASS_LIFETIME.as_secs()
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            headers.append(header::SET_COOKIE, value);
        }
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if let Some((view_pass, remaining)) = view_pass {
        let cookie = format!(
            "{VIEW_PASS_COOKIE}={view_pass}; Path=/{VIEW_STREAM_PATH}; Max-Age={}; HttpOnly; \
             SameSite=Strict",
            remaining.as_secs().max(1)
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            headers.append(header::SET_COOKIE, value);
        }
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The `password` (the SDK's name) or `token` parameter of `uri`'s query.
fn query_token(uri: &Uri) -> Option<String> {
    query_value(uri, &["password", "token"])
}

/// The first parameter of `uri`'s query named one of `names`.
fn query_value(uri: &Uri, names: &[&str]) -> Option<String> {
    let query = uri.query()?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).ok()?;
    pairs
        .into_iter()
        .find(|(name, _)| names.contains(&name.as_str()))
        .map(|(_, value)| value)
}

impl Desktop {
    /// Whether this request shows the whole token: the bearer header or the token in the query.
    fn shows_token(&self, request: &Request) -> bool {
        self.auth.check_headers(request.headers()).is_ok()
            || query_token(request.uri()).is_some_and(|token| self.auth.accepts(token.as_bytes()))
    }

    /// Whether this request may open the stream: a pass, the bearer token, or the token in the query.
    fn admits(&self, request: &Request) -> bool {
        self.passes.in_cookie(request.headers(), PASS_COOKIE) || self.shows_token(request)
    }

    /// Whether this request may open the view-only stream: a view pass (its cookie, or `view` in the
    /// query), or what opens the whole stream. A view pass never opens the whole stream.
    fn admits_viewer(&self, request: &Request) -> bool {
        self.view_passes
            .in_cookie(request.headers(), VIEW_PASS_COOKIE)
            || query_value(request.uri(), &["view"])
                .is_some_and(|pass| self.view_passes.remaining(&pass).is_some())
            || self.admits(request)
    }
}

/// `POST /desktop/view_url` (bearer): a view-only viewer's URL (root-relative), good for
/// [`VIEW_PASS_LIFETIME`]: noVNC's page in view-only mode on the view-only stream, with a pass that
/// opens nothing else.
async fn view_url(State(desktop): State<Arc<Desktop>>, request: Request) -> Response {
    if let Err(reason) = desktop.auth.check_headers(request.headers()) {
        return ApiError::Forbidden(reason.into()).into_response();
    }
    let pass = desktop.view_passes.issue();
    let url =
        format!("/vnc/vnc_lite.html?autoconnect=1&view_only=1&path={VIEW_STREAM_PATH}&view={pass}");
    axum::Json(serde_json::json!({
        "url": url,
        "expires_in": VIEW_PASS_LIFETIME.as_secs(),
    }))
    .into_response()
}

/// `GET /websockify-view`: a WebSocket whose RFB goes to the VNC server (its plain RFB port, the one
/// x11vnc shares with its WebSocket listener) through [`InputFilter`], and whose answers come back
/// unchanged.
async fn relay_view(State(desktop): State<Arc<Desktop>>, request: Request) -> Response {
    use axum::extract::FromRequestParts;
    use axum::extract::ws::WebSocketUpgrade;
    if !desktop.admits_viewer(&request) {
        return ApiError::Forbidden(
            "the view-only desktop stream needs a view pass: ask POST /desktop/view_url (with the \
             token) for a view-only URL"
                .into(),
        )
        .into_response();
    }
    let Some(address) = desktop.stream.clone() else {
        return ApiError::NotFound("no desktop stream here".into()).into_response();
    };
    let (mut parts, _) = request.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let server = match tokio::time::timeout(STREAM_CONNECT_TIMEOUT, address.connect()).await {
        Ok(Ok(server)) => server,
        Ok(Err(err)) => {
            return ApiError::BadGateway(format!(
                "the desktop stream is not up (yet): {address}: {err}"
            ))
            .into_response();
        }
        Err(_) => {
            return ApiError::GatewayTimeout(format!(
                "the VNC server at {address} did not accept within {} s",
                STREAM_CONNECT_TIMEOUT.as_secs()
            ))
            .into_response();
        }
    };
    // noVNC asks for the `binary` subprotocol (browsers fail a handshake that asked and got none).
    upgrade
        .protocols(["binary"])
        .on_upgrade(move |viewer| pump_view(viewer, server))
}

/// Moves a view-only viewer's bytes: the VNC server's to the viewer as they come, the viewer's to the
/// server through the input filter. Ends (both sides closed) when either side ends or the viewer sends
/// what the filter cannot relay.
async fn pump_view(viewer: axum::extract::ws::WebSocket, server: Box<dyn StreamIo>) {
    use axum::extract::ws::Message;
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut to_viewer, mut from_viewer) = viewer.split();
    let (mut from_server, mut to_server) = tokio::io::split(server);
    let downstream = async move {
        let mut buffer = vec![0u8; VIEW_READ_CHUNK];
        loop {
            let read = match from_server.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let chunk = bytes::Bytes::copy_from_slice(&buffer[..read]);
            if to_viewer.send(Message::Binary(chunk)).await.is_err() {
                break;
            }
        }
        let _ = to_viewer.close().await;
    };
    let upstream = async move {
        let mut filter = super::view_only::InputFilter::default();
        while let Some(Ok(message)) = from_viewer.next().await {
            let data = match message {
                Message::Binary(data) => data,
                Message::Text(text) => bytes::Bytes::copy_from_slice(text.as_str().as_bytes()),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            match filter.feed(&data) {
                Ok(allowed) => {
                    if !allowed.is_empty() && to_server.write_all(&allowed).await.is_err() {
                        break;
                    }
                }
                Err(err) => {
                    tracing::info!("view-only desktop stream closed: {err}");
                    break;
                }
            }
        }
        tracing::debug!(dropped = filter.dropped, "view-only viewer left");
    };
    tokio::select! {
        () = downstream => {}
        () = upstream => {}
    }
}

/// Headers of the WebSocket handshake passed to the VNC server and back.
const HANDSHAKE_REQUEST_HEADERS: &[header::HeaderName] = &[
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
    header::SEC_WEBSOCKET_EXTENSIONS,
    header::ORIGIN,
];
const HANDSHAKE_RESPONSE_HEADERS: &[header::HeaderName] = &[
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_ACCEPT,
    header::SEC_WEBSOCKET_PROTOCOL,
    header::SEC_WEBSOCKET_EXTENSIONS,
];

/// `GET /websockify`: the WebSocket handshake passed to the VNC server, then bytes both ways.
async fn relay_stream(State(desktop): State<Arc<Desktop>>, mut request: Request) -> Response {
    if !desktop.admits(&request) {
        return ApiError::Forbidden(
            "the desktop stream needs the sandbox's token: open the desktop_url page, or send \
             Authorization: Bearer <token>"
                .into(),
        )
        .into_response();
    }
    let Some(address) = desktop.stream.clone() else {
        return ApiError::NotFound("no desktop stream here".into()).into_response();
    };
    let upstream = match tokio::time::timeout(
        STREAM_CONNECT_TIMEOUT,
        handshake(&address, request.headers().clone()),
    )
    .await
    {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(detail)) => return ApiError::BadGateway(detail).into_response(),
        Err(_) => {
            return ApiError::GatewayTimeout(format!(
                "the VNC server at {address} did not answer the handshake within {} s",
                STREAM_CONNECT_TIMEOUT.as_secs()
            ))
            .into_response();
        }
    };
    let mut upstream_response = upstream;
    if upstream_response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return ApiError::BadGateway(format!(
            "the VNC server refused the WebSocket handshake ({})",
            upstream_response.status()
        ))
        .into_response();
    }
    let mut answer = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for name in HANDSHAKE_RESPONSE_HEADERS {
        for value in upstream_response.headers().get_all(name) {
            answer = answer.header(name, value);
        }
    }
    let upstream_upgrade = hyper::upgrade::on(&mut upstream_response);
    let client_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let (client, upstream) = match tokio::try_join!(client_upgrade, upstream_upgrade) {
            Ok(both) => both,
            Err(err) => {
                tracing::debug!("desktop stream upgrade failed: {err}");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut upstream = TokioIo::new(upstream);
        if let Err(err) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!("desktop stream ended: {err}");
        }
    });
    answer.body(Body::empty()).unwrap_or_else(|err| {
        ApiError::Internal(format!("cannot answer the handshake: {err}")).into_response()
    })
}

/// Sends the handshake (`headers`, the client's) to the VNC server at `address`; its answer, not yet upgraded.
async fn handshake(
    address: &StreamAddress,
    headers: HeaderMap,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let stream = address
        .connect()
        .await
        .map_err(|err| format!("the desktop stream is not up (yet): {address}: {err}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| format!("cannot talk to the VNC server: {err}"))?;
    tokio::spawn(async move {
        if let Err(err) = connection.with_upgrades().await {
            tracing::debug!("desktop stream connection: {err}");
        }
    });
    let mut forwarded = hyper::Request::builder()
        .method(hyper::Method::GET)
        .uri("/websockify")
        .header(header::HOST, address.host());
    for name in HANDSHAKE_REQUEST_HEADERS {
        for value in headers.get_all(name) {
            forwarded = forwarded.header(name, value);
        }
    }
    // libvncserver refuses a handshake without Origin (browsers always send one).
    if !headers.contains_key(header::ORIGIN) {
        forwarded = forwarded.header(header::ORIGIN, format!("http://{}", address.host()));
    }
    let forwarded = forwarded
        .body(Body::empty())
        .map_err(|err| format!("cannot build the handshake: {err}"))?;
    let response = sender
        .send_request(forwarded)
        .await
        .map_err(|err| format!("the VNC server did not answer the handshake: {err}"))?;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_a_unix_socket_or_host_and_port() {
        assert_eq!(
            "/run/boxd/vnc/rfb.sock".parse::<StreamAddress>(),
            Ok(StreamAddress::Unix(PathBuf::from("/run/boxd/vnc/rfb.sock")))
        );
        assert_eq!(
            "127.0.0.1:5900".parse::<StreamAddress>(),
            Ok(StreamAddress::Tcp(SocketAddr::from(([127, 0, 0, 1], 5900))))
        );
        assert!("rfb.sock".parse::<StreamAddress>().is_err());
    }

    #[test]
    fn the_query_token_is_password_or_token() {
        let uri: Uri = "/vnc/vnc_lite.html?autoconnect=1&password=a%2Bb"
            .parse()
            .unwrap_or_default();
        assert_eq!(query_token(&uri).as_deref(), Some("a+b"));
        let uri: Uri = "/websockify?token=t".parse().unwrap_or_default();
        assert_eq!(query_token(&uri).as_deref(), Some("t"));
        let uri: Uri = "/websockify".parse().unwrap_or_default();
        assert_eq!(query_token(&uri), None);
    }

    #[test]
    fn a_pass_opens_the_stream_until_it_expires() {
        let passes = Passes::new(PASS_LIFETIME);
        let pass = passes.issue();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {PASS_COOKIE}={pass}"))
                .unwrap_or(HeaderValue::from_static("")),
        );
        assert!(passes.in_cookie(&headers, PASS_COOKIE));
        assert!(
            !passes.in_cookie(&headers, VIEW_PASS_COOKIE),
            "a pass counts only under its own cookie"
        );
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("boxd_desktop=forged"),
        );
        assert!(!passes.in_cookie(&headers, PASS_COOKIE));
        for _ in 0..MAX_PASSES {
            passes.issue();
        }
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("{PASS_COOKIE}={pass}"))
                .unwrap_or(HeaderValue::from_static("")),
        );
        assert!(
            !passes.in_cookie(&headers, PASS_COOKIE),
            "the oldest pass makes room"
        );
        let expired = Passes::new(Duration::ZERO);
        let gone = expired.issue();
        assert_eq!(expired.remaining(&gone), None);
    }
}
