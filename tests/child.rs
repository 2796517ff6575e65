//! What every child of boxd gets from the one place children are started (src/core/child/): it
//! dies with boxd, even when boxd is SIGKILLed, and so does what it started, at once; the OOM killer
//! takes it before boxd.

use crate::common;

use std::time::{Duration, Instant};

use common::{Fetch, Server, item, process_runs, start_process};
use serde_json::json;

fn wait_stopped(pid: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_runs(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    !process_runs(pid)
}

#[tokio::test]
async fn children_die_with_a_sigkilled_boxd() {
    let mut server = Server::start_with(&["--tools", "shell,ipython,processes"]);
    let process = start_process(&server, json!({"argv": ["sleep", "300"]})).await;
    let sleeper = process["pid"].as_u64().expect("a pid");
    let answer = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "import os; print(os.getpid())"}))
        .fetch_json()
        .await;
    let kernel: u64 = item(&answer, "stdout")
        .and_then(|out| out.trim().parse().ok())
        .unwrap_or_else(|| panic!("the kernel's pid: {answer}"));
    assert!(process_runs(sleeper) && process_runs(kernel));

    server.kill();
    assert!(wait_stopped(sleeper), "the live process outlived boxd");
    assert!(wait_stopped(kernel), "the kernel outlived boxd");
}

#[tokio::test]
async fn a_running_shell_command_dies_with_a_sigkilled_boxd() {
    let mut server = Server::start_with(&["--tools", "shell"]);
    let pid_file = server.ws("shell.pid");
    let request = server
        .post("/tools/run_shell_command")
        .json(&json!({"command": "echo $$ > shell.pid.tmp && mv shell.pid.tmp shell.pid && exec sleep 300", "timeout": 600}))
        .send();
    let pending = tokio::spawn(request);
    let deadline = Instant::now() + Duration::from_secs(10);
    let shell = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(process_runs(shell));

    server.kill();
    assert!(wait_stopped(shell), "the shell command outlived boxd");
    pending.abort();
}

/// What children started in the background (a command's `sleep &`, which runs on after the command
/// answered; a live process's, in its group and in a session of its own) stops as soon as boxd is
/// SIGKILLed, not when the next boxd of the workspace starts.
#[tokio::test]
async fn grandchildren_stop_at_once_when_boxd_is_sigkilled() {
    let mut server = Server::start_with(&["--tools", "shell,processes"]);
    let answer = server.shell("sleep 1000 >/dev/null 2>&1 & echo $!").await;
    let behind_command: u64 = item(&answer, "stdout")
        .and_then(|out| out.trim().parse().ok())
        .unwrap_or_else(|| panic!("the background sleep's pid: {answer}"));
    start_process(
        &server,
        json!({"argv": ["/bin/sh", "-c",
            "sleep 1000 & echo $! > grouped.pid; setsid sleep 1000 & echo $! > own-session.pid; wait"]}),
    )
    .await;
    let read_pid = |name: &str| -> Option<u64> {
        std::fs::read_to_string(server.ws(name))
            .ok()
            .filter(|text| text.ends_with('\n'))
            .and_then(|text| text.trim().parse().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let (grouped, own_session) = loop {
        if let (Some(grouped), Some(own_session)) =
            (read_pid("grouped.pid"), read_pid("own-session.pid"))
        {
            break (grouped, own_session);
        }
        assert!(
            Instant::now() < deadline,
            "the live process never started its sleeps"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let grandchildren = [behind_command, grouped, own_session];
    assert!(
        grandchildren.iter().all(|pid| process_runs(*pid)),
        "{grandchildren:?}"
    );

    server.kill();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(5);
    while grandchildren.iter().any(|pid| process_runs(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = killed.elapsed();
    let survivors: Vec<u64> = grandchildren
        .iter()
        .copied()
        .filter(|pid| process_runs(*pid))
        .collect();
    for pid in &survivors {
        // SAFETY: kill(2) on a sleep this test started.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    assert!(survivors.is_empty(), "outlived boxd by 5 s: {survivors:?}");
    assert!(took < Duration::from_secs(2), "stopped only after {took:?}");
}

#[tokio::test]
async fn the_oom_killer_takes_a_child_before_boxd() {
    let server = Server::start_with(&["--tools", "shell"]);
    let answer = server.shell("cat /proc/self/oom_score_adj").await;
    let child: i32 = item(&answer, "stdout")
        .and_then(|out| out.trim().parse().ok())
        .unwrap_or_else(|| panic!("a score: {answer}"));
    let own: i32 = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", server.pid()))
        .expect("boxd's score")
        .trim()
        .parse()
        .expect("a number");
    assert!(child > own, "child {child}, boxd {own}");
}

#[tokio::test]
async fn a_nul_byte_in_a_command_is_refused_with_a_reason() {
    let server = Server::start_with(&["--tools", "shell"]);
    let response = server
        .post("/tools/run_shell_command")
        .json(&json!({"command": "echo a\u{0}b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body = response.text().await.unwrap();
    assert!(body.contains("NUL"), "{body}");
}
