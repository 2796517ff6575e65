//! A few fast checks of whichever binary `BOXD_BIN` names: `make smoke-release` runs them alone against
//! the release build, e.g. right after `make build`; `make test` runs them with every other test.

use crate::common;

use std::time::{Duration, Instant};

use common::{Fetch, Server, item};
use serde_json::json;

#[tokio::test]
async fn probes_a_command_and_an_overflowing_timeout_that_leaves_the_server_up() {
    let server = Server::start();
    let live = server
        .anonymous()
        .get(server.url("/livez"))
        .send()
        .await
        .expect("livez answers");
    assert_eq!(live.status().as_u16(), 200);
    assert_eq!(server.get("/healthz").fetch_status().await, 200);

    let echoed = server.shell("echo smoke").await;
    assert_eq!(item(&echoed, "stdout"), Some("smoke\n"), "{echoed}");

    // Issue #14 defect 1: `Instant + 1e19 s` overflowed and the release build aborted.
    let overflowing = server
        .post("/tools/run_shell_command")
        .json(&json!({"command": "true", "timeout": 1e19}))
        .send()
        .await
        .expect("the server answers instead of dying");
    assert_eq!(overflowing.status().as_u16(), 400);
    let after = server.shell("echo still serving").await;
    assert_eq!(item(&after, "stdout"), Some("still serving\n"), "{after}");
}

#[tokio::test]
async fn a_workspace_file_round_trips() {
    let server = Server::start();
    let written = server
        .put("/workspace/file?path=smoke/a.txt")
        .body("hello")
        .fetch_json()
        .await;
    assert_eq!(written["size"], 5, "{written}");
    let read = server
        .get("/workspace/file?path=smoke/a.txt")
        .send()
        .await
        .expect("read answers");
    assert_eq!(read.status().as_u16(), 200);
    assert_eq!(read.text().await.expect("body"), "hello");
}

#[tokio::test]
async fn a_live_process_runs_and_sigterm_exits_zero_promptly_taking_it_along() {
    let mut server = Server::start();
    let response = server
        .post("/processes")
        .json(&json!({"command": "echo started; sleep 30"}))
        .send()
        .await
        .expect("start answers");
    assert_eq!(response.status().as_u16(), 201);
    let process: serde_json::Value = response.json().await.expect("json");
    let id = process["id"].as_str().expect("an id").to_owned();
    let group = process["pid"].as_i64().expect("a pid") as i32;
    let listed = server.get(&format!("/processes/{id}")).fetch_json().await;
    assert_eq!(listed["status"], "running", "{listed}");
    assert!(running_members(group) > 0, "the group {group} runs");

    let asked = Instant::now();
    let status = server.terminate().expect("boxd exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    let took = asked.elapsed();
    println!("SIGTERM to exit: {took:?}");
    // Nothing is in flight: boxd does not wait out its 5 s grace (well under a second alone).
    assert!(took < Duration::from_secs(5), "SIGTERM to exit: {took:?}");
    // boxd has killed the group before exiting; only reaping by whoever inherited it may lag.
    let deadline = Instant::now() + Duration::from_secs(5);
    while running_members(group) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        running_members(group),
        0,
        "the live process's group {group} outlived boxd"
    );
}

/// Members of the process group that are not zombies.
fn running_members(group: i32) -> usize {
    let listing = std::process::Command::new("ps")
        .args(["-e", "-o", "pgid=,stat="])
        .output()
        .expect("ps runs");
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((
                fields.next()?.parse::<i32>().ok()?,
                fields.next()?.to_owned(),
            ))
        })
        .filter(|(pgid, stat)| *pgid == group && !stat.starts_with('Z'))
        .count()
}

#[tokio::test]
async fn an_ipython_cell_runs_when_an_interpreter_with_ipython_is_available() {
    let candidates = [
        common::python(),
        format!("{}/.venv-kernel/bin/python", env!("CARGO_MANIFEST_DIR")),
    ];
    let Some(python) = candidates.into_iter().find(|python| {
        std::process::Command::new(python)
            .args(["-c", "import IPython"])
            .output()
            .is_ok_and(|output| output.status.success())
    }) else {
        println!(
            "skipped: no interpreter with IPython (BOXD_TEST_PYTHON, .venv or .venv-kernel); \
             `make setup` or `make kernel-venv` makes one"
        );
        return;
    };
    let server = Server::start_with(&["--python", &python]);
    let answer = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "x = 6 * 7\nprint(x)"}))
        .fetch_json()
        .await;
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(item(&answer, "stdout"), Some("42\n"), "{answer}");
    let again = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "print(x + 1)"}))
        .fetch_json()
        .await;
    assert_eq!(item(&again, "stdout"), Some("43\n"), "{again}");
}
