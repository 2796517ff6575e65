//! `make faults`: boxd under faults an unlucky operator meets (issue 15), and hostile pages and hung
//! displays (issue 34, `hostile.rs`). Not part of `make test`: some cases mount a tmpfs (root), and some
//! wait out server-side timeouts. Every test is `#[ignore]` and runs with `cargo test --release --test
//! integration faults:: -- --ignored --test-threads=1` (`make faults`). Each case asserts what the user
//! sees, that nothing is left running, and that `/healthz` answers afterwards; each prints a `figure:`
//! line.

use crate::common;
mod hostile;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Fetch, Server, item, python};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------------
// Helpers (tests/common is shared; what only this suite needs lives here).

/// `/healthz` answers 200 within 5 s on a fresh connection.
async fn assert_healthy(server: &Server) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let status = client
        .get(server.url("/healthz"))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .map(|response| response.status().as_u16());
    assert!(
        matches!(status, Ok(200)),
        "/healthz did not answer 200: {status:?}"
    );
}

/// After a failed commit: the repository is intact for git, and boxd commits again once space is back.
async fn fsck_passes_and_the_next_commit_works(server: &Server, workspace: &Path) {
    let fsck = Command::new("git")
        .args(["fsck", "--no-progress"])
        .current_dir(workspace)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let second = server
        .post("/watcher/commit_changes")
        .json(&json!({"commit_message": "second"}))
        .fetch_json()
        .await;
    assert!(second["commit"].is_string(), "{second}");
}

/// Polls `check` every 50 ms for at most `limit`; whether it became true.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (state, ppid, comm) of a process from /proc, `None` once it is gone.
fn stat(pid: i32) -> Option<(char, i32, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let mut rest = text.get(close + 2..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid, comm))
}

fn alive(pid: i32) -> bool {
    matches!(stat(pid), Some((state, _, _)) if state != 'Z' && state != 'X')
}

/// Every live descendant of `root` (children, grandchildren...), with its command name.
fn descendants(root: i32) -> Vec<(i32, String)> {
    let mut children: HashMap<i32, Vec<(i32, String)>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        if let Some((state, ppid, comm)) = stat(pid)
            && state != 'Z'
        {
            children.entry(ppid).or_default().push((pid, comm));
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for (pid, comm) in children.get(&parent).cloned().unwrap_or_default() {
            queue.push(pid);
            found.push((pid, comm));
        }
    }
    found
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) on a process this test started (through boxd).
    unsafe {
        libc::kill(pid, signal);
    }
}

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this case mounts a tmpfs: run `make faults` as root"
    );
}

/// A tmpfs of `size` mounted on a fresh directory; unmounted on drop (lazily if still busy).
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(options: &str) -> Tmpfs {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "boxd-faults"])
            .arg(&path)
            .status()
            .expect("mount runs");
        assert!(status.success(), "mount -t tmpfs -o {options} failed");
        Tmpfs { path, _dir: dir }
    }

    fn free_bytes(&self) -> u64 {
        let stat = nix_statvfs(&self.path);
        stat.0 * stat.1
    }
}

/// (fragment size, available blocks) of the filesystem holding `path`.
fn nix_statvfs(path: &Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs(3) into a zeroed struct with a valid NUL-terminated path.
    unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c_path.as_ptr(), &mut stat), 0);
        (stat.f_frsize, stat.f_bavail)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|status| status.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

fn kernel_server(workspace: &Path, extra: &[&str], tmpdir: Option<&Path>) -> Server {
    let python = python();
    let mut args = vec!["--python", python.as_str()];
    args.extend_from_slice(extra);
    let tmpdir = tmpdir.map(Path::to_path_buf);
    Server::start_on(workspace, &args, move |command| {
        if let Some(tmpdir) = tmpdir {
            command.env("TMPDIR", tmpdir);
        }
    })
}

async fn cell(server: &Server, code: &str) -> Value {
    server
        .post("/tools/run_ipython_cell")
        .json(&json!({ "code": code, "timeout": 120 }))
        .fetch_json()
        .await
}

async fn kernel_pid(server: &Server) -> i32 {
    let answer = cell(server, "import os\nprint(os.getpid())").await;
    item(&answer, "stdout")
        .and_then(|text| text.lines().last())
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("a pid in {answer}"))
}

fn workspace_in(root: &Path) -> PathBuf {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    workspace
}

fn slow_peer() -> Value {
    let script = format!("{}/tests/faults/slow_peer.py", env!("CARGO_MANIFEST_DIR"));
    json!({"command": python(), "args": [script]})
}

async fn add_slow_peer(server: &Server) {
    let response = server
        .post("/mcp/add_servers")
        .json(&json!({"server_configs": {"mcpServers": {"slow": slow_peer()}}, "overwrite": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
}

async fn mcp_call(server: &Server, tool: &str, arguments: Value) -> (u16, Value) {
    let response = server
        .post("/mcp/call_tool")
        .json(&json!({"tool_name": tool, "arguments": arguments}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn mcp_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------------
// kill -9 of the kernel

#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn kernel_killed_mid_cell_and_between_cells() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = workspace_in(&dir.path().canonicalize().unwrap());
    let server = kernel_server(&workspace, &[], None);
    cell(&server, "x = 1").await;
    let pid = kernel_pid(&server).await;

    // Mid-cell, with a subprocess of the cell in the kernel's group.
    let running = tokio::spawn({
        let request = server.post("/tools/run_ipython_cell").json(&json!({
            "code": "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)",
            "timeout": 600,
        }));
        async move { request.fetch_json().await }
    });
    assert!(
        eventually(Duration::from_secs(20), || common::pgrep_count(
            "-g", pid as u64
        ) >= 2)
        .await,
        "the cell's subprocess did not start"
    );
    let killed_at = Instant::now();
    kill(pid, libc::SIGKILL);
    let died = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the running cell answers within 10 s of the kill")
        .unwrap();
    let answered = killed_at.elapsed();
    assert_eq!(died["isError"], true);
    let stderr = item(&died, "stderr").unwrap_or_default();
    assert!(
        stderr.contains("kernel died") && stderr.contains("state is lost"),
        "{died}"
    );
    assert!(
        eventually(Duration::from_secs(5), || common::pgrep_count(
            "-g", pid as u64
        ) == 0)
        .await,
        "the dead kernel's process group (its cell's `sleep`) is still running"
    );
    let fresh = cell(&server, "print('x' in dir())").await;
    let stdout = item(&fresh, "stdout").unwrap();
    assert!(
        stdout.contains("fresh IPython kernel") && stdout.ends_with("False\n"),
        "{stdout}"
    );

    // Between cells.
    let pid = kernel_pid(&server).await;
    kill(pid, libc::SIGKILL);
    assert!(eventually(Duration::from_secs(5), || !alive(pid)).await);
    let next = cell(&server, "print(6 * 7)").await;
    let stdout = item(&next, "stdout").unwrap();
    assert!(
        stdout.contains("fresh IPython kernel") && stdout.ends_with("42\n"),
        "{stdout}"
    );
    assert_eq!(next["isError"], false);
    assert_healthy(&server).await;
    eprintln!("figure: kernel kill -9 mid-cell answered in {answered:?}");
}

// ---------------------------------------------------------------------------------------------------
// kill -9 of a hosted MCP server mid-call

#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn hosted_mcp_server_killed_mid_call() {
    let server = Server::start();
    let markers = tempfile::tempdir().unwrap();
    add_slow_peer(&server).await;
    let (status, whoami) = mcp_call(&server, "whoami", json!({})).await;
    assert_eq!(status, 200, "{whoami}");
    let pid: i32 = mcp_text(&whoami).parse().unwrap();

    let marker = markers.path().join("blocking");
    let running = tokio::spawn({
        let request = server.post("/mcp/call_tool").json(&json!({
            "tool_name": "block",
            "arguments": {"marker": marker, "seconds": 300},
        }));
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    });
    assert!(
        eventually(Duration::from_secs(20), || marker.exists()).await,
        "the blocking call did not start"
    );
    let killed_at = Instant::now();
    kill(pid, libc::SIGKILL);
    let (status, body) = tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .expect("the call in flight answers within 15 s of the kill")
        .unwrap();
    let answered = killed_at.elapsed();
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("slow") && body.contains("block"),
        "the error names the server and the tool: {body}"
    );
    assert!(eventually(Duration::from_secs(5), || !alive(pid)).await);

    // The next call restarts the server.
    let (status, whoami) = mcp_call(&server, "whoami", json!({})).await;
    assert_eq!(status, 200, "{whoami}");
    let fresh: i32 = mcp_text(&whoami).parse().unwrap();
    assert_ne!(fresh, pid);
    let peers: Vec<_> = descendants(server.pid() as i32)
        .into_iter()
        .filter(|(pid, _)| alive(*pid))
        .collect();
    assert!(
        peers.iter().all(|(other, _)| *other != pid),
        "the killed peer is still there: {peers:?}"
    );
    assert_healthy(&server).await;
    eprintln!(
        "figure: MCP peer kill -9 mid-call answered 502 in {answered:?}; next call restarted it"
    );
}

// ---------------------------------------------------------------------------------------------------
// A full disk

const SMALL_DISK: &str = "size=8m,mode=0755";

#[tokio::test]
#[ignore = "fault suite: make faults (root: mounts a tmpfs)"]
async fn full_disk_during_an_upload_answers_507_and_keeps_the_old_file() {
    let disk = Tmpfs::mount(SMALL_DISK);
    let workspace = workspace_in(&disk.path);
    let server = Server::start_on(&workspace, &[], |_| {});
    let put = |body: Vec<u8>| {
        server
            .put("/workspace/file?path=notes.txt")
            .body(body)
            .send()
    };
    assert_eq!(
        put(b"the old content".to_vec()).await.unwrap().status(),
        200
    );
    let free_before = disk.free_bytes();

    let response = put(vec![b'x'; 16 * 1024 * 1024]).await.unwrap();
    let status = response.status().as_u16();
    // The rest of the body was not read: the client is told not to reuse the connection (reusing it
    // failed the next request with "connection closed before message completed").
    let connection = response.headers().get(reqwest::header::CONNECTION).cloned();
    let body = response.text().await.unwrap();
    assert_eq!(status, 507, "{body}");
    assert_eq!(
        connection.as_ref().and_then(|v| v.to_str().ok()),
        Some("close")
    );
    assert!(body.to_lowercase().contains("space"), "{body}");
    let kept = server
        .get("/workspace/file?path=notes.txt")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(kept, "the old content");
    let listed = server.get("/workspace/list?path=.").fetch_json().await;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["name"].as_str())
        .collect();
    assert_eq!(names, ["notes.txt"], "a staging file was left behind");
    let leftovers = std::fs::read_dir(&disk.path)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| name != "workspace")
        .count();
    assert_eq!(leftovers, 0, "files left next to the workspace");
    assert!(
        disk.free_bytes() + 64 * 1024 >= free_before,
        "the refused upload still holds space: {} free, {free_before} before",
        disk.free_bytes()
    );

    // A multipart batch upload past the free space is refused the same way.
    let part = reqwest::multipart::Part::bytes(vec![b'y'; 16 * 1024 * 1024]).file_name("big.bin");
    let form = reqwest::multipart::Form::new().part("files", part);
    let batch = server
        .post("/workspace/files:batch")
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(batch.status(), 507, "{:?}", batch.text().await);
    assert!(!server.ws("big.bin").exists());

    // Space is back: uploads work.
    assert_eq!(put(b"new".to_vec()).await.unwrap().status(), 200);
    assert_healthy(&server).await;
    eprintln!("figure: full-disk upload: 507 `{body}`");
}

fn fill_disk(disk: &Tmpfs, leave: u64) -> PathBuf {
    let filler = disk.path.join("filler");
    let size = disk.free_bytes().saturating_sub(leave);
    std::fs::write(&filler, vec![0u8; size as usize]).unwrap();
    filler
}

/// A repository on `disk` served by boxd, with one commit made through it: the workspace, the server
/// and the commit's id.
async fn repository_with_one_commit(disk: &Tmpfs) -> (PathBuf, Server, String) {
    let workspace = workspace_in(&disk.path);
    common::git(&workspace, &["init", "-q"]);
    let server = Server::start_on(&workspace, &[], |_| {});
    std::fs::write(workspace.join("a.txt"), "one\n").unwrap();
    let first = server
        .post("/watcher/commit_changes")
        .json(&json!({"commit_message": "first"}))
        .fetch_json()
        .await;
    let head = first["commit"].as_str().expect("a commit").to_owned();
    (workspace, server, head)
}

/// Fills `disk` but for 16 KiB and asks boxd to commit what is in the workspace: the filler (to remove
/// once done), the answer's status and body. HEAD must not have moved.
async fn commit_on_a_full_disk(
    disk: &Tmpfs,
    server: &Server,
    workspace: &Path,
    head: &str,
) -> (PathBuf, u16, String) {
    let filler = fill_disk(disk, 16 * 1024);
    let response = server
        .post("/watcher/commit_changes")
        .json(&json!({"commit_message": "second"}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    assert_eq!(
        common::git(workspace, &["rev-parse", "HEAD"]).trim(),
        head,
        "HEAD moved"
    );
    (filler, status, body)
}

#[tokio::test]
#[ignore = "fault suite: make faults (root: mounts a tmpfs)"]
async fn full_disk_during_a_commit_answers_507_and_the_repository_survives() {
    let disk = Tmpfs::mount(SMALL_DISK);
    let (workspace, server, head) = repository_with_one_commit(&disk).await;

    // Incompressible content git must store, then no room for it.
    let noise: Vec<u8> = (0..2_000_000u32)
        .map(|n| (n.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(workspace.join("noise.bin"), &noise).unwrap();
    let (filler, status, body) = commit_on_a_full_disk(&disk, &server, &workspace, &head).await;
    std::fs::remove_file(filler).unwrap();
    assert!(
        !workspace.join(".git/index.lock").exists(),
        "a stale index.lock blocks every later commit"
    );
    fsck_passes_and_the_next_commit_works(&server, &workspace).await;
    let logs = server.get("/watcher/git_logs").fetch_json().await;
    assert_eq!(logs["logs"].as_array().map(Vec::len), Some(2), "{logs}");
    let git_left: Vec<_> = descendants(server.pid() as i32)
        .into_iter()
        .filter(|(_, comm)| comm.starts_with("git"))
        .collect();
    assert!(git_left.is_empty(), "{git_left:?}");
    assert_healthy(&server).await;
    eprintln!("figure: full-disk commit: {status} `{body}`");
    // Last, so the checks above (the repository survives) run whatever the status.
    assert_eq!(status, 507, "{body}");
    assert!(body.to_lowercase().contains("space"), "{body}");
}

/// The same with many small files, whose objects are written as one pack: the pack cannot be written,
/// nothing refers to it, and no temporary pack file is left behind.
#[tokio::test]
#[ignore = "fault suite: make faults (root: mounts a tmpfs)"]
async fn full_disk_during_a_packed_commit_answers_507_and_leaves_no_pack_behind() {
    let disk = Tmpfs::mount(SMALL_DISK);
    let (workspace, server, head) = repository_with_one_commit(&disk).await;
    let pack_dir = workspace.join(".git/objects/pack");
    let packs_before = std::fs::read_dir(&pack_dir).unwrap().count();

    // 300 incompressible 4 KiB files: ~1.2 MB of pack, then no room for it.
    std::fs::create_dir(workspace.join("many")).unwrap();
    for file in 0..300u32 {
        let noise: Vec<u8> = (0..4096u32)
            .map(|n| ((n + file * 4096).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(workspace.join(format!("many/{file}.bin")), noise).unwrap();
    }
    let (filler, status, body) = commit_on_a_full_disk(&disk, &server, &workspace, &head).await;
    assert_eq!(
        std::fs::read_dir(&pack_dir).unwrap().count(),
        packs_before,
        "a partial or temporary pack was left: {:?}",
        std::fs::read_dir(&pack_dir).unwrap().collect::<Vec<_>>()
    );
    std::fs::remove_file(filler).unwrap();
    assert!(!workspace.join(".git/index.lock").exists());
    fsck_passes_and_the_next_commit_works(&server, &workspace).await;
    assert_eq!(
        common::git(&workspace, &["ls-tree", "-r", "--name-only", "HEAD"])
            .lines()
            .count(),
        301
    );
    assert_healthy(&server).await;
    eprintln!("figure: full-disk packed commit: {status} `{body}`");
    assert_eq!(status, 507, "{body}");
    assert!(body.to_lowercase().contains("space"), "{body}");
}

#[tokio::test]
#[ignore = "fault suite: make faults (root: mounts a tmpfs)"]
async fn full_disk_during_cells_gives_a_clear_error_and_output_still_arrives() {
    let disk = Tmpfs::mount(SMALL_DISK);
    let workspace = workspace_in(&disk.path);
    let tmp = disk.path.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let server = kernel_server(&workspace, &[], Some(&tmp));
    cell(&server, "x = 'kept'").await;

    let filled = cell(&server, "open('fill.bin', 'wb').write(bytes(16 << 20))").await;
    assert_eq!(filled["isError"], true, "{filled}");
    let stderr = item(&filled, "stderr").unwrap_or_default();
    assert!(stderr.contains("No space left on device"), "{stderr}");

    // With the disk full, a cell printing 32 MiB still answers, bounded, with the marker.
    let printed = cell(
        &server,
        "import sys\nfor _ in range(512):\n    sys.stdout.write('z' * 65535 + '\\n')\nprint(x)",
    )
    .await;
    assert_eq!(
        printed["isError"],
        false,
        "{}",
        item(&printed, "stderr").unwrap_or_default()
    );
    let stdout = item(&printed, "stdout").unwrap();
    assert!(
        stdout.contains("[boxd: output truncated,") && stdout.ends_with("kept\n"),
        "{}",
        &stdout[stdout.len().saturating_sub(200)..]
    );

    let freed = cell(&server, "import os\nos.remove('fill.bin')\nprint(x)").await;
    assert_eq!(item(&freed, "stdout"), Some("kept\n"), "{freed}");
    assert_healthy(&server).await;
    eprintln!(
        "figure: full-disk cell: `{}`",
        stderr.lines().last().unwrap_or_default()
    );
}

// ---------------------------------------------------------------------------------------------------
// SIGTERM and SIGKILL of a busy boxd

/// Live processes (plain and PTY), a running cell with a subprocess, a running shell command and a hosted
/// MCP server in a call: returns the requests in flight.
async fn make_busy(server: &Server, markers: &Path) -> Vec<tokio::task::JoinHandle<()>> {
    for _ in 0..4 {
        common::start_process(server, json!({"argv": ["sleep", "1000"]})).await;
    }
    common::start_process(
        server,
        json!({"argv": ["/bin/sh", "-c", "sleep 1000 & sleep 1000"], "pty": true}),
    )
    .await;
    add_slow_peer(server).await;
    let marker = markers.join("busy");
    let requests = vec![
        server.post("/tools/run_ipython_cell").json(&json!({
            "code": "import subprocess, time\nsubprocess.Popen(['sleep', '1000'])\ntime.sleep(1000)",
            "timeout": 2000,
        })),
        server
            .post("/tools/run_shell_command")
            .json(&json!({"command": "sleep 1000 & sleep 1000", "timeout": 2000})),
        server.post("/mcp/call_tool").json(&json!({
            "tool_name": "block",
            "arguments": {"marker": marker, "seconds": 1000},
        })),
    ];
    let in_flight = requests
        .into_iter()
        .map(|request| {
            tokio::spawn(async move {
                let _ = request.send().await;
            })
        })
        .collect();
    let pid = server.pid() as i32;
    let busy = eventually(Duration::from_secs(30), || {
        marker.exists()
            && descendants(pid)
                .iter()
                .filter(|(_, comm)| comm == "sleep")
                .count()
                >= 9
    })
    .await;
    assert!(busy, "boxd did not get busy: {:?}", descendants(pid));
    in_flight
}

#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn sigterm_of_a_busy_boxd_exits_promptly_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = workspace_in(&dir.path().canonicalize().unwrap());
    let mut server = kernel_server(&workspace, &[], None);
    assert_healthy(&server).await;
    let markers = tempfile::tempdir().unwrap();
    let in_flight = make_busy(&server, markers.path()).await;
    let family = descendants(server.pid() as i32);

    let started = Instant::now();
    kill(server.pid() as i32, libc::SIGTERM);
    let mut status = None;
    for _ in 0..400 {
        status = server.exit_status();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    // The guard (`boxd reaper`) exits once boxd has: it checks for leftovers first.
    eventually(ALL_GONE_BOUND, || {
        family.iter().all(|(pid, _)| !alive(*pid))
    })
    .await;
    let survivors: Vec<_> = family
        .iter()
        .filter(|(pid, _)| alive(*pid))
        .cloned()
        .collect();
    for (pid, _) in &survivors {
        kill(*pid, libc::SIGKILL);
    }
    for request in in_flight {
        request.abort();
    }
    let status = status.expect("boxd exits within 20 s of SIGTERM");
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_secs(15),
        "SIGTERM took {took:?} to exit"
    );
    assert!(survivors.is_empty(), "left running: {survivors:?}");
    eprintln!(
        "figure: SIGTERM of a busy boxd ({} descendants): exit {status} in {took:?}, 0 left",
        family.len()
    );
}

/// Everything a busy boxd started, its children's children included (18 processes: background sleeps
/// of a command, a cell's subprocess, a terminal's jobs, a hosted server), stops at once when boxd is
/// SIGKILLed: the leaders by `PR_SET_PDEATHSIG`, the rest by boxd's guard (`boxd reaper`), without
/// waiting for the next boxd.
#[tokio::test]
#[ignore = "fault suite: make faults"]
async fn sigkill_of_a_busy_boxd_leaves_no_child_running() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = workspace_in(&dir.path().canonicalize().unwrap());
    let mut server = kernel_server(&workspace, &[], None);
    let markers = tempfile::tempdir().unwrap();
    let in_flight = make_busy(&server, markers.path()).await;
    let family = descendants(server.pid() as i32);
    let leaders = family
        .iter()
        .filter(|(pid, _)| stat(*pid).is_some_and(|(_, ppid, _)| ppid == server.pid() as i32))
        .count();
    server.kill();
    let killed = Instant::now();
    for request in in_flight {
        request.abort();
    }
    let all_gone = eventually(ALL_GONE_BOUND, || {
        family.iter().all(|(pid, _)| !alive(*pid))
    })
    .await;
    let took = killed.elapsed();
    let survivors: Vec<_> = family
        .iter()
        .filter(|(pid, _)| alive(*pid))
        .cloned()
        .collect();
    for (pid, _) in &survivors {
        kill(*pid, libc::SIGKILL);
    }
    eprintln!(
        "figure: SIGKILL of a busy boxd: {} descendants ({leaders} children, the guard among them) \
         stopped in {took:?}; {} survived: {survivors:?}",
        family.len(),
        survivors.len()
    );
    assert!(
        all_gone,
        "left running {ALL_GONE_BOUND:?} after the kill: {survivors:?}"
    );
    // Nothing for the next boxd of the workspace to find.
    let next = kernel_server(&workspace, &[], None);
    assert_healthy(&next).await;
}

/// How long a killed or stopped boxd's descendants may take to be gone: "at once", with room for a
/// loaded machine (they take milliseconds).
const ALL_GONE_BOUND: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------------
// Connection floods

/// Raises this test process's soft fd limit to its hard limit (the flood needs more than 1024).
fn raise_own_fd_limit() {
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// boxd with 1024 file descriptors, soft and hard, as in the report of finding 4.
fn fd_starved_server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let workspace = workspace_in(&dir.path().canonicalize().unwrap());
    let server = Server::start_on(&workspace, &[], |command| {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; it runs in the child between fork and exec.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 1024,
                    rlim_max: 1024,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    std::mem::forget(dir);
    server
}

const FLOOD: usize = 1500;

/// Up to `FLOOD` connections, one after the other, each sending `greeting` if any. A connect may wait for
/// a SYN retransmit (1 s, then 3 s) while the server drains its accept queue; the flood stops at the first
/// that does not connect within 4 s, or after 60 s in all.
fn flood(server: &Server, greeting: &'static [u8]) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    let address: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut streams = Vec::new();
    while streams.len() < FLOOD && Instant::now() < deadline {
        let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(4))
        else {
            break;
        };
        if !greeting.is_empty() && stream.write_all(greeting).is_err() {
            break;
        }
        stream.set_nonblocking(true).unwrap();
        streams.push(stream);
    }
    streams
}

/// How many of `streams` the server has closed (a read sees the end, or a reset).
fn closed_by_server(streams: &[std::net::TcpStream]) -> usize {
    use std::io::Read;
    let mut buffer = [0u8; 4096];
    let mut closed = 0;
    for mut stream in streams {
        match stream.read(&mut buffer) {
            Ok(0) => closed += 1,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed += 1,
        }
    }
    closed
}

async fn flood_case(name: &str, greeting: &'static [u8]) {
    raise_own_fd_limit();
    let server = fd_starved_server();
    assert_healthy(&server).await;
    let idle_fds = open_fds(server.pid());
    let streams = flood(&server, greeting);
    let opened = streams.len();
    eprintln!("{name}: {opened} connections open");
    let started = Instant::now();
    assert_healthy(&server).await;
    let health_ms = started.elapsed().as_millis();
    eprintln!("{name}: /healthz answered in {health_ms} ms");
    // Past the connection cap only health checks are served; anything else is told to come back.
    let refused = server.get("/workspace/exists?path=x").send().await.unwrap();
    let listed = refused.status().as_u16();
    let retry_after = refused.headers().contains_key("retry-after");

    // The server times the flood out by itself (90 s at most here).
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut closed = closed_by_server(&streams);
    while closed < opened && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        closed = closed_by_server(&streams);
    }
    let waited = started.elapsed();
    drop(streams);
    let settled = eventually(Duration::from_secs(10), || {
        open_fds(server.pid()) <= idle_fds + 8
    })
    .await;
    assert_healthy(&server).await;
    eprintln!(
        "figure: {name}: {opened}/{FLOOD} connected; /healthz in {health_ms} ms during the flood; \
         a route answered {listed}; {closed} closed by boxd after {waited:?}; fds {idle_fds} idle, {} after",
        open_fds(server.pid())
    );
    assert_eq!(listed, 503, "a route past the connection cap");
    assert!(retry_after, "the busy answer carries Retry-After");
    assert_eq!(closed, opened, "boxd left flood connections open");
    assert!(settled, "boxd's fds did not return to idle");
    assert_eq!(
        server.get("/workspace/exists?path=x").fetch_status().await,
        200,
        "routes are served again once the flood is gone"
    );
}

/// Needs the connection cap and idle timeout (another helper's change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: make faults"]
async fn idle_connection_flood_leaves_healthz_answering() {
    flood_case("idle flood", b"").await;
}

/// Needs the header-read timeout (another helper's change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: make faults"]
async fn slow_header_flood_leaves_healthz_answering() {
    flood_case(
        "slow-header flood",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------------
// 200 000 files

const MANY_FILES: usize = 200_000;
/// What any one route may take on 200 000 files before the case calls it a hang.
const ROUTE_BUDGET: Duration = Duration::from_secs(120);
/// What any one answer may weigh: routes bound their answers well below this.
const ANSWER_BOUND: usize = 64 * 1024 * 1024;

/// Polls `/healthz` until stopped: (worst latency in ms, failures).
struct HealthWatch {
    stop: Arc<AtomicBool>,
    worst_ms: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl HealthWatch {
    fn start(server: &Server) -> HealthWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let worst_ms = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let url = server.url("/healthz");
        let task = tokio::spawn({
            let (stop, worst_ms, failures) = (stop.clone(), worst_ms.clone(), failures.clone());
            async move {
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .unwrap();
                // ROUTE_BUDGET at 10 polls a second, at most.
                for _ in 0..1200 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let started = Instant::now();
                    let ok = client
                        .get(&url)
                        .bearer_auth(common::TOKEN)
                        .send()
                        .await
                        .is_ok_and(|response| response.status() == 200);
                    worst_ms.fetch_max(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    if !ok {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        HealthWatch {
            stop,
            worst_ms,
            failures,
            task,
        }
    }

    async fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        (
            self.worst_ms.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: make faults (root: mounts a tmpfs)"]
async fn two_hundred_thousand_files_through_every_listing_and_git_route() {
    let disk = Tmpfs::mount("size=1g,nr_inodes=400k,mode=0755");
    let workspace = workspace_in(&disk.path);
    common::git(&workspace, &["init", "-q"]);
    std::fs::write(workspace.join("README"), "hello\n").unwrap();
    let server = Server::start_on(&workspace, &[], |_| {});
    let first = server
        .post("/watcher/commit_changes")
        .json(&json!({"commit_message": "first"}))
        .fetch_json()
        .await;
    let first = first["commit"].as_str().expect("a first commit").to_owned();
    let big = workspace.join("big");
    std::fs::create_dir(&big).unwrap();
    let created = Instant::now();
    for n in 0..MANY_FILES {
        std::fs::write(big.join(format!("f{n}")), "").unwrap();
    }
    eprintln!("figure: {MANY_FILES} files made in {:?}", created.elapsed());

    let long = reqwest::Client::builder()
        .timeout(ROUTE_BUDGET)
        .build()
        .unwrap();
    let get = |path: &str| long.get(server.url(path)).bearer_auth(common::TOKEN);
    let post = |path: &str, body: Value| {
        long.post(server.url(path))
            .bearer_auth(common::TOKEN)
            .json(&body)
    };
    let tool = |name: &str, arguments: Value| {
        post(
            "/mcp/call_tool",
            json!({"tool_name": name, "arguments": arguments}),
        )
    };
    let routes: Vec<(&str, reqwest::RequestBuilder)> = vec![
        ("GET /workspace/list big", get("/workspace/list?path=big")),
        (
            "GET /workspace/list . depth 3",
            get("/workspace/list?path=.&depth=3"),
        ),
        (
            "GET /workspace/exists",
            get("/workspace/exists?path=big/f199999"),
        ),
        (
            "list_directory big",
            tool("list_directory", json!({"path": "big"})),
        ),
        (
            "directory_tree .",
            tool("directory_tree", json!({"path": "."})),
        ),
        (
            "search_files f19999",
            tool("search_files", json!({"path": ".", "pattern": "f19999"})),
        ),
        (
            "get_file_info big",
            tool("get_file_info", json!({"path": "big"})),
        ),
        (
            "generate_diff (uncommitted)",
            post("/watcher/generate_diff", json!({})),
        ),
        (
            "commit_changes",
            post("/watcher/commit_changes", json!({"commit_message": "many"})),
        ),
        ("git_logs", get("/watcher/git_logs")),
        (
            "generate_diff (first..HEAD)",
            post(
                "/watcher/generate_diff",
                json!({"commit_a": first, "commit_b": "HEAD"}),
            ),
        ),
        (
            "shell ls | wc",
            post(
                "/tools/run_shell_command",
                json!({"command": "ls big | wc -l"}),
            ),
        ),
    ];
    let mut failures = Vec::new();
    for (name, request) in routes {
        let health = HealthWatch::start(&server);
        let started = Instant::now();
        let answer = request.send().await;
        let (status, size, head) = match answer {
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.bytes().await.unwrap_or_default();
                let head = String::from_utf8_lossy(&body[..body.len().min(160)]).into_owned();
                (status, body.len(), head)
            }
            Err(err) => (0, 0, err.to_string()),
        };
        let took = started.elapsed();
        let (worst_ms, health_failures) = health.finish().await;
        eprintln!(
            "figure: 200k files: {name}: {status} in {took:?}, {size} bytes; /healthz worst {worst_ms} ms, \
             {health_failures} failures; {head:?}"
        );
        // A walk cut short at its bound must say so, not answer that nothing matched.
        let claims_nothing = head.contains("\"text\":\"No matches found\"");
        if !(200..500).contains(&status)
            || size > ANSWER_BOUND
            || health_failures > 0
            || claims_nothing
        {
            failures.push(format!(
                "{name}: {status}, {size} bytes, {health_failures} /healthz failures: {head}"
            ));
        }
    }
    // The watch stream on the tree: it says it is ready (or refuses clearly) within the budget.
    let health = HealthWatch::start(&server);
    let started = Instant::now();
    let watch = get("/watch?path=.&recursive=true").send().await;
    let first_event = match watch {
        Ok(response) if response.status() == 200 => {
            let mut events = common::NdjsonEvents::new(response);
            events
                .next()
                .await
                .map(|event| event.to_string())
                .unwrap_or_default()
        }
        Ok(response) => format!(
            "{} {}",
            response.status(),
            response.text().await.unwrap_or_default()
        ),
        Err(err) => format!("error: {err}"),
    };
    let (worst_ms, health_failures) = health.finish().await;
    eprintln!(
        "figure: 200k files: GET /watch recursive: {first_event} in {:?}; /healthz worst {worst_ms} ms",
        started.elapsed()
    );
    if health_failures > 0 || first_event.starts_with("error") || first_event.starts_with('5') {
        failures.push(format!("watch: {first_event}"));
    }
    let git_left: Vec<_> = descendants(server.pid() as i32)
        .into_iter()
        .filter(|(_, comm)| comm.starts_with("git"))
        .collect();
    assert!(git_left.is_empty(), "git left running: {git_left:?}");
    assert_healthy(&server).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
