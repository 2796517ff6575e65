//! `run_shell_command` against the real binary.

use crate::common;

use std::time::{Duration, Instant};

use common::{Fetch, Server, item};
use serde_json::json;

#[tokio::test]
async fn result_shape_matches_upstream() {
    let server = Server::start();
    let result = server.shell("echo out; echo err >&2; exit 3").await;
    assert_eq!(item(&result, "stdout"), Some("out\n"));
    assert_eq!(item(&result, "stderr"), Some("err\n"));
    assert_eq!(item(&result, "returncode"), Some("3"));
    assert_eq!(result["isError"], true);
    assert!(result["meta"].is_null() && result["structuredContent"].is_null());

    let quiet = server.shell("pwd").await;
    assert_eq!(quiet["isError"], false);
    assert_eq!(item(&quiet, "stderr"), None);
    let pwd = item(&quiet, "stdout").unwrap().trim().to_owned();
    assert_eq!(std::path::Path::new(&pwd), server.workspace);
}

#[tokio::test]
async fn stdin_is_closed() {
    let server = Server::start();
    let started = Instant::now();
    let result = server.shell("cat; echo done").await;
    assert_eq!(item(&result, "stdout"), Some("done\n"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn background_child_holding_stdout_does_not_hold_the_answer() {
    let server = Server::start();
    let started = Instant::now();
    let result = server
        .shell("sleep 30 & echo $! > bg.pids; nohup sleep 31 & echo $! >> bg.pids; echo started")
        .await;
    let elapsed = started.elapsed();
    assert_eq!(item(&result, "stdout"), Some("started\n"));
    assert_eq!(item(&result, "returncode"), Some("0"));
    assert!(elapsed < Duration::from_secs(3), "answer took {elapsed:?}");
    // Its own sleeps, by pid: a pattern (`pkill -f 'sleep 3[01]$'`) killed other tests' `sleep 30`s.
    let pids = std::fs::read_to_string(server.ws("bg.pids")).unwrap();
    for pid in pids
        .lines()
        .filter_map(|pid| pid.trim().parse::<i32>().ok())
    {
        // SAFETY: kill(2) on a sleep this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_group_and_keeps_partial_output() {
    let server = Server::start();
    let started = Instant::now();
    let result: serde_json::Value = server
        .post("/tools/run_shell_command")
        .json(&json!({"command": "echo partial; sleep 1007 & sleep 1008", "timeout": 1}))
        .fetch_json()
        .await;
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(item(&result, "stdout"), Some("partial\n"));
    assert_eq!(item(&result, "returncode"), Some("124"));
    assert!(
        item(&result, "stderr")
            .unwrap()
            .contains("timed out after 1s")
    );
    assert_eq!(result["isError"], true);
    let mut survivors = String::new();
    for _ in 0..50 {
        let pgrep = std::process::Command::new("pgrep")
            .args(["-f", "sleep 100[78]"])
            .output()
            .unwrap();
        survivors = String::from_utf8_lossy(&pgrep.stdout).into_owned();
        if survivors.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(survivors.is_empty(), "processes left: {survivors}");
}

#[tokio::test]
async fn output_is_capped_with_a_marker_and_decoded_lossily() {
    let server = Server::start_with(&["--max-output", "1000"]);
    let result = server
        .shell("head -c 100000 /dev/zero | tr '\\0' a; printf '\\377' >&2")
        .await;
    let stdout = item(&result, "stdout").unwrap();
    assert!(stdout.contains("[boxd: output truncated, 99000 bytes omitted]"));
    assert!(stdout.len() < 1200);
    assert_eq!(item(&result, "stderr"), Some("\u{fffd}"));
}

#[tokio::test]
async fn bad_input_is_a_client_error() {
    let server = Server::start();
    for (body, status) in [
        (json!({"command": ""}), 400),
        (json!({"command": "   "}), 400),
        (json!({}), 422),
        (json!({"command": "true", "timeout": -1}), 400),
        (json!({"command": 5}), 422),
    ] {
        let response = server
            .post("/tools/run_shell_command")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{body}");
        let detail: serde_json::Value = response.json().await.unwrap();
        assert!(detail["detail"].is_string());
    }
    let malformed = server
        .post("/tools/run_shell_command")
        .body("{\"command\":")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status().as_u16(), 422);
}

/// A timeout too large for `Instant` once panicked the server (and, with `panic = "abort"`, killed it
/// with every child orphaned). Now it is a 400 that names the bound, and the server goes on.
#[tokio::test]
async fn a_huge_timeout_is_refused_and_the_server_survives() {
    let server = Server::start();
    for timeout in [json!(1e19), json!(86_401), json!(1.7976931348623157e308)] {
        let response = server
            .post("/tools/run_shell_command")
            .json(&json!({"command": "true", "timeout": timeout}))
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 400, "timeout {timeout}");
        let body: serde_json::Value = response.json().await.expect("json");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("at most 86400"), "{detail}");
    }
    let still_alive = server.shell("echo alive").await;
    assert_eq!(item(&still_alive, "stdout"), Some("alive\n"));
}

/// Children never see boxd's API token: not in their environment, not in boxd's `/proc/PID/environ`.
#[tokio::test]
async fn children_cannot_read_the_api_token() {
    let server = Server::start();
    let result = server
        .shell(&format!(
            "env; tr '\\0' '\\n' < /proc/{}/environ",
            server.pid()
        ))
        .await;
    let seen = item(&result, "stdout").unwrap_or_default();
    assert!(!seen.is_empty());
    assert!(!seen.contains(common::TOKEN), "the token leaked:\n{seen}");
}
