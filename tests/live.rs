//! Live processes, their streams and workspace watch, against the real binary: real PTYs, a real
//! WebSocket client (tokio-tungstenite), real SSE/NDJSON streams, real inotify.

use crate::common;

use std::time::Duration;

use common::{
    Fetch, NdjsonEvents, SETTLE, Server, Terminal, connect_terminal, eventually, pgrep_count,
    process_runs, start_process, wait_exited,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(20);

async fn status(server: &Server, id: &str) -> Value {
    server.get(&format!("/processes/{id}")).fetch_json().await
}

/// Terminal text read from the socket until `needle` appears; returns it and the offset after it.
async fn read_until(socket: &mut Terminal, needle: &str) -> (String, u64) {
    read_until_followed(socket, needle, "").await
}

/// Terminal text read from the socket until `needle` appears followed by `then` (the terminal may cut
/// its output anywhere, so both are looked for in one read); returns it and the offset after it.
async fn read_until_followed(socket: &mut Terminal, needle: &str, then: &str) -> (String, u64) {
    let mut seen = String::new();
    let mut end = 0;
    let found = timeout(WAIT, async {
        while let Some(message) = socket.next().await {
            let Message::Text(text) = message.unwrap() else {
                continue;
            };
            let event: Value = serde_json::from_str(text.as_str()).unwrap();
            if event["type"] == "output" {
                seen.push_str(event["data"].as_str().unwrap());
                end = event["end"].as_u64().unwrap();
                if seen
                    .split_once(needle)
                    .is_some_and(|(_, after)| after.contains(then))
                {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "never saw {needle:?} followed by {then:?} in {seen:?}"
    );
    (seen, end)
}

/// The first message `pick` accepts, within `WAIT`; `None` if the socket ends or time runs out first.
async fn first_message<T>(
    socket: &mut Terminal,
    mut pick: impl FnMut(Message) -> Option<T>,
) -> Option<T> {
    timeout(WAIT, async {
        while let Some(Ok(message)) = socket.next().await {
            if let Some(found) = pick(message) {
                return Some(found);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
}

async fn send(socket: &mut Terminal, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

#[tokio::test]
async fn python_in_a_terminal_over_a_websocket() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(
        &server,
        json!({"argv": ["python3", "-i"], "pty": {"rows": 24, "cols": 80}}),
    )
    .await;
    let id = process["id"].as_str().unwrap();
    let mut socket = connect_terminal(&server, id, 0).await;
    read_until(&mut socket, ">>> ").await;
    send(&mut socket, json!({"type": "stdin", "data": "1+1\n"})).await;
    read_until(&mut socket, "\r\n2\r\n").await;

    // Ctrl-C reaches the foreground process through the terminal, and the session goes on. Sent once
    // the statement runs (its output says so: the echoed line holds only the expression).
    send(
        &mut socket,
        json!({"type": "stdin", "data": "import time; print('sleeping-' + str(6*7)); time.sleep(30)\n"}),
    )
    .await;
    read_until(&mut socket, "sleeping-42").await;
    socket
        .send(Message::Binary(vec![0x03].into()))
        .await
        .unwrap();
    read_until(&mut socket, "KeyboardInterrupt").await;
    send(&mut socket, json!({"type": "stdin", "data": "40+2\n"})).await;
    // The next prompt too: end of input is a ^D that only readline, reading again, takes for one (sent
    // while Python still ran `40+2`, the terminal's canonical mode swallowed it and Python never ended).
    // (Readline may put escape sequences, bracketed paste's, between the result and the prompt, and the
    // prompt may come a byte at a time.)
    read_until_followed(&mut socket, "\r\n42\r\n", ">>> ").await;

    send(&mut socket, json!({"type": "close_stdin"})).await;
    let exit = first_message(&mut socket, |message| {
        let Message::Text(text) = message else {
            return None;
        };
        let event: Value = serde_json::from_str(text.as_str()).unwrap();
        (event["type"] == "exit").then_some(event)
    })
    .await
    .expect("an exit event");
    assert_eq!(exit["exit_code"], 0, "{exit}");
}

#[tokio::test]
async fn stty_sees_the_new_size_after_a_resize() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(&server, json!({"argv": ["/bin/sh"], "pty": true})).await;
    let id = process["id"].as_str().unwrap();
    let mut socket = connect_terminal(&server, id, 0).await;
    send(&mut socket, json!({"type": "stdin", "data": "stty size\n"})).await;
    read_until(&mut socket, "24 80").await;
    send(
        &mut socket,
        json!({"type": "resize", "rows": 33, "cols": 101}),
    )
    .await;
    send(&mut socket, json!({"type": "stdin", "data": "stty size\n"})).await;
    read_until(&mut socket, "33 101").await;
    assert_eq!(
        status(&server, id).await["pty"],
        json!({"rows": 33, "cols": 101})
    );
    // Over plain HTTP too.
    let resized = server
        .post(&format!("/processes/{id}/resize"))
        .json(&json!({"rows": 5, "cols": 50}))
        .fetch_status()
        .await;
    assert_eq!(resized, 204);
    send(&mut socket, json!({"type": "stdin", "data": "stty size\n"})).await;
    read_until(&mut socket, "5 50").await;
}

#[tokio::test]
async fn a_client_reattaches_from_its_offset_after_closing_the_socket() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(&server, json!({"argv": ["/bin/sh"], "pty": true})).await;
    let id = process["id"].as_str().unwrap();
    let mut socket = connect_terminal(&server, id, 0).await;
    send(
        &mut socket,
        json!({"type": "stdin", "data": "echo first-$((20+1))\n"}),
    )
    .await;
    let (_, resume_at) = read_until(&mut socket, "first-21").await;
    socket.close(None).await.unwrap();

    // While nobody is attached, the process keeps running and its output is kept.
    let written = server
        .post(&format!("/processes/{id}/stdin"))
        .body("echo second-$((40+2))\n")
        .fetch_status()
        .await;
    assert_eq!(written, 204);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status(&server, id).await["status"], "running");

    let mut again = connect_terminal(&server, id, resume_at).await;
    let (seen, _) = read_until(&mut again, "second-42").await;
    assert!(
        !seen.contains("first-21"),
        "replayed output before the offset: {seen:?}"
    );
}

/// Waits (5 s at most) for the group or session to be empty, and says so if it never is.
async fn assert_all_gone(selector: &str, id: u64) {
    assert!(
        eventually(SETTLE, || pgrep_count(selector, id) == 0).await,
        "{} process(es) of {selector} {id} survive",
        pgrep_count(selector, id)
    );
}

#[tokio::test]
async fn a_background_group_is_listed_then_killed_whole() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(&server, json!({"command": "sleep 30 & sleep 30; wait"})).await;
    let id = process["id"].as_str().unwrap();
    let pgid = process["pid"].as_u64().unwrap();
    let listing = server.get("/processes").fetch_json().await;
    let listed = listing["processes"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|p| p["id"] == id && p["status"] == "running"),
        "{listing}"
    );
    // The shell forks its sleeps some time after the start answered (on a loaded machine, a while).
    assert!(
        eventually(SETTLE, || pgrep_count("-g", pgid) >= 3).await,
        "the shell and both sleeps run in the group: {} of 3",
        pgrep_count("-g", pgid)
    );

    let killed = server
        .post(&format!("/processes/{id}/kill"))
        .fetch_status()
        .await;
    assert_eq!(killed, 202);
    let last = wait_exited(&server, id).await;
    assert_eq!(last["signal"], "SIGKILL", "{last}");
    assert_all_gone("-g", pgid).await;

    let removed = server
        .delete(&format!("/processes/{id}"))
        .fetch_status()
        .await;
    assert_eq!(removed, 200);
    let gone = server.get(&format!("/processes/{id}")).fetch_status().await;
    assert_eq!(gone, 404);
}

#[tokio::test]
async fn what_outlives_the_leader_can_still_be_killed() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(&server, json!({"command": "sleep 30 & echo started"})).await;
    let id = process["id"].as_str().unwrap();
    let pgid = process["pid"].as_u64().unwrap();
    let last = wait_exited(&server, id).await;
    assert_eq!(last["exit_code"], 0, "{last}");
    assert_eq!(
        pgrep_count("-g", pgid),
        1,
        "the background sleep outlives the shell"
    );

    let kill = |server: &Server| server.post(&format!("/processes/{id}/kill")).fetch_status();
    assert_eq!(kill(&server).await, 202);
    assert_all_gone("-g", pgid).await;
    assert_eq!(kill(&server).await, 409, "nothing is left to kill");
}

#[tokio::test]
async fn a_terminal_kill_reaches_the_jobs_of_an_interactive_shell() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(
        &server,
        json!({"argv": ["bash", "--norc", "--noprofile", "-i"], "pty": true}),
    )
    .await;
    let id = process["id"].as_str().unwrap();
    let session = process["pid"].as_u64().unwrap();
    let mut socket = connect_terminal(&server, id, 0).await;
    // With job control each job gets a process group of its own: the shell's group alone misses it.
    send(
        &mut socket,
        json!({"type": "stdin", "data": "sleep 30 & echo started-$((6*7))\n"}),
    )
    .await;
    read_until(&mut socket, "started-42").await;
    assert!(pgrep_count("-s", session) >= 2, "the shell and its job");
    assert_eq!(
        pgrep_count("-g", session),
        1,
        "the job has a group of its own"
    );

    let killed = server
        .delete(&format!("/processes/{id}"))
        .fetch_status()
        .await;
    assert_eq!(killed, 200);
    assert_all_gone("-s", session).await;
}

/// Reads server-sent events as (event name, JSON data), calling `each` as each one arrives.
async fn read_sse(response: reqwest::Response, mut each: impl AsyncFnMut(&str, Value) -> bool) {
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    while let Some(chunk) = body.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(at) = buffer.find("\n\n") {
            let block: String = buffer.drain(..at + 2).collect();
            let mut name = "";
            let mut data = None;
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = value;
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(value).ok();
                }
            }
            if let Some(data) = data
                && !each(name, data).await
            {
                return;
            }
        }
    }
}

#[tokio::test]
async fn server_sent_events_deliver_each_line_while_the_command_still_runs() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(
        &server,
        json!({"command": "for i in 1 2 3; do echo line $i; while [ ! -e go-$i ]; do sleep 0.02; done; done"}),
    )
    .await;
    let id = process["id"].as_str().unwrap().to_owned();
    let response = server
        .get(&format!("/processes/{id}/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut lines = Vec::new();
    let mut exit = Value::Null;
    timeout(
        WAIT,
        read_sse(response, async |name, data| {
            match name {
                "output" => {
                    // Each line arrives while the process is still running (it waits for this test's
                    // go-N before the next line, then its end): streamed, not collected.
                    let state = status(&server, &id).await;
                    lines.push((
                        data["data"].as_str().unwrap().to_owned(),
                        state["status"].clone(),
                    ));
                    std::fs::write(server.ws(&format!("go-{}", lines.len())), "").unwrap();
                    true
                }
                "exit" => {
                    exit = data;
                    false
                }
                _ => true,
            }
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        lines,
        vec![
            ("line 1\n".to_owned(), json!("running")),
            ("line 2\n".to_owned(), json!("running")),
            ("line 3\n".to_owned(), json!("running")),
        ]
    );
    assert_eq!(exit["exit_code"], 0);

    // NDJSON for clients that do not ask for SSE, resuming from an offset.
    let events = server
        .get(&format!("/processes/{id}/events?offset=7"))
        .fetch_ndjson()
        .await;
    assert_eq!(events[0]["data"], "line 2\n");
    assert_eq!(events.last().unwrap()["type"], "exit");
}

#[tokio::test]
async fn timeouts_end_the_group_and_limits_answer_clearly() {
    let server = Server::start_with(&["--tools", "shell,processes", "--max-processes", "1"]);
    // The one slot held by a process that ends only when told to (one with a short timeout could end
    // before the second start on a loaded machine): the second start is refused.
    let holder = start_process(&server, json!({"command": "sleep 30"})).await;
    let holder = holder["id"].as_str().unwrap();
    let second = server.post("/processes").json(&json!({"command": "true"}));
    assert_eq!(second.fetch_status().await, 429);
    let killed = server.post(&format!("/processes/{holder}/kill"));
    assert_eq!(killed.fetch_status().await, 202);
    wait_exited(&server, holder).await;
    // The slot is given back just after the exit is recorded: a start may meet that instant.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let process: Value = loop {
        let response = server
            .post("/processes")
            .json(&json!({"command": "sleep 30", "timeout": 0.5}))
            .send()
            .await
            .unwrap();
        if response.status() != 429 || tokio::time::Instant::now() >= deadline {
            assert_eq!(response.status(), 201);
            break response.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let id = process["id"].as_str().unwrap();
    let events = server
        .get(&format!("/processes/{id}/events"))
        .fetch_ndjson()
        .await;
    let exit = events.last().unwrap();
    assert_eq!(
        (exit["timed_out"].clone(), exit["signal"].clone()),
        (json!(true), json!("SIGTERM"))
    );

    for (request, expected) in [
        (json!({}), 400),
        (json!({"command": "true", "argv": ["true"]}), 400),
        (json!({"argv": []}), 400),
        (json!({"command": "true", "cwd": "../.."}), 403),
        (
            json!({"command": "true", "pty": {"rows": 0, "cols": 80}}),
            400,
        ),
        (json!({"command": "true", "timeout": -1}), 400),
        (json!({"argv": ["/no/such/program"]}), 400),
        (json!({"command": "true", "env": {"": "x"}}), 400),
        (json!({"command": "true", "env": {"A=B": "x"}}), 400),
    ] {
        let response = server
            .post("/processes")
            .json(&request)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected, "{request}");
        let body: Value = response.json().await.unwrap();
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    let exited = server
        .post(&format!("/processes/{id}/stdin"))
        .body("x")
        .fetch_status()
        .await;
    assert_eq!(exited, 409);
    let resize = server
        .post(&format!("/processes/{id}/resize"))
        .json(&json!({"rows": 10, "cols": 10}))
        .fetch_status()
        .await;
    assert_eq!(resize, 409);
    let signal = server
        .post(&format!("/processes/{id}/signal"))
        .json(&json!({"signal": "SIGNOPE"}))
        .fetch_status()
        .await;
    assert_eq!(signal, 400);
    let not_upgraded = server
        .get(&format!("/processes/{id}/ws"))
        .send()
        .await
        .unwrap();
    assert_eq!(not_upgraded.status(), 400);
    let body: Value = not_upgraded.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("WebSocket"));
    assert_eq!(
        server
            .get("/processes/p-nope")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test]
async fn pipes_carry_stdin_and_keep_stdout_and_stderr_apart() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let process = start_process(&server, json!({"argv": ["sh", "-c", "read line; echo out:$line; echo err:$line >&2; cat"], "env": {"X": "1"}})).await;
    let id = process["id"].as_str().unwrap();
    let post = |path: String, body: &'static str| server.post(&path).body(body).send();
    assert_eq!(
        post(format!("/processes/{id}/stdin"), "hello\nrest\n")
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        post(format!("/processes/{id}/stdin/close"), "")
            .await
            .unwrap()
            .status(),
        204
    );
    let events = server
        .get(&format!("/processes/{id}/events"))
        .fetch_ndjson()
        .await;
    let of = |stream: &str| -> String {
        events
            .iter()
            .filter(|e| e["stream"] == stream)
            .map(|e| e["data"].as_str().unwrap())
            .collect()
    };
    assert_eq!(of("stdout"), "out:hello\nrest\n");
    assert_eq!(of("stderr"), "err:hello\n");
    assert_eq!(events.last().unwrap()["exit_code"], 0);
    let page: Value = server
        .get(&format!("/processes/{id}/output?offset=0"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["process"]["status"], "exited");
    assert_eq!(page["next_offset"], page["process"]["output_end"]);
}

#[tokio::test]
async fn watch_reports_create_modify_rename_delete_and_skips_git() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    std::fs::create_dir_all(server.ws("sub")).unwrap();
    let response = server.get("/watch?path=sub").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut events = NdjsonEvents::new(response);
    let mut next_event = async || events.next().await.expect("an event");
    assert_eq!(next_event().await, json!({"type": "ready", "path": "sub"}));
    std::fs::create_dir_all(server.ws("sub/.git")).unwrap();
    std::fs::write(server.ws("sub/.git/index"), "ignored").unwrap();
    std::fs::write(server.ws("sub/a.txt"), "one").unwrap();
    assert_eq!(
        next_event().await,
        json!({"type": "create", "path": "sub/a.txt"})
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(server.ws("sub/a.txt"), "two").unwrap();
    assert_eq!(
        next_event().await,
        json!({"type": "modify", "path": "sub/a.txt"})
    );
    std::fs::rename(server.ws("sub/a.txt"), server.ws("sub/b.txt")).unwrap();
    assert_eq!(
        next_event().await,
        json!({"type": "rename", "path": "sub/a.txt", "to": "sub/b.txt"})
    );
    std::fs::remove_file(server.ws("sub/b.txt")).unwrap();
    assert_eq!(
        next_event().await,
        json!({"type": "delete", "path": "sub/b.txt"})
    );

    // Deleting the watched directory itself ends the stream (its watch is gone) after saying so.
    std::fs::remove_dir_all(server.ws("sub")).unwrap();
    assert_eq!(next_event().await, json!({"type": "delete", "path": "sub"}));
    assert!(events.next().await.is_none(), "the stream ended");

    let escape = server.get("/watch?path=..").send().await.unwrap();
    assert_eq!(escape.status(), 403);
    let missing = server.get("/watch?path=nope").send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn streaming_shell_command_reports_output_before_it_ends_then_the_same_result() {
    let server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let command = "echo first; echo oops >&2; while [ ! -f go ]; do sleep 0.05; done; echo last";
    let response = server
        .post("/tools/run_shell_command/stream")
        .json(&json!({"command": command, "timeout": 20}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut events = NdjsonEvents::new(response);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = events.next().await.unwrap();
        seen.push((event["stream"].clone(), event["data"].clone()));
    }
    seen.sort_by_key(|(stream, _)| stream.to_string());
    assert_eq!(
        seen,
        vec![
            (json!("stderr"), json!("oops\n")),
            (json!("stdout"), json!("first\n"))
        ]
    );
    // The command is still waiting: the events came while it ran. Now let it finish.
    std::fs::write(server.ws("go"), "").unwrap();
    assert_eq!(events.next().await.unwrap()["data"], "last\n");
    let result = events.next().await.unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(
        common::item(&result["result"], "stdout"),
        Some("first\nlast\n")
    );
    assert_eq!(common::item(&result["result"], "stderr"), Some("oops\n"));
    assert_eq!(common::item(&result["result"], "returncode"), Some("0"));
    assert_eq!(result["result"]["isError"], true);
    assert!(events.next().await.is_none());

    let unknown = server
        .post("/tools/nope/stream")
        .json(&json!({}))
        .fetch_status()
        .await;
    assert_eq!(unknown, 404);
    let bad = server
        .post("/tools/run_shell_command/stream")
        .json(&json!({"command": ""}))
        .send()
        .await
        .unwrap();
    let mut bad = NdjsonEvents::new(bad);
    let error = bad.next().await.unwrap();
    assert_eq!(
        (error["type"].clone(), error["status"].clone()),
        (json!("error"), json!(400))
    );
}

#[tokio::test]
async fn exited_processes_are_reaped_after_their_retention() {
    let server = Server::start_with(&["--tools", "shell,processes", "--process-retention", "0.5"]);
    let process = start_process(&server, json!({"command": "echo bye"})).await;
    let id = process["id"].as_str().unwrap();
    let events = server
        .get(&format!("/processes/{id}/events"))
        .fetch_ndjson()
        .await;
    assert_eq!(events.last().unwrap()["type"], "exit");
    let mut status_code = 200;
    for _ in 0..100 {
        status_code = server.get(&format!("/processes/{id}")).fetch_status().await;
        if status_code == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status_code, 404, "reaped within 5 s of a 0.5 s retention");
}

#[tokio::test]
async fn idle_terminals_and_streams_send_keep_alives() {
    let server = Server::start_with(&["--tools", "shell,processes,watch", "--keep-alive", "0.3"]);
    let terminal = start_process(&server, json!({"argv": ["/bin/sh"], "pty": true})).await;
    let mut socket = connect_terminal(&server, terminal["id"].as_str().unwrap(), 0).await;
    let pinged = first_message(&mut socket, |message| {
        matches!(message, Message::Ping(_)).then_some(())
    })
    .await;
    assert_eq!(pinged, Some(()), "an idle terminal is pinged");

    // Quiet for longer than any wait here (a short one could end first on a loaded machine).
    let quiet = start_process(&server, json!({"command": "sleep 30"})).await;
    let response = server
        .get(&format!(
            "/processes/{}/events",
            quiet["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    let mut events = NdjsonEvents::new(response);
    assert_eq!(events.next().await.unwrap()["type"], "keepalive");
}

/// Closing an NDJSON stream stops its call at once, not at the stream's next write (a keep-alive may be
/// 15 s away, here 60 s): the command's process is gone within a second or two, and within 10 s even on
/// a loaded machine, long before its keep-alive or its own end (30 s).
#[tokio::test]
async fn closing_a_streamed_call_stops_its_command_at_once() {
    let server = Server::start_with(&["--tools", "shell", "--keep-alive", "60"]);
    let response = server
        .post("/tools/run_shell_command/stream")
        .json(&json!({"command": "echo $$; exec sleep 30", "timeout": 60}))
        .send()
        .await
        .unwrap();
    let mut events = NdjsonEvents::new(response);
    let first = events.next().await.unwrap();
    let pid: i32 = first["data"]
        .as_str()
        .and_then(|data| data.trim().parse().ok())
        .unwrap_or_else(|| panic!("the shell's pid: {first}"));
    drop(events);
    assert!(
        eventually(Duration::from_secs(10), || !process_runs(pid)).await,
        "the command outlived its closed stream"
    );
}
