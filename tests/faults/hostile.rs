//! Hostile pages and hung displays (issue 34): a page that logs 8 MiB strings a hundred times and a
//! 48 MiB page snapshotted, under real headless Chromium with the pages served by the test; a real X
//! client holding a server grab on a real Xvfb, and a SIGSTOPped Xvfb. boxd must stay within a memory
//! bound, answer clear errors within a bound, say `degraded` while a display hangs and `ready` once it
//! is back, and run nothing a caller already had an error for.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use super::*;

const MIB: u64 = 1 << 20;

/// Every test here needs these programs; a machine without them fails loudly (`make test` installs them).
fn require(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "{program} is not installed (scripts/setup.sh installs it)"
    );
}

/// tests/browser served over loopback by Python's own http.server (as the pytest suite serves it).
struct Site {
    child: Child,
    base: String,
}

impl Site {
    fn start() -> Site {
        let pages = format!("{}/tests/browser", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("python3")
            .args([
                "-u",
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(&pages)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 serves the pages");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("its first line");
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        let port: u16 = line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Site {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    fn url(&self, page: &str) -> String {
        format!("{}/{page}", self.base)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A field of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Resets `VmHWM` (peak RSS) to the current RSS, so the next reading is the peak from now on.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("clear_refs (root)");
}

/// The text items of a CallToolResult, joined.
fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A tool call: (failed, its text): an `isError` result's text, or an HTTP error's `detail` (a family
/// that is not serving answers 503, which the SDK hands to the agent as an error). Answers within
/// `limit` or the case fails.
async fn call(server: &Server, tool: &str, arguments: Value, limit: Duration) -> (bool, String) {
    let request = server
        .post(&format!("/tools/{tool}"))
        .timeout(limit)
        .json(&arguments)
        .send();
    let response = request
        .await
        .unwrap_or_else(|err| panic!("{tool} did not answer within {limit:?}: {err}"));
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        assert!(
            status.is_server_error() && body["detail"].is_string(),
            "{tool}: {status} {body}"
        );
        return (true, body["detail"].as_str().unwrap_or_default().to_owned());
    }
    (body["isError"] == true, text_of(&body))
}

async fn family_state(server: &Server, family: &str) -> Value {
    let readiness = server.get("/readyz").fetch_json().await;
    readiness["families"][family].clone()
}

/// Waits (bounded) until `family` is `status`; the last state seen.
async fn until_status(server: &Server, family: &str, status: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let state = family_state(server, family).await;
        if state["status"] == status || Instant::now() >= deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn a_hostile_page_leaves_boxd_within_its_memory_bound_and_the_browser_answering() {
    require_root();
    require("chromium");
    let site = Site::start();
    let server = Server::start_with(&["--tools", "browser", "--browser-headless"]);
    let pid = server.pid();
    let slow = Duration::from_secs(120);
    let (failed, page) = call(
        &server,
        "browser_navigate",
        json!({"url": site.url("page2.html")}),
        slow,
    )
    .await;
    assert!(!failed && page.contains("Page Two"), "{page}");
    let before = status_bytes(pid, "VmRSS");
    reset_peak(pid);

    // 25 console messages of 8 MiB and an 8 MiB exception: 200 MiB through the protocol pipe (more
    // only takes longer: 100 took 135 s here, with the same peak).
    let started = Instant::now();
    let (navigate_failed, page) = call(
        &server,
        "browser_navigate",
        json!({"url": site.url(&format!("big-logs.html?bytes={}&count=25", 8 * MIB))}),
        slow,
    )
    .await;
    // Chromium may still be busy logging when the answer's snapshot is taken: then the answer is an
    // error that says so, within the snapshot's own bound.
    assert!(
        !navigate_failed || page.contains("did not answer"),
        "{}",
        &page[..page.len().min(2000)]
    );
    let navigated_in = started.elapsed();
    let mut console = String::new();
    let deadline = Instant::now() + slow;
    while !console.contains("done logging") && Instant::now() < deadline {
        let (failed, text) = call(&server, "browser_console_messages", json!({}), slow).await;
        assert!(!failed, "{text}");
        console = text;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logged_in = started.elapsed();
    assert!(
        console.contains("done logging"),
        "the page never finished logging"
    );
    assert!(
        console.len() as u64 <= MIB + 64 * 1024,
        "the console answer holds {} bytes",
        console.len()
    );
    assert!(console.contains("[cut: "), "cut messages say so");
    let logs_peak = status_bytes(pid, "VmHWM").saturating_sub(before);
    eprintln!(
        "(logs done: peak +{} MiB in {logged_in:?})",
        logs_peak / MIB
    );

    // A 48 MiB page: too large to snapshot (or too slow for Chromium to describe within the snapshot's
    // bound), a clear answer either way; the browser and both tabs live on.
    reset_peak(pid);
    let started = Instant::now();
    let (_, huge) = call(
        &server,
        "browser_tab_new",
        json!({"url": site.url("huge.html?mib=48")}),
        slow,
    )
    .await;
    let snapshot_took = started.elapsed();
    let clear = |answer: &str| {
        (answer.contains("too large to snapshot") || answer.contains("did not answer"))
            && !answer.contains("The browser had exited")
    };
    assert!(clear(&huge), "{}", &huge[..huge.len().min(2000)]);
    let (_, again) = call(&server, "browser_snapshot", json!({}), slow).await;
    assert!(clear(&again), "{}", &again[..again.len().min(2000)]);
    let (failed, tabs) = call(&server, "browser_tab_list", json!({}), slow).await;
    assert!(
        !failed && tabs.contains("[Big logs]") && tabs.contains("[Huge]"),
        "{tabs}"
    );
    let (failed, first) = call(&server, "browser_tab_select", json!({"index": 1}), slow).await;
    assert!(
        !failed && first.contains("- Page Title: Big logs"),
        "{}",
        &first[..first.len().min(2000)]
    );
    let snapshot_peak = status_bytes(pid, "VmHWM").saturating_sub(before);

    assert_eq!(family_state(&server, "browser").await["status"], "ready");
    assert_healthy(&server).await;
    eprintln!(
        "figure: hostile page: navigate answered in {navigated_in:?} ({}), 25 x 8 MiB logged in \
         {logged_in:?}, console answer {} bytes, boxd peak \
         +{} MiB; 48 MiB page: refused in {snapshot_took:?} ({}), peak +{} MiB over {} MiB",
        if navigate_failed {
            "a clear timeout"
        } else {
            "ok"
        },
        console.len(),
        logs_peak / MIB,
        huge.lines().find(|line| clear(line)).unwrap_or_default(),
        snapshot_peak / MIB,
        before / MIB
    );
    // Before the bounds: 1.6 GB held after 200 such messages; a broken pipe and every tab lost.
    assert!(
        logs_peak < 256 * MIB,
        "logging grew boxd by {logs_peak} bytes"
    );
    assert!(
        snapshot_peak < 512 * MIB,
        "the snapshot grew boxd by {snapshot_peak} bytes"
    );
}

/// Xvfb on a free display, up once its socket exists.
struct Display {
    xvfb: Child,
    name: String,
}

impl Display {
    fn start() -> Display {
        let number = (150..250)
            .find(|number| {
                !Path::new(&format!("/tmp/.X11-unix/X{number}")).exists()
                    && !Path::new(&format!("/tmp/.X{number}-lock")).exists()
            })
            .expect("a free display number");
        let xvfb = Command::new("Xvfb")
            .arg(format!(":{number}"))
            // As the images run it: without -noreset the server resets (the pointer back to the
            // middle) whenever its last client, here boxd, reconnects.
            .args([
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
                "-noreset",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb starts");
        let socket = format!("/tmp/.X11-unix/X{number}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !Path::new(&socket).exists() {
            assert!(Instant::now() < deadline, "Xvfb never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Display {
            xvfb,
            name: format!(":{number}"),
        }
    }

    fn signal(&self, signal: i32) {
        kill(self.xvfb.id() as i32, signal);
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.xvfb.kill();
        let _ = self.xvfb.wait();
    }
}

/// tests/computer/grab.py: a real X client holding a server grab until told to release it (or 60 s).
struct Grab {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Grab {
    fn hold(display: &Display) -> Grab {
        let script = format!("{}/tests/computer/grab.py", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("/usr/bin/python3")
            .args([script.as_str(), "--hold", "60"])
            .env("DISPLAY", &display.name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("grab.py starts");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("grab.py answers");
        assert_eq!(line.trim(), "grabbed");
        Grab {
            child,
            stdin,
            stdout,
        }
    }

    fn release(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        assert_eq!(line.trim(), "released");
    }
}

impl Drop for Grab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bound on one X round trip is 5 s (`computer`'s limits); an answer within this is "within it".
const HUNG_DISPLAY_ANSWER: Duration = Duration::from_secs(12);

async fn computer(server: &Server, arguments: Value) -> (bool, String, Duration) {
    let started = Instant::now();
    let (failed, text) = call(server, "computer", arguments, Duration::from_secs(60)).await;
    (failed, text, started.elapsed())
}

/// Runs the hung-display case with `hang` making the display stop answering and `resume` undoing it.
async fn hung_display_case(
    name: &str,
    hang: impl FnOnce(&Display) -> Option<Grab>,
    resume: impl FnOnce(&Display, Option<Grab>),
) {
    require_root();
    require("Xvfb");
    let display = Display::start();
    let server = Server::start_with(&["--tools", "computer", "--display", &display.name]);
    let pid = server.pid();
    let (failed, moved, _) = computer(
        &server,
        json!({"action": "mouse_move", "coordinate": [100, 100]}),
    )
    .await;
    assert!(!failed && moved == "Moved cursor to: (100, 100)", "{moved}");
    assert_eq!(
        until_status(&server, "computer", "ready", Duration::from_secs(10)).await["status"],
        "ready"
    );
    let before = status_bytes(pid, "VmRSS");
    reset_peak(pid);

    let held = hang(&display);
    let (failed, stuck, first_took) = computer(
        &server,
        json!({"action": "mouse_move", "coordinate": [700, 500]}),
    )
    .await;
    assert!(failed && stuck.contains("not answer"), "{stuck}");
    assert!(
        first_took < HUNG_DISPLAY_ANSWER,
        "answered after {first_took:?}"
    );
    let state = until_status(&server, "computer", "degraded", Duration::from_secs(5)).await;
    assert_eq!(state["status"], "degraded", "{state}");
    assert!(
        state["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains(&display.name)),
        "{state}"
    );
    // While it hangs, more calls answer at once and queue nothing.
    let (failed, _, later_took) = computer(
        &server,
        json!({"action": "left_click", "coordinate": [800, 600]}),
    )
    .await;
    assert!(
        failed && later_took < Duration::from_secs(3),
        "{later_took:?}"
    );
    assert_healthy(&server).await;

    let resumed = Instant::now();
    resume(&display, held);
    let state = until_status(&server, "computer", "ready", Duration::from_secs(15)).await;
    assert_eq!(state["status"], "ready", "{state}");
    let recovered_in = resumed.elapsed();
    // Neither the move nor the click ran when the display came back: their callers had an error.
    let (failed, position, _) = computer(&server, json!({"action": "get_cursor_position"})).await;
    assert!(!failed, "{position}");
    let position: Value = serde_json::from_str(&position).unwrap_or(Value::Null);
    assert_eq!(position, json!({"x": 100, "y": 100}));
    let (failed, moved, _) = computer(
        &server,
        json!({"action": "mouse_move", "coordinate": [300, 200]}),
    )
    .await;
    assert!(!failed && moved == "Moved cursor to: (300, 200)", "{moved}");
    let peak = status_bytes(pid, "VmHWM").saturating_sub(before);
    eprintln!(
        "figure: {name}: first call answered in {first_took:?}, the next in {later_took:?}; degraded, \
         ready {recovered_in:?} after the display resumed; boxd peak +{} KiB; no action replayed",
        peak / 1024
    );
    assert!(
        peak < 64 * MIB,
        "boxd grew by {peak} bytes while the display hung"
    );
}

#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn a_display_held_by_a_server_grab_degrades_answers_and_recovers_without_replay() {
    hung_display_case(
        "server grab",
        |display| Some(Grab::hold(display)),
        |_, grab| {
            if let Some(mut grab) = grab {
                grab.release();
            }
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn a_stopped_x_server_degrades_answers_and_recovers_without_replay() {
    hung_display_case(
        "SIGSTOPped Xvfb",
        |display| {
            display.signal(libc::SIGSTOP);
            None
        },
        |display, _| display.signal(libc::SIGCONT),
    )
    .await;
}
