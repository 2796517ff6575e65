//! Output bounds (issue 15, finding 6): a cell or a command that prints far more than the bound ends with
//! the head, the tail and a marker saying how much was dropped, and neither boxd's memory nor the disk
//! grows with what was printed.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Fetch, Server, item, python};
use serde_json::{Value, json};

/// The bound these tests give boxd (`--max-output`), small so that "well over" stays quick.
const BOUND: u64 = 64 * 1024;
/// What a cell prints: 1024 times the bound.
const PRINTED: u64 = 64 * 1024 * 1024;

fn start() -> Server {
    let python = python();
    assert!(
        Path::new(&python).exists(),
        "{python} is missing: run `make setup` (or set BOXD_TEST_PYTHON to a Python with IPython)"
    );
    Server::start_with(&["--python", &python, "--max-output", &BOUND.to_string()])
}

async fn cell(server: &Server, code: &str) -> Value {
    server
        .post("/tools/run_ipython_cell")
        .json(&json!({ "code": code, "timeout": 120 }))
        .fetch_json()
        .await
}

/// The pid a cell reports for `expression` (e.g. `os.getpid()`).
async fn cell_pid(server: &Server, expression: &str) -> i32 {
    let answer = cell(server, &format!("import os\nprint({expression})")).await;
    item(&answer, "stdout")
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| panic!("a pid from {answer}"))
}

/// Bytes on disk behind `pid`'s stdout and stderr: a regular file there is a capture file (even unlinked,
/// which `du` would not see); a pipe counts as nothing.
fn captured_on_disk(pid: i32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    [1, 2]
        .iter()
        .filter_map(|fd| std::fs::metadata(format!("/proc/{pid}/fd/{fd}")).ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.blocks() * 512)
        .sum()
}

/// Samples `probe` every 10 ms on a thread until the returned guard is stopped; yields the maximum seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(probe: impl Fn() -> u64 + Send + 'static) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
            move || {
                // 120 s at most, whatever happens to the caller.
                for _ in 0..12_000 {
                    peak.fetch_max(probe(), Ordering::Relaxed);
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        });
        Sampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

fn assert_truncated(text: &str, printed: u64) {
    let kept = BOUND;
    let omitted = printed - kept;
    assert!(
        text.contains(&format!(
            "[boxd: output truncated, {omitted} bytes omitted]"
        )),
        "no marker with {omitted} omitted in {}",
        &text[..text.len().min(300)]
    );
    assert!(
        (text.len() as u64) < BOUND + 200,
        "{} bytes kept",
        text.len()
    );
}

#[tokio::test]
async fn a_cell_printing_far_past_the_bound_keeps_head_and_tail_and_writes_nothing_to_disk() {
    let server = start();
    let kernel = cell_pid(&server, "os.getpid()").await;
    let sampler = Sampler::start(move || captured_on_disk(kernel));
    let code = format!(
        "import sys\nfor _ in range({}):\n    sys.stdout.write('x' * 65535 + '\\n')\nprint('the end', end='')",
        PRINTED / 65536
    );
    let answer = cell(&server, &code).await;
    let peak = sampler.finish();
    let stdout = item(&answer, "stdout").expect("stdout");
    assert!(stdout.starts_with("xxx"), "{}", &stdout[..100]);
    assert!(stdout.ends_with("the end"));
    assert_truncated(stdout, PRINTED + 7);
    assert!(
        peak <= BOUND,
        "the kernel's capture held {peak} bytes on disk; the bound is {BOUND}"
    );

    // A subprocess writing straight to the cell's fd 1 is bounded the same way.
    let answer = cell(&server, "!head -c 8388608 /dev/zero | tr '\\0' y").await;
    assert_truncated(item(&answer, "stdout").unwrap(), 8 * 1024 * 1024);
    assert_eq!(
        item(&cell(&server, "print(6 * 7)").await, "stdout"),
        Some("42\n")
    );
}

#[tokio::test]
async fn a_streaming_cell_streams_at_most_the_bound_per_stream_then_says_so() {
    let server = start();
    let code = format!(
        "import sys\nfor _ in range({}):\n    sys.stdout.write('x' * 1023 + '\\n')",
        PRINTED / 1024
    );
    let events = server
        .post("/tools/run_ipython_cell/stream")
        .json(&json!({"code": code, "timeout": 120}))
        .fetch_ndjson()
        .await;
    let streamed: usize = events
        .iter()
        .filter(|event| event["type"] == "output")
        .map(|event| event["data"].as_str().unwrap_or_default().len())
        .sum();
    assert!(
        (streamed as u64) < BOUND + 400,
        "{streamed} bytes streamed for a bound of {BOUND}"
    );
    assert!(
        events.iter().any(|event| event["data"]
            .as_str()
            .is_some_and(|data| data.contains("[boxd: live output stopped"))),
        "no marker in the stream"
    );
    let result = &events.last().expect("a result")["result"];
    assert_truncated(item(result, "stdout").unwrap(), PRINTED);
}

/// A background process a cell started keeps its stdout after the cell ends: it once wrote into an
/// unlinked capture file for ever, filling the disk unseen. Now what it prints is read and dropped.
#[tokio::test]
async fn a_background_writer_outliving_its_cell_fills_nothing() {
    let server = start();
    let started = cell(
        &server,
        "import subprocess, sys\nbg = subprocess.Popen(['sh', '-c', 'while :; do echo background; done'])\nprint(bg.pid, file=sys.stderr)",
    )
    .await;
    let writer: i32 = item(&started, "stderr").unwrap().trim().parse().unwrap();
    let sampler = Sampler::start(move || captured_on_disk(writer));
    // The writer keeps going across several cells, none of which sees its output.
    for n in 0..5 {
        let answer = cell(
            &server,
            &format!("import time; time.sleep(0.2); print({n})"),
        )
        .await;
        assert_eq!(item(&answer, "stdout"), Some(format!("{n}\n").as_str()));
    }
    let peak = sampler.finish();
    assert!(
        std::fs::metadata(format!("/proc/{writer}")).is_ok(),
        "the background writer still runs (its output is drained, not refused)"
    );
    cell(&server, "bg.kill(); bg.wait()").await;
    assert!(
        peak <= BOUND,
        "the background writer's stdout held {peak} bytes on disk"
    );
}

#[tokio::test]
async fn images_past_their_bound_are_dropped_with_a_note() {
    let server = start();
    // 40 images of 1 MB each: 40 MB of payload, past the 16 MiB bound on a cell's images.
    let answer = cell(
        &server,
        "from IPython.display import display, Image\nfor _ in range(40):\n    display(Image(data=b'\\x89PNG\\r\\n\\x1a\\n' + bytes(1_000_000), format='png'))",
    )
    .await;
    let images: Vec<&Value> = answer["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "image")
        .collect();
    let bytes: usize = images
        .iter()
        .map(|image| image["data"].as_str().unwrap().len())
        .sum();
    assert!(
        !images.is_empty() && images.len() < 40,
        "{} images",
        images.len()
    );
    assert!(bytes <= 16 * 1024 * 1024, "{bytes} bytes of images");
    let stdout = item(&answer, "stdout").unwrap();
    assert!(
        stdout.contains(&format!("[boxd: {} images dropped", 40 - images.len())),
        "{stdout}"
    );
}

fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// A command printing 1 GiB: boxd keeps only the bound per stream, so its memory does not follow.
#[tokio::test]
async fn a_command_printing_a_gibibyte_leaves_boxd_small() {
    let server = Server::start_with(&["--max-output", &BOUND.to_string()]);
    let pid = server.pid();
    assert_eq!(item(&server.shell("true").await, "returncode"), Some("0"));
    let before = rss_bytes(pid);
    let sampler = Sampler::start(move || rss_bytes(pid));
    let answer = server
        .post("/tools/run_shell_command")
        .json(&json!({"command": "head -c 1073741824 /dev/zero", "timeout": 300}))
        .fetch_json()
        .await;
    let peak = sampler.finish();
    assert_eq!(item(&answer, "returncode"), Some("0"), "{answer}");
    let stdout = item(&answer, "stdout").unwrap();
    assert_truncated(stdout, 1024 * 1024 * 1024);
    eprintln!("boxd RSS: {before} before, {peak} at peak");
    assert!(
        peak < before + 32 * 1024 * 1024,
        "boxd RSS went from {before} to {peak}"
    );
}
