//! Confinement under attack: a process inside the sandbox swaps a directory the check walked through
//! for a symlink leading out, over and over, while the workspace routes and the filesystem tools use
//! paths through it. Checking a path and then acting on it by name would follow the swapped-in link;
//! acting on the descriptors the check resolved never does. Nothing outside may be read, listed,
//! written, created, moved or deleted, whatever the interleaving.

use crate::common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Server, encode};
use serde_json::{Value, json};

/// How long the swapping goes on, and its bound in swaps: either ends the test's attack.
const ATTACK_FOR: Duration = Duration::from_secs(3);
const MAX_SWAPS: u64 = 2_000_000;
/// Markers only the outside files hold: no answer may ever contain them.
const OUTSIDE_SECRET: &str = "OUTSIDE-SECRET-CONTENT";
const OUTSIDE_ONLY: &str = "outside-only-name";

/// Swaps two names atomically (`RENAME_EXCHANGE`), or with two renames where the filesystem cannot.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let a_c = CString::new(a.as_os_str().as_bytes())?;
    let b_c = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let result = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a_c.as_ptr(),
            libc::AT_FDCWD,
            b_c.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if result == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EINVAL) {
        return Err(err);
    }
    let parked = a.with_extension("parked");
    std::fs::rename(a, &parked)?;
    std::fs::rename(b, a)?;
    std::fs::rename(&parked, b)
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

struct Attack {
    outside: PathBuf,
    violations: Vec<String>,
    inside_reads: usize,
}

impl Attack {
    fn check_answer(&mut self, what: &str, text: &str) {
        if text.contains(OUTSIDE_SECRET) || text.contains(OUTSIDE_ONLY) {
            self.violations
                .push(format!("{what} answered with outside content: {text:.300}"));
        }
        if text.contains("inside-secret") {
            self.inside_reads += 1;
        }
    }

    /// Nothing outside appeared, disappeared or changed.
    fn check_outside(&mut self, after: &str) {
        let found = names(&self.outside);
        if found != ["outside-only-name", "secret.txt", "victim.txt"] {
            self.violations
                .push(format!("after {after}: outside holds {found:?}"));
        }
        let secret = std::fs::read_to_string(self.outside.join("secret.txt")).unwrap_or_default();
        if secret != OUTSIDE_SECRET {
            self.violations
                .push(format!("after {after}: outside secret is now {secret:?}"));
        }
    }
}

async fn text_of(response: reqwest::Response) -> String {
    response.text().await.unwrap_or_default()
}

async fn tool(server: &Server, name: &str, arguments: Value) -> String {
    let answer: Value = server
        .post(&format!("/tools/{name}"))
        .json(&arguments)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .unwrap_or(Value::Null);
    answer.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directory_swapped_for_a_link_out_never_leads_outside() {
    let server = Server::start_with(&["--tools", "filesystem,workspace"]);
    let outside = server.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(outside.join(OUTSIDE_ONLY)).unwrap();
    std::fs::write(outside.join("secret.txt"), OUTSIDE_SECRET).unwrap();
    std::fs::write(outside.join("victim.txt"), OUTSIDE_SECRET).unwrap();
    std::fs::create_dir_all(server.ws("a/inside-dir")).unwrap();
    std::fs::write(server.ws("a/secret.txt"), "inside-secret\n").unwrap();
    std::fs::write(server.ws("mine.txt"), "mine").unwrap();
    symlink(&outside, server.ws("swap")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (a, swap) = (server.ws("a"), server.ws("swap"));
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        std::thread::spawn(move || {
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed)
                && started.elapsed() < ATTACK_FOR
                && swaps.load(Ordering::Relaxed) < MAX_SWAPS
            {
                exchange(&a, &swap).expect("swap");
                swaps.fetch_add(1, Ordering::Relaxed);
            }
            // Leave `a` the real directory, for the checks after the attack.
            if a.symlink_metadata().is_ok_and(|meta| meta.is_symlink()) {
                exchange(&a, &swap).expect("swap back");
            }
        })
    };

    let mut attack = Attack {
        outside: outside.clone(),
        violations: Vec::new(),
        inside_reads: 0,
    };
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < ATTACK_FOR && attack.violations.is_empty() {
        rounds += 1;
        let read = text_of(
            server
                .get("/workspace/file?path=a/secret.txt")
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("GET /workspace/file a/secret.txt", &read);
        let listed = text_of(
            server
                .get("/workspace/list?path=a&depth=2")
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("GET /workspace/list a", &listed);
        let written = text_of(
            server
                .put("/workspace/file?path=a/written.txt")
                .body("written")
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("PUT /workspace/file a/written.txt", &written);
        let made = text_of(
            server
                .post("/workspace/mkdir")
                .json(&json!({"path": "a/made/deeper"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("POST /workspace/mkdir a/made/deeper", &made);
        let deleted = text_of(
            server
                .delete(&format!("/workspace/entry?path={}", encode("a/victim.txt")))
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("DELETE /workspace/entry a/victim.txt", &deleted);
        let moved = text_of(
            server
                .post("/workspace/move")
                .json(&json!({"source": "a/victim.txt", "destination": "stolen.txt"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("POST /workspace/move a/victim.txt", &moved);
        let moved_in = text_of(
            server
                .post("/workspace/move")
                .json(&json!({"source": "mine.txt", "destination": "a/mine.txt"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        attack.check_answer("POST /workspace/move mine.txt a/mine.txt", &moved_in);
        // Put it back for the next round, wherever it went (inside, through either form of `a`).
        let _ = server
            .post("/workspace/move")
            .json(&json!({"source": "a/mine.txt", "destination": "mine.txt"}))
            .send()
            .await;

        for (name, arguments) in [
            ("read_file", json!({"path": "a/secret.txt"})),
            ("read_multiple_files", json!({"paths": ["a/secret.txt"]})),
            ("get_file_info", json!({"path": "a/secret.txt"})),
            ("list_directory", json!({"path": "a"})),
            ("directory_tree", json!({"path": "a"})),
            ("search_files", json!({"path": "a", "pattern": "name"})),
            (
                "write_file",
                json!({"path": "a/tool-written.txt", "content": "tool"}),
            ),
            (
                "edit_file",
                // Matches only the outside file's text, and echoes no marker when it does not match.
                json!({"path": "a/secret.txt", "edits": [{"oldText": "SECRET-CONTENT", "newText": "edited"}]}),
            ),
            ("create_directory", json!({"path": "a/tool-made/deeper"})),
            (
                "move_file",
                json!({"source": "a/victim.txt", "destination": "tool-stolen.txt"}),
            ),
        ] {
            let answer = tool(&server, name, arguments).await;
            attack.check_answer(name, &answer);
        }
        attack.check_outside(&format!("round {rounds}"));
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().expect("the swapper ends");
    attack.check_outside("the attack");
    for stolen in ["stolen.txt", "tool-stolen.txt"] {
        if server.ws(stolen).exists() {
            attack.violations.push(format!("{stolen} was moved in"));
        }
    }
    eprintln!(
        "{rounds} rounds, {} swaps, {} reads of the inside file",
        swaps.load(Ordering::Relaxed),
        attack.inside_reads
    );
    assert!(
        attack.violations.is_empty(),
        "after {rounds} rounds and {} swaps:\n{}",
        swaps.load(Ordering::Relaxed),
        attack.violations.join("\n")
    );
    // The attack ran, and confined work kept getting through it.
    assert!(
        swaps.load(Ordering::Relaxed) > 100,
        "the swapper barely ran"
    );
    assert!(
        attack.inside_reads > 0,
        "no read of the inside file got through in {rounds} rounds"
    );
}
