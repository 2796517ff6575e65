//! The IPython family's spare kernel (`--kernel-spare`): a restart swaps it in, and it is a kernel like
//! the first (fresh, same user, environment, group, working directory, OOM score, limits), kept only
//! once a cell has run, and a spare that died degrades to a normal start.

use crate::common;
use crate::ipython::kernels_of;

use std::time::{Duration, Instant};

use common::{Fetch, Server, item, python};
use serde_json::{Value, json};

/// Set in boxd's environment: every kernel must see it.
const MARKER: (&str, &str) = ("BOXD_TEST_KERNEL_MARKER", "spare-kernel-test");

/// What a kernel is started with, as the kernel itself sees it (its pid aside).
const FINGERPRINT: &str = "import json, os, resource\n\
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith('RLIMIT_')}\n\
    print(json.dumps({'pid': os.getpid(), 'ids': [os.getuid(), os.geteuid(), os.getgid(), sorted(os.getgroups())],\n\
    'leads_its_group': os.getpgid(0) == os.getpid(), 'session': os.getsid(0), 'parent': os.getppid(),\n\
    'cwd': os.getcwd(), 'oom_score_adj': open('/proc/self/oom_score_adj').read().strip(),\n\
    'env': dict(os.environ), 'limits': limits, 'x_defined': 'x' in dir()}))";

fn start(extra: &[&str]) -> Server {
    let python = python();
    let mut args = vec!["--python", python.as_str()];
    args.extend_from_slice(extra);
    Server::start_prepared(&args, |command| {
        command.env(MARKER.0, MARKER.1);
    })
}

async fn cell(server: &Server, code: &str, timeout: f64) -> Value {
    server
        .post("/tools/run_ipython_cell")
        .json(&json!({ "code": code, "timeout": timeout }))
        .fetch_json()
        .await
}

/// The fingerprint a kernel prints, and the line before it (boxd's notice, if any).
async fn fingerprint(server: &Server) -> (Value, String) {
    let answer = cell(server, FINGERPRINT, 60.0).await;
    let stdout = item(&answer, "stdout").unwrap_or_default();
    let (notice, last) = match stdout.trim_end().rsplit_once('\n') {
        Some((notice, last)) => (notice.to_owned(), last),
        None => (String::new(), stdout.trim_end()),
    };
    let seen: Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("{answer}"));
    (seen, notice)
}

fn pid_of(seen: &Value) -> u32 {
    seen["pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or_else(|| panic!("a pid in {seen}"))
}

/// The spare beside `kernel`, once there is one (bounded).
async fn spare_beside(server: &Server, kernel: u32) -> u32 {
    let mut spare = None;
    let found = common::eventually(common::SETTLE, || {
        spare = kernels_of(server).into_iter().find(|pid| *pid != kernel);
        spare.is_some()
    })
    .await;
    assert!(found, "no spare kernel beside {kernel}");
    spare.unwrap_or_default()
}

fn without_pid(mut seen: Value) -> Value {
    if let Some(fields) = seen.as_object_mut() {
        fields.remove("pid");
    }
    seen
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// A cell that ignores its interrupt gets the kernel killed; the next cell runs on the spare, which was
/// started exactly like the first kernel and holds none of its state. boxd's death takes both.
#[tokio::test]
async fn a_kernel_restarted_after_an_ignored_interrupt_is_the_spare_fresh_and_started_alike() {
    let mut server = start(&[]);
    assert_eq!(cell(&server, "x = 1", 60.0).await["isError"], false);
    let (first, notice) = fingerprint(&server).await;
    assert_eq!(notice, "");
    assert_eq!(first["x_defined"], true, "{first}");
    assert_eq!(first["env"][MARKER.0], MARKER.1, "{first}");
    assert_eq!(first["leads_its_group"], true, "{first}");
    assert_eq!(first["parent"].as_u64(), Some(u64::from(server.pid())));
    let kernel = pid_of(&first);
    let spare = spare_beside(&server, kernel).await;

    let stubborn = cell(
        &server,
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
        0.3,
    )
    .await;
    let stderr = item(&stubborn, "stderr").unwrap_or_default();
    assert!(stderr.contains("did not stop on interrupt"), "{stubborn}");
    let needed = Instant::now();
    let (after, notice) = fingerprint(&server).await;
    eprintln!(
        "figure: restart after an ignored interrupt answered in {:?}",
        needed.elapsed()
    );
    assert!(
        notice.starts_with("[boxd: this is a fresh IPython kernel; the previous one was restarted after a cell ignored its interrupt"),
        "{notice}"
    );
    assert_eq!(pid_of(&after), spare, "the spare took over");
    assert_eq!(after["x_defined"], false, "{after}");
    assert_eq!(without_pid(after.clone()), {
        let mut expected = without_pid(first);
        expected["x_defined"] = json!(false);
        expected
    });
    assert!(
        common::eventually(common::SETTLE, || !alive(kernel)).await,
        "the killed kernel is gone"
    );
    // A new spare comes for the next restart.
    let next_spare = spare_beside(&server, spare).await;
    assert_ne!(next_spare, kernel);

    server.kill();
    for pid in [spare, next_spare] {
        assert!(
            common::eventually(Duration::from_secs(10), || !alive(pid)).await,
            "kernel {pid} outlived boxd"
        );
    }
}

/// A spare that died (killed here) is not used: the restart falls back to a fresh interpreter, which
/// answers as it always did, and a new spare follows.
#[tokio::test]
async fn a_dead_spare_degrades_to_a_normal_start() {
    let server = start(&[]);
    let (first, _) = fingerprint(&server).await;
    let kernel = pid_of(&first);
    let spare = spare_beside(&server, kernel).await;
    // SAFETY: kill(2) on the spare kernel this test's boxd started.
    unsafe {
        libc::kill(spare as i32, libc::SIGKILL);
    }
    assert!(
        common::eventually(common::SETTLE, || !kernels_of(&server).contains(&spare)).await,
        "the spare did not die"
    );
    let died = cell(&server, "import os; os._exit(1)", 60.0).await;
    assert!(
        item(&died, "stderr").is_some_and(|text| text.contains("kernel died")),
        "{died}"
    );
    let (after, notice) = fingerprint(&server).await;
    assert!(
        notice.starts_with("[boxd: this is a fresh IPython kernel; the previous one died"),
        "{notice}"
    );
    let fresh = pid_of(&after);
    assert!(fresh != spare && fresh != kernel, "{after}");
    assert_eq!(
        without_pid(after),
        without_pid(first.clone()),
        "a fresh start is started alike"
    );
    spare_beside(&server, fresh).await;
    let readiness: Value = server.get("/readyz").fetch_json().await;
    assert_eq!(readiness["families"]["ipython"]["status"], "ready");
}

/// No spare before the first cell (a sandbox whose kernel ran nothing holds one Python process), nor
/// with `--kernel-spare off`, where a restart starts a fresh interpreter as before.
#[tokio::test]
async fn no_spare_before_a_cell_nor_when_turned_off() {
    let server = start(&["--kernel-start", "eager"]);
    assert!(
        common::eventually(common::SETTLE, || kernels_of(&server).len() == 1).await,
        "no kernel under --kernel-start eager"
    );
    for _ in 0..30 {
        assert_eq!(kernels_of(&server).len(), 1, "a spare before any cell");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(server);

    let server = start(&["--kernel-spare", "off"]);
    let (first, _) = fingerprint(&server).await;
    let kernel = pid_of(&first);
    // Longer than a spare takes to start (~0.2 s), bounded.
    for _ in 0..50 {
        assert_eq!(
            kernels_of(&server),
            vec![kernel],
            "a spare under --kernel-spare off"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let died = cell(&server, "import os; os._exit(1)", 60.0).await;
    assert_eq!(died["isError"], true, "{died}");
    let (after, notice) = fingerprint(&server).await;
    assert!(notice.contains("fresh IPython kernel"), "{notice}");
    assert_eq!(after["x_defined"], false, "{after}");
    assert_ne!(pid_of(&after), kernel);
}

/// A restart right after the answer that warmed the spare meets it still starting: it waits for the rest
/// of that start (bounded by the start's timeout), and the spare answers as a fresh kernel.
#[tokio::test]
async fn a_restart_that_meets_the_spare_still_starting_waits_for_it() {
    let server = start(&[]);
    let (first, _) = fingerprint(&server).await;
    let kernel = pid_of(&first);
    let died = cell(&server, "x = 1\nimport os; os._exit(1)", 60.0).await;
    assert_eq!(died["isError"], true, "{died}");
    let (after, notice) = fingerprint(&server).await;
    assert!(notice.contains("fresh IPython kernel"), "{notice}");
    assert_eq!(after["x_defined"], false, "{after}");
    assert_ne!(pid_of(&after), kernel);
    assert_eq!(without_pid(after), without_pid(first));
    // Whole after its first answer: magics registered, asyncio run.
    let state = cell(
        &server,
        "import sys\nprint('IPython.core.magics' in sys.modules, type(sys.modules['asyncio']).__name__)",
        60.0,
    )
    .await;
    assert_eq!(item(&state, "stdout"), Some("True module\n"), "{state}");
}
