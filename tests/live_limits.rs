//! Live processes under pressure, against the real binary: PID reuse, concurrent starts at the limit,
//! stdin a process does not read, terminals without blocking threads, and a boxd that leads its session.

use crate::common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{Fetch, Server, TOKEN, connect_terminal, pgrep_count, start_process, wait_exited};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(20);

/// A `sleep 30` leading a group of its own whose pid is `target`: what PID reuse hands a later
/// command. Steers the kernel's next pid through `ns_last_pid`; refused without root, and impossible
/// while another process of the machine holds the pid (then nothing is signalled at all).
fn stranger_with_pid(target: u64) -> Result<Child, &'static str> {
    for _ in 0..100 {
        if std::path::Path::new(&format!("/proc/{target}")).exists() {
            return Err("the pid is taken by another process of this machine");
        }
        let last = target.checked_sub(1).ok_or("pid 1")?.to_string();
        std::fs::write("/proc/sys/kernel/ns_last_pid", last)
            .map_err(|_| "cannot steer pid allocation here (needs root)")?;
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        if u64::from(child.id()) == target {
            return Ok(child);
        }
        // Another fork took the next pid first; try again.
        let _ = child.kill();
        let _ = child.wait();
    }
    Err("the pid never came back in 100 tries")
}

#[tokio::test]
async fn an_old_record_never_signals_the_group_that_reused_its_pid() {
    let mut server = Server::start_with(&["--tools", "shell,processes,watch"]);
    // One record whose group emptied with its leader, one whose group outlived it for a while.
    let quick = start_process(&server, json!({"argv": ["true"]})).await;
    let lingering = start_process(
        &server,
        json!({"command": "sleep 0.5 >/dev/null 2>&1 & exit 0"}),
    )
    .await;
    for record in [&quick, &lingering] {
        wait_exited(&server, record["id"].as_str().unwrap()).await;
        let pgid = record["pid"].as_u64().unwrap();
        for _ in 0..100 {
            if pgrep_count("-g", pgid) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(pgrep_count("-g", pgid), 0, "group {pgid} emptied");
    }

    for record in [&quick, &lingering] {
        let id = record["id"].as_str().unwrap();
        let pid = record["pid"].as_u64().unwrap();
        let mut stranger = match stranger_with_pid(pid) {
            Ok(stranger) => stranger,
            Err(why) => {
                eprintln!("{id} skipped: {why}");
                continue;
            }
        };
        let signal = server
            .post(&format!("/processes/{id}/signal"))
            .json(&json!({"signal": "SIGKILL"}))
            .fetch_status()
            .await;
        let kill = server
            .post(&format!("/processes/{id}/kill"))
            .fetch_status()
            .await;
        let delete = server
            .delete(&format!("/processes/{id}"))
            .fetch_status()
            .await;
        let survived = stranger.try_wait().unwrap().is_none();
        let _ = stranger.kill();
        let _ = stranger.wait();
        assert!(survived, "{id}: the group that reused pid {pid} was killed");
        assert_eq!((signal, kill, delete), (409, 409, 200), "{id}");
    }
    assert!(server.terminate().is_some_and(|status| status.success()));
}

/// Starts `count` processes at once against a server allowing 2; returns how many were created and
/// how many refused with 429, after checking the listing agrees.
async fn start_at_once(server: &Server, count: usize) -> (usize, usize) {
    // A large environment makes each spawn (fork and exec copy it) take longer, so concurrent starts
    // overlap the way they do on a loaded machine.
    // (Each string stays under the kernel's 128 KiB cap on one.)
    let env: serde_json::Map<String, Value> = (0..8)
        .map(|n| (format!("PADDING{n}"), json!("p".repeat(100 * 1024))))
        .collect();
    let starts = (0..count).map(|_| {
        server
            .post("/processes")
            .json(&json!({"command": "sleep 30", "env": env}))
            .send()
    });
    let answers = timeout(WAIT, futures_util::future::join_all(starts))
        .await
        .unwrap();
    let statuses: Vec<u16> = answers
        .into_iter()
        .map(|answer| answer.unwrap().status().as_u16())
        .collect();
    let created = statuses.iter().filter(|&&status| status == 201).count();
    let refused = statuses.iter().filter(|&&status| status == 429).count();
    assert_eq!(created + refused, count, "{statuses:?}");
    let listing = server.get("/processes").fetch_json().await;
    let running = listing["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|process| process["status"] == "running")
        .count();
    assert_eq!(running, created, "{listing}");
    (created, refused)
}

#[tokio::test]
async fn concurrent_starts_never_pass_max_processes() {
    for round in 0..4 {
        let mut server =
            Server::start_with(&["--tools", "shell,processes,watch", "--max-processes", "2"]);
        let (created, refused) = start_at_once(&server, 32).await;
        assert_eq!((created, refused), (2, 30), "round {round}");
        assert!(server.terminate().is_some_and(|status| status.success()));
    }

    // A slot comes back when its process exits, and a failed spawn gives its slot back at once.
    let mut server =
        Server::start_with(&["--tools", "shell,processes,watch", "--max-processes", "2"]);
    let first = start_process(&server, json!({"command": "sleep 30"})).await;
    start_process(&server, json!({"command": "sleep 30"})).await;
    let id = first["id"].as_str().unwrap();
    let killed = server
        .post(&format!("/processes/{id}/kill"))
        .fetch_status()
        .await;
    assert_eq!(killed, 202);
    wait_exited(&server, id).await;
    let missing = server
        .post("/processes")
        .json(&json!({"argv": ["/no/such/program"]}))
        .fetch_status()
        .await;
    assert_eq!(missing, 400);
    start_process(&server, json!({"command": "sleep 30"})).await;
    assert!(server.terminate().is_some_and(|status| status.success()));
}

#[tokio::test]
async fn stdin_writes_are_capped_and_a_process_that_does_not_read_gets_a_clear_503() {
    let mut server = Server::start_with(&["--tools", "shell,processes,watch"]);
    let reader = start_process(&server, json!({"command": "cat >/dev/null"})).await;
    let reader = reader["id"].as_str().unwrap();
    let write = |id: &str, body: Vec<u8>| {
        server
            .post(&format!("/processes/{id}/stdin"))
            .body(body)
            .send()
    };
    let at_cap = write(reader, vec![b'x'; 1024 * 1024]).await.unwrap();
    assert_eq!(at_cap.status(), 204);
    let over = write(reader, vec![b'x'; 1024 * 1024 + 1]).await.unwrap();
    assert_eq!(over.status(), 413);
    let body: Value = over.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("1 MiB"), "{body}");

    // `sleep` never reads: the pipe and then the queue fill, and a write is refused within seconds.
    let sleeper = start_process(&server, json!({"command": "sleep 30"})).await;
    let sleeper = sleeper["id"].as_str().unwrap();
    let mut refused = None;
    for _ in 0..12 {
        let began = Instant::now();
        let answer = timeout(WAIT, write(sleeper, vec![b'y'; 1024 * 1024]))
            .await
            .expect("a stdin write answers, never hangs")
            .unwrap();
        if answer.status() != 204 {
            let status = answer.status().as_u16();
            let retry_after = answer.headers().get("retry-after").cloned();
            let body: Value = answer.json().await.unwrap();
            refused = Some((status, body, began.elapsed(), retry_after));
            break;
        }
    }
    let (status, body, took, retry_after) = refused.expect("a full queue is refused");
    assert_eq!(status, 503, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("not reading its stdin"),
        "{body}"
    );
    assert!(retry_after.is_some());
    assert!(took < Duration::from_secs(10), "refused after {took:?}");
    assert!(server.terminate().is_some_and(|status| status.success()));
}

#[tokio::test]
async fn a_websocket_keeps_serving_when_its_process_does_not_read_stdin() {
    let mut server =
        Server::start_with(&["--tools", "shell,processes,watch", "--keep-alive", "0.3"]);
    let process = start_process(
        &server,
        json!({"command": "while :; do echo tick; sleep 0.2; done"}),
    )
    .await;
    let mut socket = connect_terminal(&server, process["id"].as_str().unwrap(), 0).await;
    let served = timeout(WAIT, async {
        // 6.4 MiB of input nobody reads: past the pipe and the 4 MiB queue.
        for _ in 0..100 {
            socket
                .send(Message::Binary(vec![b'z'; 64 * 1024].into()))
                .await
                .unwrap();
        }
        let (mut refused, mut ticks_after, mut pings_after) = (false, 0, 0);
        while let Some(Ok(message)) = socket.next().await {
            match message {
                Message::Text(text) => {
                    let event: Value = serde_json::from_str(text.as_str()).unwrap();
                    if event["type"] == "error" {
                        let message = event["message"].as_str().unwrap_or_default();
                        assert!(message.contains("not reading its stdin"), "{event}");
                        refused = true;
                    } else if refused && event["type"] == "output" {
                        ticks_after += 1;
                    }
                }
                Message::Ping(_) if refused => pings_after += 1,
                _ => {}
            }
            if ticks_after >= 2 && pings_after >= 1 {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        served,
        Ok(true),
        "input refused, then output and pings go on"
    );
    assert!(server.terminate().is_some_and(|status| status.success()));
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| tasks.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn terminals_hold_no_blocking_threads() {
    let mut server = Server::start_with(&["--tools", "shell,processes,watch"]);
    // Warm the pools with one terminal first, so only what each terminal holds is counted.
    start_process(&server, json!({"argv": ["/bin/sh"], "pty": true})).await;
    let before = threads_of(server.pid());
    for _ in 0..20 {
        start_process(&server, json!({"argv": ["/bin/sh"], "pty": true})).await;
    }
    let after = threads_of(server.pid());
    assert!(
        after < before + 10,
        "20 terminals took {} threads ({before} -> {after})",
        after.saturating_sub(before)
    );
    assert!(server.terminate().is_some_and(|status| status.success()));
}

/// boxd started as the leader of a new session, as systemd or `setsid boxd serve` do.
fn session_leader() -> Server {
    Server::start_prepared(&["--tools", "shell,processes"], |command| {
        // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
}

#[tokio::test]
async fn a_session_leading_boxd_survives_terminals_that_exit() {
    let mut boxd = session_leader();
    let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    for round in 0..3 {
        let started = http
            .post(format!("{}/processes", boxd.base))
            .bearer_auth(TOKEN)
            .json(&json!({"argv": ["sh", "-c", "echo bye"], "pty": true}))
            .send()
            .await;
        let started: Value = match started {
            Ok(response) if response.status() == 201 => response.json().await.unwrap(),
            other => panic!("round {round}: {other:?}; boxd: {:?}", boxd.exit_status()),
        };
        let id = started["id"].as_str().unwrap();
        let events = http
            .get(format!("{}/processes/{id}/events", boxd.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(events.contains("\"exit\""), "{events}");
    }
    // Its terminals all hung up; boxd is still there and answering.
    assert!(boxd.exit_status().is_none(), "boxd died");
    let live = http
        .get(format!("{}/livez", boxd.base))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
}
