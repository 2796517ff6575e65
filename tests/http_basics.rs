//! Auth, prefixes, liveness, errors: what every route shares.

use crate::common;

use common::{Fetch, Server, TOKEN};

#[tokio::test]
async fn every_route_needs_the_token_but_livez() {
    let server = Server::start();
    for path in [
        "/healthz",
        "/fastapi/healthz",
        "/workspace/exists?path=a",
        "/fastapi/workspace/list?path=",
        "/watcher/git_logs",
    ] {
        let missing = server
            .anonymous()
            .get(server.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status().as_u16(), 403, "{path}");
        let body: serde_json::Value = missing.json().await.unwrap();
        assert!(body["detail"].is_string());
        let wrong = server
            .anonymous()
            .get(server.url(path))
            .bearer_auth("not-the-token")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 403, "{path}");
        let right = server.get(path).send().await.unwrap();
        assert_eq!(right.status().as_u16(), 200, "{path}");
    }
    let posted = server
        .anonymous()
        .post(server.url("/tools/run_shell_command"))
        .json(&serde_json::json!({"command": "touch pwned"}))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status().as_u16(), 403);
    assert!(!server.ws("pwned").exists());

    let live = server
        .anonymous()
        .get(server.url("/livez"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);
    assert_eq!(live.text().await.unwrap(), "OK");
}

#[tokio::test]
async fn healthz_answers_ok_under_both_prefixes() {
    let server = Server::start();
    for path in ["/healthz", "/fastapi/healthz"] {
        let response = server.get(path).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert!(response.headers().contains_key("x-request-id"));
        assert_eq!(response.text().await.unwrap(), "OK");
    }
}

#[tokio::test]
async fn unknown_routes_and_tools_are_404_with_detail() {
    let server = Server::start();
    let route = server.get("/no/such/route").send().await.unwrap();
    assert_eq!(route.status().as_u16(), 404);
    let tool = server
        .post("/tools/no_such_tool")
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(tool.status().as_u16(), 404);
    let body: serde_json::Value = tool.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("no_such_tool"));
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let mut server = Server::start();
    let status = server.terminate().expect("boxd exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    let _ = TOKEN;
}

/// The default families and `adb` (its device unreachable: its routes answer 503, after the token check),
/// so that every documented route is served.
const WITH_ADB: &[&str] = &[
    "--tools",
    "shell,ipython,filesystem,workspace,git,processes,watch,mcp,sandboxd,adb",
    "--adb-connect",
    "127.0.0.1:9",
];

/// Every (path, method) of the served `/openapi.json` but the training family's (tagged `training`:
/// served without a token, and only with that family; see `the_training_routes_need_no_token`).
async fn documented_operations(server: &Server) -> Vec<(String, reqwest::Method)> {
    operations_tagged(server, false).await
}

async fn operations_tagged(server: &Server, training: bool) -> Vec<(String, reqwest::Method)> {
    let document = server.get("/openapi.json").fetch_json().await;
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 30);
    paths
        .iter()
        .flat_map(|(path, operations)| {
            operations
                .as_object()
                .unwrap()
                .iter()
                .filter(move |(_, operation)| {
                    let tagged = |name: &str| {
                        operation["tags"]
                            .as_array()
                            .is_some_and(|tags| tags.iter().any(|tag| tag == name))
                    };
                    // The desktop's routes exist only with a desktop and gate themselves: tests/front.rs.
                    tagged("training") == training && !tagged("desktop")
                })
                .map(|(method, _)| (path.clone(), method.to_uppercase().parse().unwrap()))
        })
        .collect()
}

/// The training client sends no token: with the family on, its routes and `/healthz` answer without
/// one (a broken interpreter makes create a 503 that says why); without it they do not exist and
/// `/healthz` wants the token.
#[tokio::test]
async fn the_training_routes_need_no_token() {
    let server = Server::start_with(&[
        "--tools",
        "shell,training",
        "--training-python",
        "/nonexistent/python3",
    ]);
    let operations = operations_tagged(&server, true).await;
    assert_eq!(operations.len(), 6, "{operations:?}");
    for (path, method) in operations {
        for prefix in ["", "/fastapi"] {
            let response = server
                .anonymous()
                .request(method.clone(), server.url(&format!("{prefix}{path}")))
                .json(&serde_json::json!({}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{method} {prefix}{path}");
            let detail = response.json::<serde_json::Value>().await.unwrap()["detail"].clone();
            assert!(
                detail.as_str().unwrap().ends_with("is required"),
                "{path}: {detail}"
            );
        }
    }
    let health = server
        .anonymous()
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let create = server
        .anonymous()
        .post(server.url("/create"))
        .json(&serde_json::json!({"env_type": "bfcl", "task_id": "multi_turn_base_0"}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), 503);
    let detail = create.json::<serde_json::Value>().await.unwrap()["detail"].clone();
    assert!(
        detail.as_str().unwrap().contains("/nonexistent/python3"),
        "{detail}"
    );
    let other = server
        .anonymous()
        .post(server.url("/create"))
        .json(&serde_json::json!({"env_type": "webshop", "task_id": "1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 400);

    let without = Server::start_with(&["--tools", "shell"]);
    let health = without
        .anonymous()
        .get(without.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 403);
    let create = without
        .anonymous()
        .post(without.url("/create"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), 404);
}

#[tokio::test]
async fn every_documented_route_exists() {
    let server = Server::start_with(WITH_ADB);
    for (path, method) in documented_operations(&server).await {
        // Streams that would stay open, and protocols that need their own handshake.
        if ["/watch", "/mcp", "/processes/{id}/ws"].contains(&path.as_str()) {
            continue;
        }
        let concrete = path
            .replace("{tool_name}", "no_such_tool")
            .replace("{id}", "p-none");
        let response = server
            .anonymous()
            .request(method.clone(), server.url(&concrete))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_ne!(status, 405, "{method} {path}");
        assert!(!text.contains("no such route"), "{method} {path}: {text}");
    }
}

/// Every documented route and method, under both prefixes, refuses a request without the token (or
/// with a lowercase scheme and a wrong token), `/mcp`, `/watch` and the WebSocket included; only the
/// two public probes answer.
#[tokio::test]
async fn an_anonymous_request_is_refused_on_every_documented_route() {
    let server = Server::start_with(WITH_ADB);
    let public = ["/livez", "/readyz/status", "/adb/view"];
    let mut checked = 0;
    for (path, method) in documented_operations(&server).await {
        let concrete = path
            .replace("{tool_name}", "run_shell_command")
            .replace("{id}", "p-none");
        for prefix in ["", "/fastapi"] {
            let url = server.url(&format!("{prefix}{concrete}"));
            let anonymous = server
                .anonymous()
                .request(method.clone(), &url)
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-version", "13")
                .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
                .json(&serde_json::json!({"command": "touch pwned"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            let wrong = server
                .anonymous()
                .request(method.clone(), &url)
                .header("authorization", "bearer not-the-token")
                .json(&serde_json::json!({"command": "touch pwned"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            if public.contains(&path.as_str()) {
                assert!(
                    anonymous == 200 || anonymous == 503,
                    "{method} {prefix}{path}: {anonymous}"
                );
            } else {
                assert_eq!(anonymous, 403, "{method} {prefix}{path}");
                assert_eq!(wrong, 403, "{method} {prefix}{path}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 70, "{checked}");
    assert!(!server.ws("pwned").exists());
}

/// RFC 9110: the auth scheme is case-insensitive.
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let server = Server::start();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let status = server
            .anonymous()
            .get(server.url("/healthz"))
            .header("authorization", format!("{scheme} {TOKEN}"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, 200, "{scheme}");
    }
}

/// The reverse of `every_documented_route_exists`: every path the code routes is documented.
#[test]
fn every_routed_path_is_documented() {
    let root = env!("CARGO_MANIFEST_DIR");
    let document: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/docs/openapi.json")).unwrap(),
    )
    .unwrap();
    let documented = document["paths"].as_object().unwrap();
    let mut pending = vec![std::path::PathBuf::from(format!("{root}/src"))];
    let mut routed = Vec::new();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs")
                // The sandboxd family's REST API is served on a listener of its own, not this port;
                // agent-sandbox's filesystem.yaml describes it (tests/sandboxd.rs drives it).
                && !path.ends_with("src/sandboxd/rest.rs")
            {
                let source = std::fs::read_to_string(&path).unwrap();
                for marker in [".route(", ".route_service("] {
                    for piece in source.split(marker).skip(1) {
                        if let Some(literal) = piece.trim_start().strip_prefix('"')
                            && let Some(end) = literal.find('"')
                        {
                            // A catch-all (`{*path}`, slashes included) is an OpenAPI `{path}`.
                            routed.push(literal[..end].replace("{*", "{"));
                        }
                    }
                }
            }
        }
    }
    assert!(routed.len() >= 32, "{routed:?}");
    for path in routed {
        assert!(
            documented.contains_key(&path),
            "{path} is routed but not in docs/openapi.json"
        );
    }
}

/// `/readyz` shows every family; `/readyz/status` tells only whether boxd is ready, without the token.
#[tokio::test]
async fn readiness_lists_every_family() {
    let server = Server::start_with(&["--tools", "shell,workspace"]);
    let mut readiness = serde_json::Value::Null;
    for _ in 0..100 {
        readiness = server
            .get("/readyz")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if readiness["ready"] == true {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(readiness["ready"], true, "{readiness}");
    assert_eq!(readiness["families"]["shell"]["status"], "ready");
    assert_eq!(readiness["families"]["ipython"]["status"], "disabled");
    assert_eq!(readiness["families"]["processes"]["status"], "disabled");
    let public: serde_json::Value = server
        .anonymous()
        .get(server.url("/readyz/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(public, serde_json::json!({"ready": true}));
    // A disabled family's routes are absent.
    let processes = server
        .get("/processes")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(processes, 404);
}

/// An unknown family is a start-up error that names the choices.
#[test]
fn an_unknown_family_is_a_usage_error() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_boxd"))
        .args(["serve", "--port", "0", "--tools", "shell,nope"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nope") && stderr.contains("ipython"),
        "{stderr}"
    );
}

/// The guard boxd runs beside itself (`boxd reaper`), if any.
fn guard_of(boxd: u32) -> Option<i32> {
    std::process::Command::new("pgrep")
        .args(["-P", &boxd.to_string(), "-f", "boxd reaper"])
        .output()
        .ok()
        .and_then(|output| {
            String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse::<i32>()
                .ok()
        })
}

/// The background start (a previous boxd's leftovers, the guard, the families) waits for the first
/// answer (`core::start_gate`), but not for a client that never comes.
#[tokio::test]
async fn a_boxd_nobody_contacts_still_starts_its_guard_and_families() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_on(dir.path(), &["--tools", "shell"], |_| {});
    let boxd = server.pid();
    let started = common::eventually(common::SETTLE, || guard_of(boxd).is_some()).await;
    // Asked only now: a request opens the gate.
    let deadline = std::time::Instant::now() + common::SETTLE;
    let mut ready = server.get("/readyz").fetch_json().await;
    while ready["ready"] != true && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        ready = server.get("/readyz").fetch_json().await;
    }
    server.kill();
    assert!(started, "no guard started without a request");
    assert_eq!(ready["ready"], true, "{ready}");
}

/// A boxd that is SIGKILLed takes its children's leaders with it and its guard stops what they started
/// (tests/child.rs); with the guard gone too (killed by tenant code, say), what they started runs on
/// and the next boxd of the same workspace stops that.
#[tokio::test]
async fn children_left_by_a_killed_boxd_are_stopped_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = "sleep 3141.5926";
    // `-x`: the shell's command line holds the pattern too; only the sleep's is exactly it.
    let alive = || {
        std::process::Command::new("pgrep")
            .args(["-x", "-f", pattern])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    let families = ["--tools", "shell,processes"];
    let mut first = Server::start_on(dir.path(), &families, |_| {});
    let command = format!("{pattern} & wait");
    common::start_process(&first, serde_json::json!({"command": command})).await;
    assert!(
        common::eventually(common::SETTLE, &alive).await,
        "the live process never started its sleep"
    );
    // The guard is started by a task of its own once boxd listens: looked for until it is there.
    let boxd = first.pid();
    assert!(
        common::eventually(common::SETTLE, || guard_of(boxd).is_some()).await,
        "boxd runs its guard"
    );
    let guard = guard_of(boxd).expect("boxd runs its guard");
    // SAFETY: kill(2) on a process of this test's boxd.
    unsafe { libc::kill(guard, libc::SIGKILL) };
    first.kill();
    assert!(alive(), "the orphan outlived its boxd and its guard");
    let mut second = Server::start_on(dir.path(), &families, |_| {});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let survived = alive();
    second.kill();
    assert!(!survived, "the next boxd did not stop the leftover");
}
