//! `run_ipython_cell` against the real binary and a real IPython (the venv `make test` prepares).

use crate::common;

use std::time::Duration;

use common::{Fetch, Server, item, python};
use serde_json::{Value, json};

fn start() -> Server {
    let python = python();
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing: run `make setup` (or set BOXD_TEST_PYTHON to a Python with IPython)"
    );
    Server::start_with(&["--python", &python])
}

async fn cell(server: &Server, code: &str) -> Value {
    server
        .post("/tools/run_ipython_cell")
        .json(&json!({ "code": code }))
        .fetch_json()
        .await
}

#[tokio::test]
async fn state_streams_shell_escapes_and_magics() {
    let server = start();
    let first = cell(&server, "x = 41").await;
    assert_eq!(item(&first, "stdout"), Some(""));
    assert_eq!(first["isError"], false);

    let second = cell(&server, "print(x + 1)\nx").await;
    let stdout = item(&second, "stdout").unwrap();
    assert!(
        stdout.starts_with("42\n") && stdout.contains("41"),
        "{stdout}"
    );

    let failing = cell(&server, "print('before')\n1/0").await;
    assert_eq!(failing["isError"], true);
    assert_eq!(item(&failing, "stdout"), Some("before\n"));
    let traceback = item(&failing, "stderr").unwrap();
    assert!(traceback.contains("ZeroDivisionError"), "{traceback}");
    assert!(
        !traceback.contains('\u{1b}'),
        "ANSI codes left in: {traceback:?}"
    );

    let warned = cell(&server, "import sys; print('oops', file=sys.stderr)").await;
    assert_eq!(item(&warned, "stderr"), Some("oops\n"));

    let shell = cell(&server, "!echo from-shell").await;
    assert!(item(&shell, "stdout").unwrap().contains("from-shell"));
    let pwd = cell(&server, "%pwd").await;
    assert!(
        item(&pwd, "stdout")
            .unwrap()
            .contains(server.workspace.to_str().unwrap()),
        "{pwd}"
    );
}

/// The helper starts without running IPython's package `__init__` (the terminal front end it imports is
/// half the start-up); user code must still see the whole package, whichever way it asks for it.
#[tokio::test]
async fn the_whole_ipython_package_is_there_for_user_code() {
    let server = start();
    let code = "import IPython\n\
        from IPython import get_ipython, embed\n\
        from IPython.display import display, Markdown\n\
        print(IPython.__version__ == IPython.core.release.version, callable(embed))\n\
        print(get_ipython() is IPython.get_ipython(), type(get_ipython()).__name__)\n\
        print(IPython.version_info[0] >= 8, IPython.InteractiveShell.initialized())\n\
        import jedi\n\
        print(jedi.__name__, 'print' in get_ipython().complete('pri')[1])";
    let answer = cell(&server, code).await;
    assert_eq!(answer["isError"], false, "{answer}");
    // jedi, kept out of the kernel's start, imports in a cell; completion works without it.
    assert_eq!(
        item(&answer, "stdout"),
        Some("True True\nTrue InteractiveShell\nTrue True\njedi True\n"),
        "{answer}"
    );
    // `from IPython import X` of a missing name fails as it does with the package fully loaded.
    let missing = cell(&server, "from IPython import no_such_name").await;
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(
        item(&missing, "stderr").unwrap().contains("ImportError"),
        "{missing}"
    );
}

/// The SDK's first cell comes while the kernel still starts (it waits for the family): it runs as soon
/// as the kernel is ready, before the rest of the kernel's start (IPython's magics, asyncio, the
/// completer), which follows its answer.
#[tokio::test]
async fn a_cell_that_waits_for_the_kernel_runs_before_the_rest_of_its_start() {
    let server = start();
    let answer = cell(&server, KERNEL_STATE).await;
    assert_eq!(
        item(&answer, "stdout"),
        Some("False LazyModule DeferredMagic False\n"),
        "{answer}"
    );
    let after = cell(&server, KERNEL_STATE).await;
    assert_eq!(
        item(&after, "stdout"),
        Some("True module method True\n"),
        "{after}"
    );
}

/// What of the kernel's start is done: IPython's magics imported, asyncio run, a built-in magic's type,
/// the completer made.
const KERNEL_STATE: &str = "import sys\n\
    print('IPython.core.magics' in sys.modules, type(sys.modules['asyncio']).__name__, \
    type(get_ipython().find_line_magic('time')).__name__, 'Completer' in vars(get_ipython()))";

/// A kernel warmed ahead of its first cell (boxd found no cell queued when it became ready) finishes
/// its start before that cell comes: IPython's magics registered, asyncio run, the completer made. A
/// cell that meets a kernel still starting runs before all that (tests/python/test_ipython_helper.py).
#[tokio::test]
async fn a_kernel_warmed_before_its_first_cell_finishes_its_start_meanwhile() {
    let server = start();
    let mut status = Value::Null;
    for _ in 0..200 {
        let readiness: Value = server.get("/readyz").fetch_json().await;
        status = readiness["families"]["ipython"]["status"].clone();
        if status == "ready" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, "ready");
    let answer = cell(&server, KERNEL_STATE).await;
    assert_eq!(
        item(&answer, "stdout"),
        Some("True module method True\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn matplotlib_figure_comes_back_as_a_png_item() {
    let server = start();
    let result = cell(
        &server,
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
    )
    .await;
    let images: Vec<&Value> = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "image")
        .collect();
    assert_eq!(images.len(), 1, "{result}");
    assert_eq!(images[0]["mimeType"], "image/png");
    // base64 of the 8-byte PNG signature \x89PNG\r\n\x1a\n
    assert!(
        images[0]["data"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo")
    );

    // A notebook's usual first line works too (it raised NotImplementedError), and a GUI loop is an error.
    let inline = cell(&server, "%matplotlib inline\nplt.plot([2, 1])\nplt.show()").await;
    assert_eq!(inline["isError"], false, "{inline}");
    let images = inline["content"].as_array().unwrap().iter();
    assert_eq!(
        images.filter(|item| item["type"] == "image").count(),
        1,
        "{inline}"
    );
    let gui = cell(&server, "%matplotlib qt").await;
    assert_eq!(gui["isError"], true, "{gui}");
}

#[tokio::test]
async fn timeout_interrupts_and_keeps_state() {
    let server = start();
    cell(&server, "x = 1").await;
    let stuck = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "print('looping')\nwhile True: pass", "timeout": 1}))
        .fetch_json()
        .await;
    assert_eq!(stuck["isError"], true);
    assert_eq!(item(&stuck, "stdout"), Some("looping\n"));
    let stderr = item(&stuck, "stderr").unwrap();
    assert!(
        stderr.contains("KeyboardInterrupt") && stderr.contains("state is kept"),
        "{stderr}"
    );
    let after = cell(&server, "print(x)").await;
    assert_eq!(item(&after, "stdout"), Some("1\n"));
}

#[tokio::test]
async fn cell_ignoring_the_interrupt_gets_a_fresh_kernel_and_says_state_was_lost() {
    let server = start();
    cell(&server, "x = 1").await;
    let stubborn = server
        .post("/tools/run_ipython_cell")
        .json(&json!({
            "code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ignoring')\ntime.sleep(60)",
            "timeout": 1
        }))
        .fetch_json()
        .await;
    assert_eq!(stubborn["isError"], true);
    let stderr = item(&stubborn, "stderr").unwrap();
    assert!(
        stderr.contains("did not stop on interrupt") && stderr.contains("state"),
        "{stderr}"
    );
    let after = cell(&server, "print('x' in dir())").await;
    let stdout = item(&after, "stdout").unwrap();
    assert!(
        stdout.contains("fresh IPython kernel") && stdout.ends_with("False\n"),
        "{stdout}"
    );
}

#[tokio::test]
async fn killed_kernel_is_reported_and_replaced() {
    let server = start();
    cell(&server, "x = 1").await;
    let pid: i32 = item(
        &cell(&server, "import os; print(os.getpid())").await,
        "stdout",
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    // The kill comes once the cell runs (it says so with a file in the workspace, its working
    // directory), not after a guess at how long its way to the kernel takes.
    let running = tokio::spawn({
        let request = server
            .post("/tools/run_ipython_cell")
            .json(&json!({"code": "import pathlib, time; pathlib.Path('running').touch(); time.sleep(30)"}));
        async move { request.fetch_json().await }
    });
    let marker = server.ws("running");
    assert!(
        common::eventually(common::SETTLE, || marker.exists()).await,
        "the cell never ran"
    );
    // SAFETY: kill(2) on the kernel process this test started through boxd.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let died = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the running cell answers promptly")
        .unwrap();
    assert_eq!(died["isError"], true);
    assert!(
        item(&died, "stderr").unwrap().contains("kernel died"),
        "{died}"
    );

    let fresh = cell(&server, "print('alive')\nprint('x' in dir())").await;
    let stdout = item(&fresh, "stdout").unwrap();
    assert!(stdout.contains("fresh IPython kernel"), "{stdout}");
    assert!(stdout.ends_with("alive\nFalse\n"), "{stdout}");

    // A kernel that dies between cells is replaced before the next one runs.
    let exit = cell(&server, "import os; os._exit(1)").await;
    assert_eq!(exit["isError"], true);
    let again = cell(&server, "print(2 + 2)").await;
    assert!(item(&again, "stdout").unwrap().ends_with("4\n"));
}

#[tokio::test]
async fn concurrent_cells_each_get_their_own_output() {
    let server = start();
    let calls: Vec<_> = (0..8)
        .map(|id| {
            let request = server.post("/tools/run_ipython_cell").json(&json!({
                "code": format!("import time\nfor _ in range(3):\n    print('cell-{id}')\n    time.sleep(0.01)")
            }));
            tokio::spawn(async move { request.fetch_json().await })
        })
        .collect();
    for (id, call) in calls.into_iter().enumerate() {
        let result = call.await.unwrap();
        let expected = format!("cell-{id}\n").repeat(3);
        assert_eq!(
            item(&result, "stdout"),
            Some(expected.as_str()),
            "cell {id}"
        );
    }
}

#[tokio::test]
async fn bad_input_is_a_client_error() {
    let server = start();
    // Arguments that do not fit the schema are 422; values it allows but the tool cannot take, 400.
    for (body, expected) in [
        (json!({"code": ""}), 400),
        (json!({}), 422),
        (json!({"code": 1}), 422),
        (json!({"code": "1", "timeout": 0}), 400),
    ] {
        let status = server
            .post("/tools/run_ipython_cell")
            .json(&body)
            .fetch_status()
            .await;
        assert_eq!(status, expected, "{body}");
    }
}

#[tokio::test]
async fn missing_ipython_is_a_clear_error() {
    // A Python without site-packages: IPython cannot be imported there.
    let dir = tempfile::tempdir().unwrap();
    let bare_python = dir.path().join("bare-python");
    std::fs::write(&bare_python, "#!/bin/sh\nexec python3 -I -S \"$@\"\n").unwrap();
    std::fs::set_permissions(
        &bare_python,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // The family is `failed` with the reason: cells answer 503 with it (in the body, in the reason
    // phrase the Python client shows, with Retry-After), and /readyz shows it.
    let server = Server::start_with(&["--python", bare_python.to_str().unwrap()]);
    let started = std::time::Instant::now();
    let refused = refused_cell(&server).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(refused.retry_after, "{refused:?}");
    assert!(
        refused.detail.contains("IPython is not installed"),
        "{refused:?}"
    );
    assert!(
        refused.reason_phrase.contains("IPython is not installed"),
        "{refused:?}"
    );
    let readiness: serde_json::Value = server.get("/readyz").fetch_json().await;
    assert_eq!(readiness["ready"], false);
    assert_eq!(readiness["families"]["ipython"]["status"], "failed");
    assert!(
        readiness["families"]["ipython"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("IPython is not installed")
    );
    assert_eq!(readiness["families"]["shell"]["status"], "ready");

    let no_interpreter = Server::start_with(&["--python", "/nonexistent/python"]);
    let refused = refused_cell(&no_interpreter).await;
    assert!(
        refused.detail.contains("/nonexistent/python"),
        "{refused:?}"
    );
}

#[derive(Debug)]
struct Refusal {
    detail: String,
    /// What the Python client shows: `raise_for_status()` words the error with it, not the body.
    reason_phrase: String,
    retry_after: bool,
}

/// Runs a cell that must be refused with 503.
async fn refused_cell(server: &Server) -> Refusal {
    let response = server
        .post("/tools/run_ipython_cell")
        .json(&json!({"code": "1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let reason_phrase = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|reason| String::from_utf8_lossy(reason.as_bytes()).into_owned())
        .unwrap_or_default();
    let retry_after = response.headers().contains_key("retry-after");
    let body: Value = response.json().await.unwrap();
    Refusal {
        detail: body["detail"].as_str().unwrap_or_default().to_owned(),
        reason_phrase,
        retry_after,
    }
}

#[tokio::test]
async fn streaming_cell_reports_output_as_it_is_printed_then_the_same_result() {
    let server = start();
    let code = "import os, sys, time\nprint('first €')\nprint('warn', file=sys.stderr)\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\nprint('last')";
    let response = server
        .post("/tools/run_ipython_cell/stream")
        .json(&json!({"code": code, "timeout": 20}))
        .send()
        .await
        .unwrap();
    let mut events = common::NdjsonEvents::new(response);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = events.next().await.unwrap();
        assert_eq!(event["type"], "output", "{event}");
        seen.push(format!(
            "{}:{}",
            event["stream"].as_str().unwrap(),
            event["data"].as_str().unwrap()
        ));
    }
    seen.sort();
    assert_eq!(seen, vec!["stderr:warn\n", "stdout:first €\n"]);
    std::fs::write(server.ws("go"), "").unwrap();
    let mut result = Value::Null;
    while let Some(event) = events.next().await {
        if event["type"] == "result" {
            result = event["result"].clone();
        }
    }
    assert_eq!(common::item(&result, "stdout"), Some("first €\nlast\n"));
    assert_eq!(common::item(&result, "stderr"), Some("warn\n"));
    // The kernel is in a clean state for the next, blocking, cell.
    assert_eq!(
        common::item(&cell(&server, "print(1+1)").await, "stdout"),
        Some("2\n")
    );
}

/// A streaming caller that stops reading once held the only kernel worker on a blocked progress send:
/// the cell then timed out, the kernel was killed, and everyone's variables went with it. Progress is
/// now lossy: the cell finishes, the kernel and its state stay.
#[tokio::test]
async fn a_stalled_streaming_reader_cannot_get_the_shared_kernel_killed() {
    let server = start();
    assert_eq!(item(&cell(&server, "x = 41").await, "stdout"), Some(""));
    // Tens of thousands of progress events, far more than any buffer, to a reader that never reads.
    let stalled = server
        .post("/tools/run_ipython_cell/stream")
        .header("accept", "application/x-ndjson")
        .json(&json!({"code": "for i in range(60000):\n    print('y' * 200, flush=True)\nx += 1", "timeout": 20}))
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status().as_u16(), 200);
    // Read until the cell is running (its first output), then stop reading.
    let mut stalled = common::NdjsonEvents::new(stalled);
    let first = stalled.next().await.expect("a first event");
    assert_eq!(first["type"], "output", "{first}");
    let started = std::time::Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(60), cell(&server, "print(x + 1)"))
        .await
        .expect("the next cell is answered while the stalled stream stays open");
    assert_eq!(item(&next, "stdout"), Some("43\n"), "{next}");
    assert!(item(&next, "stderr").is_none(), "{next}");
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(stalled);
}

/// The pids of boxd's kernels (children running the helper), read from `/proc` without a request.
pub(crate) fn kernels_of(server: &Server) -> Vec<u32> {
    let boxd = server.pid();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, fields)| fields.split_whitespace().nth(1))
                .and_then(|parent| parent.parse::<u32>().ok());
            let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            parent == Some(boxd) && String::from_utf8_lossy(&command).contains("IPython helper")
        })
        .collect()
}

/// Whether boxd holds no kernel over a short window (30 looks, 10 ms apart), asked without a request.
async fn no_kernel_for_a_while(server: &Server) -> Result<(), Vec<u32>> {
    for _ in 0..30 {
        let kernels = kernels_of(server);
        if !kernels.is_empty() {
            return Err(kernels);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A sandbox nobody contacted holds no kernel; the first request of any kind (here `/livez`, which
/// does not wait for it) starts one, and a cell then answers on it.
#[tokio::test]
async fn no_kernel_until_the_first_request_which_does_not_wait_for_it() {
    let server = start();
    assert_eq!(no_kernel_for_a_while(&server).await, Ok(()));
    let asked = std::time::Instant::now();
    let live = server.anonymous().get(server.url("/livez")).send().await;
    assert_eq!(live.map(|answer| answer.status().as_u16()).ok(), Some(200));
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "/livez waited {:?}",
        asked.elapsed()
    );
    assert!(
        common::eventually(common::SETTLE, || kernels_of(&server).len() == 1).await,
        "no kernel after the first request: {:?}",
        kernels_of(&server)
    );
    let answer = cell(&server, "print(6 * 7)").await;
    assert_eq!(item(&answer, "stdout"), Some("42\n"), "{answer}");
    let readiness: Value = server.get("/readyz").fetch_json().await;
    assert_eq!(readiness["families"]["ipython"]["status"], "ready");
}

/// Before the first request `/readyz` can only be seen by that request: it says `starting` (503), and
/// turns ready once the kernel it started is up.
#[tokio::test]
async fn readiness_asked_first_starts_the_kernel_and_turns_ready() {
    let server = start();
    let first: Value = server.get("/readyz").fetch_json().await;
    assert_eq!(first["ready"], false, "{first}");
    assert_eq!(
        first["families"]["ipython"]["status"], "starting",
        "{first}"
    );
    // The other families may still be starting too: the listener serves before they start.
    let mut status = 0;
    for _ in 0..400 {
        status = server
            .anonymous()
            .get(server.url("/readyz/status"))
            .fetch_status()
            .await;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(kernels_of(&server).len(), 1);
}

/// `--kernel-start eager` keeps the former start: the kernel comes up with boxd, before any request.
#[tokio::test]
async fn the_eager_option_starts_the_kernel_with_boxd() {
    let server = Server::start_with(&["--python", &python(), "--kernel-start", "eager"]);
    assert!(
        common::eventually(common::SETTLE, || kernels_of(&server).len() == 1).await,
        "no kernel without a request under --kernel-start eager"
    );
    let answer = cell(&server, "print(6 * 7)").await;
    assert_eq!(item(&answer, "stdout"), Some("42\n"), "{answer}");
}

/// A kernel past `--kernel-max-rss` is restarted after the cell that grew it (which answers whole),
/// and the next cell's stdout starts with one line saying so and why.
#[tokio::test]
async fn a_kernel_over_its_rss_cap_is_recycled_between_cells() {
    let server = Server::start_with(&["--python", &python(), "--kernel-max-rss", "200"]);
    let first = cell(&server, "import os; kept = 1; print(os.getpid())").await;
    let before: u32 = item(&first, "stdout")
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("the kernel's pid: {first}"));
    // The spare kernel, started after that answer, is the one that takes over.
    let mut spare = None;
    assert!(
        common::eventually(common::SETTLE, || {
            spare = kernels_of(&server).into_iter().find(|pid| *pid != before);
            spare.is_some()
        })
        .await,
        "no spare kernel"
    );
    let grown = cell(&server, "x = bytearray(300 * 2**20); print(len(x))").await;
    assert_eq!(item(&grown, "stdout"), Some("314572800\n"), "{grown}");
    assert_eq!(grown["isError"], false, "{grown}");
    let next = cell(
        &server,
        "import os; print('kept' in globals(), os.getpid())",
    )
    .await;
    let stdout = item(&next, "stdout").unwrap_or_default();
    let (notice, rest) = stdout.split_once('\n').unwrap_or_default();
    assert!(
        notice.starts_with("[boxd: this is a fresh IPython kernel; the previous one was restarted between cells because its memory (RSS ")
            && notice.contains("MiB) went over the cap of 200 MiB (--kernel-max-rss)"),
        "{stdout}"
    );
    let (kept, after) = rest.trim().split_once(' ').unwrap_or_default();
    assert_eq!(kept, "False", "{stdout}");
    assert_eq!(after.parse::<u32>().ok(), spare, "{stdout}");
    assert!(
        common::eventually(common::SETTLE, || !kernels_of(&server).contains(&before)).await,
        "the recycled kernel is still running"
    );
    assert!(kernels_of(&server).len() <= 2, "the kernel and its spare");
    let readiness: Value = server.get("/readyz").fetch_json().await;
    let ipython = &readiness["families"]["ipython"];
    assert_eq!(ipython["status"], "ready", "{readiness}");
    assert_eq!(ipython["restarts"], 1, "{readiness}");
    assert!(
        ipython["last_exit"]
            .as_str()
            .is_some_and(|why| why.contains("over the cap of 200 MiB")),
        "{readiness}"
    );
    // Only that one line: the cell after it starts clean.
    let clean = cell(&server, "print(1)").await;
    assert_eq!(item(&clean, "stdout"), Some("1\n"), "{clean}");
}
