//! What boxd serves in front of its API in the desktop images: the viewer's pages at `/vnc/`, and the
//! desktop stream at `/websockify`, relayed to a VNC server only for a client that showed the whole
//! token (the viewer page's pass, the bearer header, or the token in the query); anyone else is refused
//! before the VNC server sees a connection. The VNC server here is a WebSocket echo server that counts
//! its connections. Also the mobile image's `/websockify/` device view.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Server, TOKEN};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Echoes each binary WebSocket message of `stream` back.
async fn echo_websocket<S>(stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    while let Some(Ok(message)) = socket.next().await {
        if message.is_binary() && socket.send(message).await.is_err() {
            return;
        }
    }
}

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
            tokio::spawn(echo_websocket(stream));
        }
    });
    (address, accepted)
}

fn desktop_server(stream: std::net::SocketAddr) -> (Server, tempfile::TempDir) {
    desktop_server_at(&stream.to_string())
}

/// boxd with the viewer's pages and `--desktop-stream stream` (`HOST:PORT`, or a Unix socket's path).
fn desktop_server_at(stream: &str) -> (Server, tempfile::TempDir) {
    let pages = tempfile::tempdir().expect("pages");
    std::fs::write(pages.path().join("vnc_lite.html"), "<html>viewer</html>").expect("page");
    std::fs::write(pages.path().join("vnc.html"), "<html>full viewer</html>").expect("page");
    let server = Server::start_with(&[
        "--desktop-pages",
        pages.path().to_str().unwrap_or_default(),
        "--desktop-stream",
        stream,
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

/// The images' VNC server listens on a Unix socket in a directory only root may enter (no TCP port a
/// local user could reach): the relay goes there, the same gate in front.
#[tokio::test]
async fn the_stream_relays_to_a_vnc_server_on_a_unix_socket() {
    let directory = tempfile::tempdir().expect("socket directory");
    let path = directory.path().join("rfb.sock");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the socket");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(echo_websocket(stream));
        }
    });
    let (server, _pages) = desktop_server_at(path.to_str().unwrap_or_default());
    let refused = server
        .anonymous()
        .get(server.url("/websockify"))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .expect("answered");
    assert_eq!(refused.status(), 403);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the VNC server saw no one"
    );
    stream_echoes(&server, "/websockify", None, Some(TOKEN)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
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

/// A plain-RFB VNC server on loopback (no password, as the images' x11vnc): it does the 3.8 handshake
/// and keeps every byte the viewer sends after `ClientInit`; the count of connections it accepted.
async fn recording_vnc_server() -> (
    std::net::SocketAddr,
    Arc<AtomicUsize>,
    Arc<tokio::sync::Mutex<Vec<u8>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let accepted = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let (counter, sink) = (Arc::clone(&accepted), Arc::clone(&received));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let sink = Arc::clone(&sink);
            tokio::spawn(async move {
                let mut version = [0u8; 12];
                let mut one = [0u8; 1];
                if stream.write_all(b"RFB 003.008\n").await.is_err()
                    || stream.read_exact(&mut version).await.is_err()
                    || stream.write_all(&[1, 1]).await.is_err()
                    || stream.read_exact(&mut one).await.is_err()
                    || stream.write_all(&0u32.to_be_bytes()).await.is_err()
                    || stream.read_exact(&mut one).await.is_err()
                {
                    return;
                }
                // ServerInit: 8x8, a 32-bit pixel format, the name "rec".
                let mut init = vec![0, 8, 0, 8, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0];
                init.extend([0, 0, 0, 0, 0, 0, 3]);
                init.extend(b"rec");
                if stream.write_all(&init).await.is_err() {
                    return;
                }
                sink.lock().await.extend([one[0]]);
                let mut buffer = [0u8; 4096];
                while let Ok(read) = stream.read(&mut buffer).await {
                    if read == 0 {
                        return;
                    }
                    sink.lock().await.extend_from_slice(&buffer[..read]);
                }
            });
        }
    });
    (address, accepted, received)
}

/// Reads binary messages until `want` bytes came (within 5 s).
async fn read_rfb<S>(socket: &mut S, want: usize) -> Vec<u8>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut got = Vec::new();
    while got.len() < want {
        let message = tokio::time::timeout(Duration::from_secs(5), socket.next())
            .await
            .expect("the server answers within 5 s")
            .expect("a message")
            .expect("not an error");
        got.extend_from_slice(&message.into_data());
    }
    got
}

#[tokio::test]
async fn a_view_only_viewers_keys_and_pointer_never_reach_the_vnc_server() {
    let (vnc, accepted, received) = recording_vnc_server().await;
    let (server, _pages) = desktop_server(vnc);
    let client = server.anonymous();

    // Minting a view-only URL needs the token; the view stream without a pass is refused before the
    // VNC server sees anyone.
    let refused = client
        .post(server.url("/desktop/view_url"))
        .send()
        .await
        .expect("answered");
    assert_eq!(refused.status(), 403);
    for path in ["/websockify-view", "/websockify-view?view=forged"] {
        let response = client
            .get(server.url(path))
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), 403, "{path}");
    }
    let minted: serde_json::Value = client
        .post(server.url("/fastapi/desktop/view_url"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("json");
    let url = minted["url"].as_str().expect("a url").to_string();
    assert!(
        url.starts_with("/vnc/vnc_lite.html?") && url.contains("view_only=1"),
        "{url}"
    );
    assert!(
        url.contains("path=websockify-view") && !url.contains(TOKEN),
        "{url}"
    );
    assert_eq!(minted["expires_in"], 600);

    // The page at that URL gives the view pass as a cookie for the view stream only.
    let page = client.get(server.url(&url)).send().await.expect("page");
    assert_eq!(page.status(), 200);
    let cookie = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with("boxd_desktop_view="))
        .expect("a view pass")
        .to_string();
    assert!(
        cookie.contains("Path=/websockify-view") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let pass = cookie.split(';').next().unwrap_or_default().to_string();
    // A view pass never opens the whole stream.
    let whole = client
        .get(server.url("/websockify"))
        .header(
            "cookie",
            pass.replace("boxd_desktop_view=", "boxd_desktop="),
        )
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .expect("answered");
    assert_eq!(whole.status(), 403);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the VNC server saw no one"
    );

    let mut request = ws_url(&server, "/websockify-view")
        .into_client_request()
        .expect("request");
    request
        .headers_mut()
        .insert("cookie", pass.parse().expect("cookie header"));
    let (mut socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the view stream opens");
    assert_eq!(response.status(), 101);
    assert_eq!(read_rfb(&mut socket, 12).await, b"RFB 003.008\n");
    socket
        .send(Message::binary(b"RFB 003.008\n".to_vec()))
        .await
        .expect("version");
    assert_eq!(read_rfb(&mut socket, 2).await, [1, 1]);
    // None, then ClientInit asking for an exclusive desktop (sent on as shared).
    socket
        .send(Message::binary(vec![1, 0]))
        .await
        .expect("init");
    let init = read_rfb(&mut socket, 4 + 24 + 3).await;
    assert!(init.ends_with(b"rec"));

    let update = vec![3, 1, 0, 0, 0, 0, 0, 8, 0, 8];
    let encodings = vec![2, 0, 0, 1, 0, 0, 0, 0];
    let key_down = vec![4, 1, 0, 0, 0, 0, 0xff, 0x0d];
    let pointer = [5u8, 1, 0, 4, 0, 4];
    let mut clipboard = vec![6, 0, 0, 0, 0, 0, 0, 4];
    clipboard.extend(b"rm -");
    // Input split across messages, and glued to what is allowed.
    let messages = [
        encodings.clone(),
        [key_down.clone(), update.clone()].concat(),
        pointer[..3].to_vec(),
        [pointer[3..].to_vec(), clipboard.clone(), update.clone()].concat(),
    ];
    for message in messages {
        socket.send(Message::binary(message)).await.expect("sent");
    }
    let expected = [vec![1u8], encodings, update.clone(), update].concat();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while received.lock().await.len() < expected.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        *received.lock().await,
        expected,
        "only the view's own messages arrived"
    );

    // A message the relay cannot size ends the stream rather than pass.
    socket
        .send(Message::binary(vec![255, 0, 0, 0]))
        .await
        .expect("sent");
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match socket.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the view stream was closed");
    assert_eq!(*received.lock().await, expected);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
