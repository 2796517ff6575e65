//! What boxd serves in front of its API in the desktop images: the viewer's pages at `/vnc/`, and the
//! desktop stream at `/websockify`, relayed to a VNC server only for a client that showed the whole
//! token (the viewer page's pass, the bearer header, or the token in the query); anyone else is refused
//! before the VNC server sees a connection. The VNC server here is a WebSocket echo server that counts
//! its connections. Also the mobile image's `/websockify/` device view.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Server, TOKEN};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A WebSocket server on loopback that echoes each message; the count of handshakes it accepted.
async fn echo_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_binary() && socket.send(message).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (address, accepted)
}

fn desktop_server(stream: std::net::SocketAddr) -> (Server, tempfile::TempDir) {
    let pages = tempfile::tempdir().expect("pages");
    std::fs::write(pages.path().join("vnc_lite.html"), "<html>viewer</html>").expect("page");
    std::fs::write(pages.path().join("vnc.html"), "<html>full viewer</html>").expect("page");
    let server = Server::start_with(&[
        "--desktop-pages",
        pages.path().to_str().unwrap_or_default(),
        "--desktop-stream",
        &stream.to_string(),
    ]);
    (server, pages)
}

fn ws_url(server: &Server, path: &str) -> String {
    server.url(path).replacen("http://", "ws://", 1)
}

/// Opens the stream with `cookie` and `bearer` (if any) and checks a message comes back.
async fn stream_echoes(server: &Server, path: &str, cookie: Option<&str>, bearer: Option<&str>) {
    let mut request = ws_url(server, path).into_client_request().expect("request");
    if let Some(cookie) = cookie {
        request
            .headers_mut()
            .insert("cookie", cookie.parse().expect("cookie header"));
    }
    if let Some(token) = bearer {
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("auth header"),
        );
    }
    let (mut socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the stream opens");
    assert_eq!(response.status(), 101);
    socket
        .send(Message::binary(b"RFB 003.008\n".to_vec()))
        .await
        .expect("send");
    let echoed = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .expect("echo within 5 s")
        .expect("a message")
        .expect("not an error");
    assert_eq!(echoed.into_data().as_ref(), b"RFB 003.008\n");
}

#[tokio::test]
async fn the_stream_needs_the_whole_token_before_any_byte_reaches_the_vnc_server() {
    let (vnc, accepted) = echo_server().await;
    let (server, _pages) = desktop_server(vnc);
    let client = server.anonymous();

    // Refused: nothing, a forged cookie, a wrong token, the token's first 8 characters (the old VNC
    // password), in the header or the query.
    let short = &TOKEN[..8];
    for (path, header) in [
        ("/websockify".to_string(), None),
        ("/websockify".to_string(), Some("boxd_desktop=forged")),
        (format!("/websockify?password={short}"), None),
        ("/websockify?token=wrong".to_string(), None),
    ] {
        let mut request = client
            .get(server.url(&path))
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
        if let Some(cookie) = header {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.expect("answered");
        assert_eq!(response.status(), 403, "{path} {header:?}");
        let body = response.text().await.unwrap_or_default();
        assert!(body.contains("token"), "{body}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the VNC server saw no one"
    );

    // The page opened with the whole token (GuiSandbox.desktop_url) gives an HttpOnly pass.
    let page = client
        .get(server.url(&format!("/vnc/vnc_lite.html?password={TOKEN}")))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    assert_eq!(
        page.headers()
            .get("referrer-policy")
            .and_then(|value| value.to_str().ok()),
        Some("no-referrer")
    );
    let cookie = page
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .expect("a pass")
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(TOKEN), "the pass is not the token");
    assert!(page.text().await.unwrap_or_default().contains("viewer"));
    let pass = cookie.split(';').next().unwrap_or_default().to_string();
    stream_echoes(&server, "/websockify", Some(&pass), None).await;
    // The token in the header, or in the query (what the SDK's remote manager relays).
    stream_echoes(&server, "/websockify", None, Some(TOKEN)).await;
    stream_echoes(
        &server,
        &format!("/websockify?password={TOKEN}"),
        None,
        None,
    )
    .await;
    assert_eq!(accepted.load(Ordering::SeqCst), 3);

    // A page opened without the token is served, with no pass.
    let page = client
        .get(server.url("/vnc/vnc_lite.html?password=wrong"))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    assert!(page.headers().get("set-cookie").is_none());
    // `/vnc/` is the full viewer; nothing outside the pages' directory is served.
    let index = client.get(server.url("/vnc/")).send().await.expect("index");
    assert!(
        index
            .text()
            .await
            .unwrap_or_default()
            .contains("full viewer")
    );
    let escape = client
        .get(server.url("/vnc/..%2f..%2f..%2fetc%2fpasswd"))
        .send()
        .await
        .expect("escape");
    assert_eq!(escape.status(), 404);
}

#[tokio::test]
async fn a_stream_whose_vnc_server_is_down_answers_502() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let (server, _pages) = desktop_server(unused);
    let response = server
        .anonymous()
        .get(server.url("/websockify"))
        .bearer_auth(TOKEN)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 502);
    let body = response.text().await.unwrap_or_default();
    assert!(body.contains("not up"), "{body}");
}

#[tokio::test]
async fn without_a_desktop_there_is_no_stream() {
    let server = Server::start();
    let response = server
        .anonymous()
        .get(server.url("/websockify"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 404);
}

/// The mobile image's device view is at upstream's `/websockify/` too (`MobileSandbox.mobile_url`).
#[tokio::test]
async fn the_device_view_is_also_at_websockify_slash() {
    let server = Server::start_with(&["--tools", "shell,adb", "--adb-connect", "127.0.0.1:9"]);
    let page = server
        .anonymous()
        .get(server.url(&format!("/websockify/?password={TOKEN}")))
        .send()
        .await
        .expect("answered");
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap_or_default().contains("<html"));
}
