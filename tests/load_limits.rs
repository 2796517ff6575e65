//! What boxd answers when work must wait (issue #15 finding 7): a bounded wait, then 429 with
//! `Retry-After`, never a long stall.

use crate::common;

use std::time::{Duration, Instant};

use common::{Fetch, Server, python};
use futures_util::future::join_all;
use serde_json::json;

/// What boxd answers a call: status, `Retry-After`, body, and how long it took.
async fn call(
    request: reqwest::RequestBuilder,
) -> (u16, Option<String>, serde_json::Value, Duration) {
    let started = Instant::now();
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, retry_after, body, started.elapsed())
}

#[tokio::test]
async fn cells_past_the_queue_or_its_wait_are_told_busy_and_never_run() {
    let python = python();
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing: run `make setup`"
    );
    let server = Server::start_with(&["--python", &python]);
    let ready = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "ran = []"}))
        .fetch_json()
        .await;
    assert_eq!(ready["isError"], false, "{ready}");

    let long = tokio::spawn(call(server.post("/tools/run_ipython_cell").json(
        &json!({"code": "import pathlib, time; pathlib.Path('long-runs').touch(); time.sleep(8)"}),
    )));
    // The long cell must be running before the others queue behind it: its file says it is.
    let marker = server.ws("long-runs");
    assert!(
        common::eventually(common::SETTLE, || marker.exists()).await,
        "the long cell never ran"
    );
    let queued = join_all((0..24).map(|n| {
        call(
            server
                .post("/tools/run_ipython_cell")
                .json(&json!({ "code": format!("ran.append({n})") })),
        )
    }))
    .await;
    for (status, retry_after, body, took) in &queued {
        assert_eq!(*status, 429, "{body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
        assert!(
            body["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("IPython kernel is busy")
        );
        assert!(
            *took < Duration::from_secs(7),
            "answered only after {took:?}"
        );
    }
    let fast = queued
        .iter()
        .filter(|(_, _, _, took)| *took < Duration::from_secs(1))
        .count();
    assert!(
        fast >= 24 - 16,
        "only {fast} cells past the queue were refused at once"
    );

    let (status, _, body, _) = long.await.expect("the long cell");
    assert_eq!((status, &body["isError"]), (200, &json!(false)), "{body}");
    let after = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "print(len(ran))"}))
        .fetch_json()
        .await;
    assert_eq!(
        common::item(&after, "stdout"),
        Some("0\n"),
        "a refused cell ran: {after}"
    );
}

/// `shell::MAX_CONCURRENT_COMMANDS`.
const COMMAND_CAP: usize = 128;

#[tokio::test]
async fn shell_commands_past_the_cap_are_told_busy() {
    let server = Server::start_with(&["--tools", "shell"]);
    let started = Instant::now();
    // The running commands outlast the busy answers' 0.5 s wait by far, so a busy answer that came
    // only once they finished shows even on a loaded machine.
    let calls = join_all((0..COMMAND_CAP + 8).map(|_| {
        call(
            server
                .post("/tools/run_shell_command")
                .json(&json!({"command": "sleep 8"})),
        )
    }))
    .await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let busy: Vec<_> = calls.iter().filter(|(status, ..)| *status == 429).collect();
    let ran = calls.iter().filter(|(status, ..)| *status == 200).count();
    assert_eq!((ran, busy.len()), (COMMAND_CAP, 8), "{calls:?}");
    for (_, retry_after, body, took) in busy {
        assert_eq!(retry_after.as_deref(), Some("1"));
        assert!(
            body["detail"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("{COMMAND_CAP} one-shot commands are running")),
            "{body}"
        );
        assert!(
            *took < Duration::from_secs(6),
            "answered only after {took:?}"
        );
    }

    // The streaming route shares the cap: its busy answer is the stream's error event. Each holder
    // leaves a file once it runs, so the stream is sent when all of them hold a place.
    std::fs::create_dir_all(server.ws("held")).expect("held dir");
    let holders: Vec<_> = (0..COMMAND_CAP)
        .map(|_| {
            tokio::spawn(call(
                server
                    .post("/tools/run_shell_command")
                    .json(&json!({"command": "mktemp -p held >/dev/null; sleep 10"})),
            ))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(server.ws("held")).map_or(0, Iterator::count) < COMMAND_CAP {
        assert!(Instant::now() < deadline, "the holders never all ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events = server
        .post("/tools/run_shell_command/stream")
        .header("accept", "application/x-ndjson")
        .json(&json!({"command": "echo hi"}))
        .fetch_ndjson()
        .await;
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(
        (&last["type"], &last["status"]),
        (&json!("error"), &json!(429)),
        "{events:?}"
    );
    for holder in holders {
        holder.await.expect("a holder");
    }
}
