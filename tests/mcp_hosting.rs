//! Hosting MCP servers: real FastMCP peers (PyPI `mcp`) over stdio, SSE and streamable HTTP.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Fetch, Server, process_runs, python};
use serde_json::{Value, json};

fn peer_script() -> String {
    format!("{}/tests/python/mcp_peer.py", env!("CARGO_MANIFEST_DIR"))
}

/// A FastMCP peer serving over the network on a free loopback port; killed on drop.
struct NetworkPeer {
    child: Child,
    port: u16,
}

impl NetworkPeer {
    fn start(transport: &str) -> NetworkPeer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python())
            .args([peer_script(), transport.to_owned(), port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("peer starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{transport} peer did not listen within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        NetworkPeer { child, port }
    }
}

impl Drop for NetworkPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdio_config(extra_env: Value) -> Value {
    json!({"command": python(), "args": [peer_script(), "stdio"], "env": extra_env})
}

async fn add(server: &Server, servers: Value, overwrite: bool) -> (u16, Value) {
    let response = server
        .post("/mcp/add_servers")
        .json(&json!({"server_configs": {"mcpServers": servers}, "overwrite": overwrite}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn call(server: &Server, tool: &str, arguments: Value) -> (u16, Value) {
    let response = server
        .post("/mcp/call_tool")
        .json(&json!({"tool_name": tool, "arguments": arguments}))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

async fn peer_pid(server: &Server, tool: &str) -> i32 {
    let (_, result) = call(server, tool, json!({})).await;
    first_text(&result)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn three_transports_listed_by_server_and_called_directly() {
    let server = Server::start();
    let sse = NetworkPeer::start("sse");
    let http = NetworkPeer::start("streamable-http");
    let (status, answer) = add(
        &server,
        json!({
            "stdio": stdio_config(json!({"PEER_GREETING": "hello"})),
            "sse": {"url": format!("http://127.0.0.1:{}/sse", sse.port)},
            "http": {"type": "streamable_http", "url": format!("http://127.0.0.1:{}/mcp", http.port)},
        }),
        false,
    )
    .await;
    assert_eq!((status, answer), (200, json!("OK")));

    let listed = server.get("/mcp/list_tools").fetch_json().await;
    // Same tool names on all three: the first server by name keeps them, the others are name-spaced.
    let names = |group: &str| -> Vec<String> {
        listed[group].as_object().unwrap().keys().cloned().collect()
    };
    assert_eq!(names("http"), ["add", "echo", "grow", "whoami"]);
    assert_eq!(
        names("sse"),
        ["sse__add", "sse__echo", "sse__grow", "sse__whoami"]
    );
    assert_eq!(
        names("stdio"),
        ["stdio__add", "stdio__echo", "stdio__grow", "stdio__whoami"]
    );
    let add_schema = &listed["http"]["add"]["json_schema"];
    assert_eq!(add_schema["type"], "function");
    assert_eq!(add_schema["function"]["name"], "add");
    assert_eq!(
        add_schema["function"]["parameters"]["required"],
        json!(["a", "b"])
    );
    assert!(listed.get("generic").is_none());

    let (status, result) = call(&server, "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(status, 200);
    assert_eq!(first_text(&result), "5");
    assert_eq!(result["isError"], false);
    assert_eq!(
        first_text(
            &call(&server, "sse__echo", json!({"text": "over sse"}))
                .await
                .1
        ),
        "echo: over sse"
    );
    let (_, whoami) = call(&server, "stdio__whoami", json!({})).await;
    let whoami = first_text(&whoami);
    assert!(
        whoami.ends_with(&format!("{} hello", server.workspace.display())),
        "{whoami}"
    );

    let (status, invalid) = call(&server, "add", json!({"a": "x", "b": 1})).await;
    assert_eq!(status, 200);
    assert_eq!(invalid["isError"], true);
    let (status, unknown) = call(&server, "no_such_tool", json!({})).await;
    assert_eq!(status, 404);
    assert!(unknown["detail"].as_str().unwrap().contains("no_such_tool"));
}

#[tokio::test]
async fn a_server_that_exits_at_start_fails_fast_and_the_others_stay() {
    let server = Server::start();
    let started = Instant::now();
    let (status, answer) = add(
        &server,
        json!({
            "broken": {"command": python(), "args": [peer_script(), "exit-at-start"]},
            "good": stdio_config(json!({})),
        }),
        false,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(status, 502);
    let detail = answer["detail"].as_str().unwrap();
    assert!(
        detail.contains("broken") && detail.contains("missing API key"),
        "{detail}"
    );
    assert!(!detail.contains("good"), "{detail}");
    let listed = server.get("/mcp/list_tools").fetch_json().await;
    assert!(
        listed.get("good").is_some() && listed.get("broken").is_none(),
        "{listed}"
    );

    let (status, answer) = add(
        &server,
        json!({"nowhere": {"command": "/nonexistent/server"}}),
        false,
    )
    .await;
    assert_eq!(status, 502);
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/server")
    );
}

#[tokio::test]
async fn overwrite_replaces_and_a_killed_child_restarts_on_next_use() {
    let server = Server::start();
    add(&server, json!({"peer": stdio_config(json!({}))}), false).await;
    let first = peer_pid(&server, "whoami").await;

    let (status, _) = add(&server, json!({"peer": stdio_config(json!({}))}), false).await;
    assert_eq!(status, 200);
    assert_eq!(
        peer_pid(&server, "whoami").await,
        first,
        "without overwrite the server is kept"
    );

    add(&server, json!({"peer": stdio_config(json!({}))}), true).await;
    let second = peer_pid(&server, "whoami").await;
    assert_ne!(second, first);
    assert!(!process_runs(first), "the replaced server is still running");

    // SAFETY: kill(2) on the peer process boxd started.
    unsafe {
        libc::kill(second, libc::SIGKILL);
    }
    // A call that reaches the peer before boxd has seen its end fails (502) and marks it dead; the
    // next restarts it. So: calls until one answers, within bounds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let third = loop {
        let (status, result) = call(&server, "whoami", json!({})).await;
        let pid = first_text(&result)
            .split_whitespace()
            .next()
            .and_then(|pid| pid.parse::<i32>().ok());
        match pid {
            Some(pid) if status == 200 => break pid,
            _ => assert!(
                Instant::now() < deadline,
                "the dead server was not restarted: {status} {result}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(third, second, "the dead server was not restarted");
}

#[tokio::test]
async fn sigterm_leaves_no_hosted_child_behind() {
    let mut server = Server::start();
    add(&server, json!({"peer": stdio_config(json!({}))}), false).await;
    let pid = peer_pid(&server, "whoami").await;
    assert!(process_runs(pid));
    let status = server.terminate().expect("boxd exits");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_runs(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!process_runs(pid), "hosted MCP child {pid} outlived boxd");
}

#[tokio::test]
async fn config_file_is_loaded_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp_server_configs.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"peer": stdio_config(json!({}))}}).to_string(),
    )
    .unwrap();
    let server = Server::start_with(&["--mcp-config", config.to_str().unwrap()]);
    assert_eq!(server.get("/healthz").fetch_status().await, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = server.get("/mcp/list_tools").fetch_json().await;
        if listed.get("peer").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "config servers never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        first_text(&call(&server, "echo", json!({"text": "x"})).await.1),
        "echo: x"
    );
}

#[tokio::test]
async fn tool_list_changed_refreshes_the_registry() {
    let server = Server::start();
    add(&server, json!({"peer": stdio_config(json!({}))}), false).await;
    assert_eq!(call(&server, "grown", json!({})).await.0, 404);
    assert_eq!(
        first_text(&call(&server, "grow", json!({})).await.1),
        "grew"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = server.get("/mcp/list_tools").fetch_json().await;
        if listed["peer"].get("grown").is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new tool never appeared: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        first_text(&call(&server, "grown", json!({})).await.1),
        "grown!"
    );
}

#[tokio::test]
async fn bad_requests_are_named_400s() {
    let server = Server::start();
    for body in [
        json!({}),
        json!({"server_configs": {}}),
        json!({"server_configs": {"mcpServers": {}}}),
        json!({"server_configs": {"mcpServers": {"x": {"args": []}}}}),
        json!({"server_configs": {"mcpServers": {"x": {"url": "http://h", "type": "websocket"}}}}),
    ] {
        let response = server
            .post("/mcp/add_servers")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{body}");
    }
    assert_eq!(
        server
            .post("/mcp/call_tool")
            .json(&json!({"arguments": {}}))
            .fetch_status()
            .await,
        400
    );
    assert_eq!(
        server
            .post("/mcp/call_tool")
            .json(&json!({"tool_name": "run_shell_command", "arguments": [1]}))
            .fetch_status()
            .await,
        422,
        "arguments that are not an object do not fit any tool's schema"
    );
}

#[tokio::test]
async fn a_server_named_like_a_built_in_group_is_refused_and_built_ins_stay() {
    let server = Server::start();
    std::fs::write(server.ws("note.txt"), "kept").unwrap();
    for name in ["filesystem", "generic"] {
        for overwrite in [false, true] {
            let (status, answer) = add(
                &server,
                json!({name: stdio_config(json!({})), "bystander": stdio_config(json!({}))}),
                overwrite,
            )
            .await;
            assert_eq!(status, 400, "{name} overwrite={overwrite}: {answer}");
            let detail = answer["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains(name) && detail.contains("built-in"),
                "{detail}"
            );
        }
    }
    let listed = server.get("/mcp/list_tools").fetch_json().await;
    assert!(
        listed.get("bystander").is_none(),
        "a refused request starts nothing: {listed}"
    );
    assert!(listed["filesystem"].get("read_file").is_some(), "{listed}");
    let (status, read) = call(&server, "read_file", json!({"path": "note.txt"})).await;
    assert_eq!((status, first_text(&read)), (200, "kept"), "{read}");
    let (status, shell) = call(
        &server,
        "run_shell_command",
        json!({"command": "echo alive"}),
    )
    .await;
    assert_eq!((status, first_text(&shell)), (200, "alive\n"), "{shell}");

    // Stopping a hosted server (here by overwrite) removes its own group only.
    add(&server, json!({"fs": stdio_config(json!({}))}), false).await;
    add(&server, json!({"fs": stdio_config(json!({}))}), true).await;
    let (status, read) = call(&server, "read_file", json!({"path": "note.txt"})).await;
    assert_eq!((status, first_text(&read)), (200, "kept"), "{read}");
}

#[tokio::test]
async fn a_tool_list_refresh_never_makes_the_servers_tools_disappear() {
    let server = Server::start();
    add(&server, json!({"peer": stdio_config(json!({}))}), false).await;
    for round in 0..6 {
        let name = format!("grown_{round}");
        let (status, _) = call(&server, "grow", json!({"name": name})).await;
        assert_eq!(status, 200);
        // Calls race the refresh that `grow`'s list_changed triggers, until the new tool is listed.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, echoed) = call(&server, "echo", json!({"text": "x"})).await;
            assert_eq!(status, 200, "round {round}: echo answered {echoed}");
            let listed = server.get("/mcp/list_tools").fetch_json().await;
            if listed["peer"].get(&name).is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "{name} never appeared: {listed}");
        }
    }
}

/// A legacy-SSE server on loopback whose `endpoint` event announces `endpoint` as its message URL; it
/// answers at most a few connections and keeps each event stream open until the client leaves.
fn announcing_sse_server(endpoint: String) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let endpoint = endpoint.clone();
            std::thread::spawn(move || {
                let mut request = [0u8; 8192];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
                         event: endpoint\ndata: {endpoint}\n\n"
                    )
                    .as_bytes(),
                );
                // Returns when the client closes the stream.
                let _ = stream.read(&mut request);
            });
        }
    });
    port
}

#[tokio::test]
async fn an_sse_endpoint_on_another_origin_is_refused_and_gets_no_headers() {
    let server = Server::start();
    // Another port on the same host is another origin.
    let foreign = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    foreign.set_nonblocking(true).unwrap();
    let foreign_url = format!(
        "http://127.0.0.1:{}/messages?session_id=1",
        foreign.local_addr().unwrap().port()
    );
    let port = announcing_sse_server(foreign_url);
    let started = Instant::now();
    let (status, answer) = add(
        &server,
        json!({"remote": {
            "url": format!("http://127.0.0.1:{port}/sse"),
            "headers": {"Authorization": "Bearer remote-secret"},
            "timeout": 5
        }}),
        false,
    )
    .await;
    assert_eq!(status, 502, "{answer}");
    let detail = answer["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("another origin"), "{detail}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "refused only after {:?}",
        started.elapsed()
    );
    // Whatever boxd sent would already be waiting in the listener's backlog.
    assert!(
        matches!(foreign.accept(), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "boxd connected to the foreign endpoint"
    );
}

/// Pids of the processes whose whole argument list is `args`.
fn pids_running(args: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = args
        .iter()
        .flat_map(|arg| [arg.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| cmd == wanted))
        .filter(|pid| process_runs(*pid))
        .collect()
}

#[tokio::test]
async fn a_hung_handshake_blocks_neither_other_servers_nor_listing_nor_shutdown() {
    let server = Server::start();
    // A duration no other test uses, so the hung child is found by its arguments.
    let duration = format!("1000.{:06}", std::process::id() % 1_000_000);
    let hung_request =
        server
            .post("/mcp/add_servers")
            .json(&json!({"server_configs": {"mcpServers": {
                "hung": {"command": "sleep", "args": [duration], "timeout": 600}
            }}}));
    let hung = tokio::spawn(async move { hung_request.send().await.map(|r| r.status().as_u16()) });
    let deadline = Instant::now() + Duration::from_secs(20);
    let hung_pid = loop {
        if let Some(&pid) = pids_running(&["sleep", &duration]).first() {
            break pid;
        }
        assert!(Instant::now() < deadline, "the hung server never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let (status, answer) = tokio::time::timeout(
        Duration::from_secs(20),
        add(&server, json!({"peer": stdio_config(json!({}))}), false),
    )
    .await
    .expect("a second add_servers waited on the hung handshake");
    assert_eq!(status, 200, "{answer}");
    let listed = tokio::time::timeout(
        Duration::from_secs(5),
        server.get("/mcp/list_tools").fetch_json(),
    )
    .await
    .expect("list_tools waited on the hung handshake");
    assert!(listed.get("peer").is_some(), "{listed}");
    // The name is claimed while it starts: replacing it now is a clear conflict, not a second child.
    let (status, answer) = add(
        &server,
        json!({"hung": {"command": "sleep", "args": [duration]}}),
        true,
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    assert!(!hung.is_finished(), "the hung handshake answered early");

    // SIGTERM: in-flight requests get boxd's grace, then the hung handshake is abandoned and its child
    // killed, instead of boxd waiting for its 600 s.
    let boxd = server.pid() as i32;
    // SAFETY: kill(2) on the boxd this test started.
    unsafe {
        libc::kill(boxd, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while process_runs(boxd) || process_runs(hung_pid) {
        assert!(
            Instant::now() < deadline,
            "boxd alive: {}, hung child alive: {}",
            process_runs(boxd),
            process_runs(hung_pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_dead_servers_leftover_children_are_killed_when_it_restarts() {
    let mut server = Server::start();
    let duration = format!("1000.{:06}", (std::process::id() + 1) % 1_000_000);
    // The server leaves a child in its group that holds none of its pipes: the leader's death alone
    // does not end it.
    let script = format!("sleep {duration} </dev/null >/dev/null 2>&1 & exec \"$0\" \"$1\" stdio",);
    let (status, answer) = add(
        &server,
        json!({"wrapped": {"command": "sh", "args": ["-c", script, python(), peer_script()]}}),
        false,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let leader = peer_pid(&server, "whoami").await;
    // The wrapper forked its sleep before it became the server, but the fork may not have become
    // `sleep` yet (its exec comes whenever it is scheduled).
    let deadline = Instant::now() + Duration::from_secs(20);
    let leftover = loop {
        if let Some(&pid) = pids_running(&["sleep", &duration]).first() {
            break pid;
        }
        assert!(Instant::now() < deadline, "the server's child never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // SAFETY: kill(2) on the peer process boxd started.
    unsafe {
        libc::kill(leader, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_runs(leader) {
        assert!(Instant::now() < deadline, "the killed peer stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The next call restarts it. Most often boxd has seen the connection close by then (the case under
    // test); when the call races that, it fails with a 502 and the call after it restarts the server.
    let mut restarted = None;
    for _ in 0..3 {
        let (status, result) = call(&server, "whoami", json!({})).await;
        if status == 200 {
            restarted = first_text(&result)
                .split_whitespace()
                .next()
                .map(str::to_owned);
            break;
        }
    }
    let restarted = restarted.expect("the server restarts on its next use");
    assert_ne!(restarted, leader.to_string(), "not restarted");
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_runs(leftover) {
        assert!(
            Instant::now() < deadline,
            "the dead server's child {leftover} outlived its connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The restarted server's own child (once its fork has become `sleep`) goes with boxd's stop.
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let second = pids_running(&["sleep", &duration]);
        if second.len() == 1 || Instant::now() >= deadline {
            break second;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(server.terminate().is_some_and(|status| status.success()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_runs(second[0]) {
        assert!(Instant::now() < deadline, "{second:?} outlived boxd");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server that cannot come back is not restarted on every call: the failed restart is answered with
/// its reason, and calls until the next try get 503 with `Retry-After` at once.
#[tokio::test]
async fn a_failed_restart_is_retried_with_backoff_not_on_every_call() {
    let server = Server::start();
    let mark = server.ws(".started-once");
    let script = format!(
        "if [ -e '{mark}' ]; then echo 'no second start' >&2; exit 3; fi; touch '{mark}'; exec '{python}' '{peer}' stdio",
        mark = mark.display(),
        python = python(),
        peer = peer_script(),
    );
    let (status, _) = add(
        &server,
        json!({"once": {"command": "/bin/sh", "args": ["-c", script]}}),
        false,
    )
    .await;
    assert_eq!(status, 200);
    let pid = peer_pid(&server, "whoami").await;
    // SAFETY: kill(2) on the peer process boxd started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_runs(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The call that finds the transport closed may fail by itself ("restarts on its next use"); the
    // one after it restarts the server, which fails with its stderr.
    let mut failed = Value::Null;
    for _ in 0..3 {
        let (status, answer) = call(&server, "whoami", json!({})).await;
        assert_eq!(status, 502, "{answer}");
        failed = answer;
        if failed.to_string().contains("no second start") {
            break;
        }
    }
    assert!(failed.to_string().contains("no second start"), "{failed}");

    let started = Instant::now();
    let response = server
        .post("/mcp/call_tool")
        .json(&json!({"tool_name": "whoami", "arguments": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let detail = response.text().await.unwrap();
    assert!(detail.contains("no second start"), "{detail}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered at once"
    );
}
