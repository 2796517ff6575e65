//! `boxd init`, the images' first process, run as the images run it (services in a directory, the token
//! in `SECRET_TOKEN`), on a loopback port: the port answers its first request; the token reaches no
//! other process's environment or command line and boxd's memory is closed to its children; a missing
//! token becomes a random one; services and boxd are restarted with a growing delay; a usage error stops
//! it with status 2; SIGTERM stops everything.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{TOKEN, process_runs};

struct Init {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    stderr: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

impl Init {
    /// `boxd init` with `services` (name, shell script) and `env` set, `SECRET_TOKEN` among them or not.
    fn start(services: &[(&str, &str)], env: &[(&str, &str)]) -> Init {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("services")).expect("services");
        std::fs::create_dir_all(root.join("workspace")).expect("workspace");
        for (name, script) in services {
            let path = root.join("services").join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).expect("service");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("executable");
        }
        let port = free_port();
        let stderr = root.join("stderr");
        let mut command = Command::new(common::boxd_bin());
        command
            .arg("init")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--services")
            .arg(root.join("services"))
            .env("WORKSPACE_DIR", root.join("workspace"))
            .env("SERVICE_DIR", root)
            .env("BOXD_TOOLS", "shell,workspace")
            .env_remove("SECRET_TOKEN")
            .env_remove("BOXD_MCP_CONFIG")
            .env_remove("BOXD_POOL_SECRET_FILE")
            .env_remove("BOXD_POOL_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("boxd init starts");
        Init {
            child,
            port,
            dir,
            stderr,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Runs `command` through boxd's shell with `token`; its stdout.
    async fn shell(&self, token: &str, command: &str) -> String {
        let answer: serde_json::Value = reqwest::Client::new()
            .post(self.url("/fastapi/tools/run_shell_command"))
            .bearer_auth(token)
            .json(&serde_json::json!({ "command": command }))
            .send()
            .await
            .expect("shell call")
            .json()
            .await
            .expect("json");
        common::item(&answer, "stdout")
            .unwrap_or_default()
            .to_string()
    }

    /// Polls `/fastapi/livez` until it answers (bounded).
    async fn wait_serving(&self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(response) = client.get(self.url("/fastapi/livez")).send().await
                && response.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("boxd init never served; stderr:\n{}", self.stderr());
    }

    fn serve_pid(&self) -> Option<i32> {
        children_of(self.child.id() as i32)
            .into_iter()
            .find(|pid| cmdline(*pid).contains("serve"))
    }
}

impl Drop for Init {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}

/// The children of every thread of `parent` (boxd starts children from its runtime's threads).
fn children_of(parent: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{parent}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// What `probe` finds, polled for up to 10 s (a process the test waits for may not have started yet).
async fn found_within<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// The first request on the first connection the port accepts is answered: the listener exists
/// before boxd serve does, and boxd serve takes it over rather than binding its own.
#[tokio::test]
async fn the_port_answers_its_first_request() {
    let init = Init::start(&[], &[("SECRET_TOKEN", TOKEN)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", init.port)).await {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(err) => panic!("never listened: {err}"),
        }
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET /fastapi/livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("answered within 10 s")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn the_secrets_reach_no_other_process_and_boxd_memory_is_closed() {
    let secret = "tok-0123456789-unique-secret";
    let device_key = "-----BEGIN PRIVATE KEY-----adbkey-0123-unique";
    let init = Init::start(
        &[(
            "10-record",
            "env > \"$SERVICE_DIR/service.env\"; exec sleep 300",
        )],
        &[("SECRET_TOKEN", secret), ("BOXD_ADB_KEY", device_key)],
    );
    init.wait_serving().await;
    let forbidden = reqwest::Client::new()
        .get(init.url("/fastapi/readyz"))
        .bearer_auth("wrong")
        .send()
        .await
        .expect("readyz");
    assert_eq!(forbidden.status(), 403);
    let output = search_for_secrets(&init, secret, &[secret, device_key]).await;
    assert_eq!(output.trim(), "0\ndone", "the token was found: {output}");
    let service_env = std::fs::read_to_string(init.path("service.env")).unwrap_or_default();
    assert!(!service_env.is_empty(), "the service ran");
    assert!(!service_env.contains(secret), "a service saw the token");
    assert!(
        !service_env.contains("adbkey-0123"),
        "a service saw the device key"
    );
    assert!(!service_env.contains("SECRET_TOKEN"), "{service_env}");
}

/// The public port's listener that init hands to boxd stays boxd's: a child holding it could accept
/// connections meant for boxd (and read their bearer tokens).
#[tokio::test]
async fn children_do_not_inherit_the_public_listener() {
    let init = Init::start(&[], &[("SECRET_TOKEN", TOKEN)]);
    init.wait_serving().await;
    let sockets = init
        .shell(TOKEN, "ls -l /proc/$$/fd/ | grep -c socket")
        .await;
    assert_eq!(sockets.trim(), "0", "a command holds a socket");
}

/// What a command run with `token` finds of `secrets`: the count of matching lines among every
/// process's environment and command line, boxd's (init's and serve's) memory if open, matches in
/// their pipes if readable; then `done`. Root keeps every capability but CAP_SYS_PTRACE, as under an
/// engine's defaults.
async fn search_for_secrets(init: &Init, token: &str, secrets: &[&str]) -> String {
    let serve = init.serve_pid().expect("boxd serve runs");
    let init_pid = init.child.id();
    // SAFETY: geteuid has no preconditions.
    let drop_ptrace = if unsafe { libc::geteuid() } == 0 {
        "setpriv --bounding-set -sys_ptrace"
    } else {
        ""
    };
    // The pattern is read from a file: on a command line it would be found in /proc itself.
    let pattern = init.path("pattern");
    std::fs::write(&pattern, format!("{}\n", secrets.join("\n"))).expect("pattern");
    let pattern = pattern.display();
    let script = format!(
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do {drop_ptrace} cat \"$f\" 2>/dev/null; done \
           | tr '\\0' '\\n' | grep -c -F -f {pattern}; \
         for p in {init_pid} {serve}; do \
           {drop_ptrace} head -c 1 /proc/$p/mem >/dev/null 2>&1 && echo mem-open-$p; \
           {drop_ptrace} ls -l /proc/$p/fd/ 2>/dev/null | grep -q pipe && {drop_ptrace} cat /proc/$p/fd/* 2>/dev/null | grep -c -F -f {pattern}; \
         done; echo done"
    );
    init.shell(token, &script).await
}

/// Pool mode with the secret itself in `BOXD_POOL_SECRET` (what the manifests give through a Secret's
/// `secretKeyRef`, instead of a mounted file): it opens `POST /init`, and afterwards tenant code finds
/// it in no process's environment or command line, no descriptor of boxd and no file it can reach.
#[tokio::test]
async fn the_pool_secret_opens_init_and_reaches_no_other_process_or_file() {
    let pool_secret = "pool-0123456789-unique-secret";
    let session = "session-0123456789-token";
    let init = Init::start(
        &[(
            "10-record",
            "env > \"$SERVICE_DIR/service.env\"; exec sleep 300",
        )],
        &[("BOXD_POOL_SECRET", pool_secret)],
    );
    init.wait_serving().await;
    let client = reqwest::Client::new();
    let unclaimed = client
        .get(init.url("/fastapi/healthz"))
        .bearer_auth(pool_secret)
        .send()
        .await
        .expect("healthz");
    assert_eq!(
        unclaimed.status(),
        403,
        "pool mode: nothing before the claim"
    );
    let claimed = client
        .post(init.url("/fastapi/init"))
        .bearer_auth(pool_secret)
        .json(&serde_json::json!({ "token": session }))
        .send()
        .await
        .expect("init");
    assert_eq!(claimed.status(), 200, "{:?}", claimed.text().await);

    let output = search_for_secrets(&init, session, &[pool_secret]).await;
    assert_eq!(
        output.trim(),
        "0\ndone",
        "the pool secret was found: {output}"
    );
    // Files: where a container gets mounted secrets, and this test's own directory (the services',
    // the workspace, the log), the pattern file aside. (Not all of /tmp: this machine's other users
    // keep files there.)
    let files = init
        .shell(
            session,
            &format!(
                "grep -rlF --exclude=pattern -f {pattern} {dir} /run /dev/shm /var/run 2>/dev/null \
                   | grep -v '^{dir}/pattern$' | head -5; echo done",
                pattern = init.path("pattern").display(),
                dir = init.dir.path().display()
            ),
        )
        .await;
    assert_eq!(
        files.trim(),
        "done",
        "a file holds the pool secret: {files}"
    );
    let service_env = std::fs::read_to_string(init.path("service.env")).unwrap_or_default();
    assert!(!service_env.is_empty(), "the service ran");
    assert!(!service_env.contains(pool_secret) && !service_env.contains("BOXD_POOL_SECRET"));
    assert!(
        !init.stderr().contains(pool_secret),
        "the log shows the pool secret"
    );
}

#[tokio::test]
async fn without_a_token_a_random_one_is_generated_and_logged_once() {
    let init = Init::start(&[], &[]);
    init.wait_serving().await;
    let log = init.stderr();
    let token = log
        .lines()
        .find_map(|line| line.split("generated token: ").nth(1))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no generated token in the log:\n{log}"))
        .to_string();
    assert_eq!(log.matches("generated token").count(), 1, "{log}");
    assert!(token.len() >= 32, "{token}");
    let client = reqwest::Client::new();
    // `/healthz`, not `/readyz`: the kernel the first request started may still be starting.
    for (presented, status) in [(token.as_str(), 200), ("secret_token123", 403)] {
        let response = client
            .get(init.url("/fastapi/healthz"))
            .bearer_auth(presented)
            .send()
            .await
            .expect("healthz");
        assert_eq!(response.status(), status, "with {presented}");
    }
}

#[test]
fn a_usage_error_stops_init_with_status_2_instead_of_restarting() {
    let mut init = Init::start(
        &[(
            "10-sleep",
            "echo $$ >> \"$SERVICE_DIR/sleep.pids\"; exec sleep 300",
        )],
        &[("SECRET_TOKEN", TOKEN), ("BOXD_TOOLS", "bogus")],
    );
    let status = init
        .wait_exit(Duration::from_secs(10))
        .expect("init stops by itself");
    assert_eq!(status.code(), Some(2), "{}", init.stderr());
    let log = init.stderr();
    assert!(log.contains("bogus"), "boxd's own message is kept: {log}");
    assert_eq!(
        log.matches("boxd exited").count(),
        1,
        "not restarted: {log}"
    );
    for pid in read_pids(&init.path("sleep.pids")) {
        assert!(!process_runs(pid), "the service {pid} was stopped");
    }
}

/// A tenant that kills serve in a claimed pool pod gets a serve that is still claimed (review L5): the
/// session token and the claim's environment hold, and `POST /init` stays closed to the pool secret.
#[tokio::test]
async fn a_claim_outlives_a_killed_serve() {
    let pool_secret = "pool-0123456789-restart-secret";
    let session = "session-0123456789-restart";
    let init = Init::start(
        &[],
        &[
            ("BOXD_POOL_SECRET", pool_secret),
            ("BOXD_RESTART_DELAY_MS", "50"),
        ],
    );
    init.wait_serving().await;
    let client = reqwest::Client::new();
    let claimed = client
        .post(init.url("/fastapi/init"))
        .bearer_auth(pool_secret)
        .json(&serde_json::json!({ "token": session, "env": { "CLAIM_MARK": "kept" } }))
        .send()
        .await
        .expect("init");
    assert_eq!(claimed.status(), 200, "{:?}", claimed.text().await);
    for round in 0..3 {
        let before = init.serve_pid().expect("boxd serve runs");
        // SAFETY: kill(2) on a process of this test.
        unsafe { libc::kill(before, libc::SIGKILL) };
        let restarted = found_within(|| init.serve_pid().filter(|pid| *pid != before)).await;
        assert!(
            restarted.is_some(),
            "round {round}: serve restarted; {}",
            init.stderr()
        );
        init.wait_serving().await;
        assert_eq!(
            init.shell(session, "printf %s \"$CLAIM_MARK\"").await,
            "kept",
            "round {round}: the session token and the claim's environment hold; {}",
            init.stderr()
        );
        let again = client
            .post(init.url("/fastapi/init"))
            .bearer_auth(pool_secret)
            .json(&serde_json::json!({ "token": "session-9876543210-thief" }))
            .send()
            .await
            .expect("init again");
        assert_eq!(
            again.status(),
            409,
            "round {round}: POST /init stays closed"
        );
    }
}

#[tokio::test]
async fn exits_are_restarted_with_a_growing_delay_and_sigterm_stops_everything() {
    let mut init = Init::start(
        &[
            (
                "10-crash",
                "date +%s.%N >> \"$SERVICE_DIR/crash.runs\"; exit 1",
            ),
            (
                "20-sleep",
                "echo $$ >> \"$SERVICE_DIR/sleep.pids\"; sleep 300 & echo $! >> \"$SERVICE_DIR/sleep.pids\"; wait",
            ),
        ],
        &[("SECRET_TOKEN", TOKEN)],
    );
    init.wait_serving().await;
    let runs = || -> Vec<f64> {
        std::fs::read_to_string(init.path("crash.runs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while runs().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let runs = runs();
    assert!(runs.len() >= 3, "restarted twice: {runs:?}");
    let (first, second) = (runs[1] - runs[0], runs[2] - runs[1]);
    assert!(first >= 0.9 && second >= 1.9, "1 s, then 2 s: {runs:?}");

    // boxd itself killed: started again on the same listener, which queues connections meanwhile.
    let serve = init.serve_pid().expect("boxd serve runs");
    // SAFETY: kill(2) on a process of this test.
    unsafe { libc::kill(serve, libc::SIGKILL) };
    let started = Instant::now();
    let answer = reqwest::Client::new()
        .get(init.url("/fastapi/livez"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("a request during the restart waits for the new boxd");
    assert_eq!(answer.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(5));

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(init.child.id() as i32, libc::SIGTERM) };
    let status = init
        .wait_exit(Duration::from_secs(9))
        .expect("SIGTERM stops init within the grace");
    assert!(status.success(), "{status:?}");
    let log = init.stderr();
    assert!(!log.contains("did not stop"), "{log}");
    for pid in read_pids(&init.path("sleep.pids")) {
        assert!(
            !process_runs(pid),
            "{pid} (a service or its child) was stopped"
        );
    }
}

/// boxd SIGKILLed (under init it starts no guard, `boxd reaper`, of its own): init itself stops what
/// boxd's children left (reparented to it) before boxd starts again, whether it carries boxd's marker,
/// left its group or dropped its whole environment, and leaves a service's orphans alone.
#[tokio::test]
async fn what_a_killed_boxd_left_is_stopped_before_boxd_starts_again() {
    let init = Init::start(
        &[(
            "10-orphaning",
            "sh -c 'sleep 300 & echo $! > \"$SERVICE_DIR/service-orphan.pid\"'; exec sleep 300",
        )],
        // A restart 3 s after the death at the soonest: the sweep must be done by then.
        &[("SECRET_TOKEN", TOKEN), ("BOXD_RESTART_DELAY_MS", "3000")],
    );
    init.wait_serving().await;
    let output = init
        .shell(
            TOKEN,
            "sleep 1000 >/dev/null 2>&1 & echo $!; \
             setsid sleep 1000 >/dev/null 2>&1 & echo $!; \
             env -i sleep 1000 >/dev/null 2>&1 & echo $!",
        )
        .await;
    let left: Vec<i32> = output
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect();
    assert_eq!(left.len(), 3, "three background sleeps: {output}");
    let service_orphan =
        found_within(|| read_pids(&init.path("service-orphan.pid")).first().copied())
            .await
            .expect("the service left a child");
    assert!(left.iter().all(|pid| process_runs(*pid)) && process_runs(service_orphan));

    let serve = init.serve_pid().expect("boxd serve runs");
    // The guard would have started before the shell family served the command above.
    assert!(
        !children_of(serve)
            .into_iter()
            .any(|pid| cmdline(pid).contains("reaper")),
        "boxd under init runs a guard of its own"
    );
    // SAFETY: kill(2) on a process of this test.
    unsafe { libc::kill(serve, libc::SIGKILL) };
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(5);
    while left.iter().any(|pid| process_runs(*pid)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = killed.elapsed();
    let survivors: Vec<i32> = left
        .iter()
        .copied()
        .filter(|pid| process_runs(*pid))
        .collect();
    for pid in &survivors {
        // SAFETY: kill(2) on a sleep this test started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        survivors.is_empty(),
        "outlived boxd: {survivors:?}\n{}",
        init.stderr()
    );
    // boxd starts again 3 s after it died, at the soonest (BOXD_RESTART_DELAY_MS).
    assert!(took < Duration::from_secs(3), "stopped only after {took:?}");
    assert!(
        process_runs(service_orphan),
        "a service's orphan was stopped"
    );
    init.wait_serving().await;
}

#[tokio::test]
async fn a_request_unanswered_within_the_nginx_timeout_gets_504() {
    let init = Init::start(
        &[],
        &[
            ("SECRET_TOKEN", TOKEN),
            ("NGINX_TIMEOUT", "2"),
            ("BOXD_COMMAND_TIMEOUT", "30"),
        ],
    );
    init.wait_serving().await;
    let started = Instant::now();
    let response = reqwest::Client::new()
        .post(init.url("/fastapi/tools/run_shell_command"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "command": "sleep 10" }))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(5));
    let body = response.text().await.unwrap_or_default();
    assert!(body.contains("NGINX_TIMEOUT"), "{body}");
    // The default limits keep work inside the timeout: a command stops first and answers.
    let init = Init::start(&[], &[("SECRET_TOKEN", TOKEN), ("NGINX_TIMEOUT", "3")]);
    init.wait_serving().await;
    let response = reqwest::Client::new()
        .post(init.url("/fastapi/tools/run_shell_command"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "command": "sleep 10; echo late" }))
        .send()
        .await
        .expect("answered");
    assert_eq!(
        response.status(),
        200,
        "the command's own timeout answered first"
    );
}

/// A tenant-root process (no CAP_SYS_PTRACE, as under an engine's defaults) that outlives boxd's
/// restarts tries, on every process boxd init starts, what could take the secrets in the hand-over: a
/// read of each `/proc/<pid>/fd/N`, `pidfd_getfd` of its first descriptors, a `PTRACE_SEIZE`. It spins
/// on the pids the kernel hands out next, so it meets each new serve from its first instant.
const WATCHER: &str = r#"
import ctypes, json, os, sys, time
secrets = [line.encode() for line in open(sys.argv[1]).read().split("\n") if line]
report, stop = sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE, PTRACE_DETACH = 0x4206, 17
SYS_pidfd_open, SYS_pidfd_getfd = 434, 438
found, attempted = [], set()
def boxd_process(pid):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return False
    return len(argv) > 1 and argv[1] in (b"serve", b"init")
def look(data, how, pid):
    if any(secret in data for secret in secrets):
        found.append(f"{how} of pid {pid}")
def attack(pid):
    attempted.add(pid)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            opened = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            look(os.read(opened, 1 << 16), f"a read of /proc fd {fd}", pid)
        except OSError:
            pass
        os.close(opened)
    pidfd = libc.syscall(SYS_pidfd_open, pid, 0)
    if pidfd >= 0:
        for fd in range(3, 8):
            stolen = libc.syscall(SYS_pidfd_getfd, pidfd, fd, 0)
            if stolen >= 0:
                found.append(f"pidfd_getfd of fd {fd} of pid {pid}")
                os.close(stolen)
        os.close(pidfd)
    if libc.ptrace(PTRACE_SEIZE, pid, 0, 0) == 0:
        found.append(f"PTRACE_SEIZE of pid {pid}")
        libc.ptrace(PTRACE_DETACH, pid, 0, 0)
deadline = time.time() + 120
while time.time() < deadline and not os.path.exists(stop):
    try:
        last = int(open("/proc/sys/kernel/ns_last_pid").read())
    except OSError:
        last = 0
    candidates = set(range(last, last + 4))
    candidates.update(int(p) for p in os.listdir("/proc") if p.isdigit())
    for pid in candidates:
        if pid != os.getpid() and pid != os.getppid() and boxd_process(pid):
            attack(pid)
json.dump({"found": found, "attempted": len(attempted)}, open(report, "w"))
"#;

/// Tenant code kills boxd serve again and again while a process of its own, outside the sweep, watches
/// each new serve from its first instant: no secret is ever read, no descriptor taken, no trace
/// attached, and every restarted serve still gets its secrets and serves.
#[tokio::test]
async fn a_tenant_that_kills_serve_again_and_again_never_reads_a_secret() {
    let secret = "tok-restart-race-unique-0123456789";
    let device_key = "-----BEGIN PRIVATE KEY-----restart-race-adbkey";
    // SAFETY: geteuid has no preconditions.
    let drop_ptrace = if unsafe { libc::geteuid() } == 0 {
        "setpriv --bounding-set -sys_ptrace"
    } else {
        ""
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let watcher = dir.path().join("watcher.py");
    let patterns = dir.path().join("patterns");
    let report = dir.path().join("report.json");
    let stop = dir.path().join("stop");
    std::fs::write(&watcher, WATCHER).expect("watcher");
    std::fs::write(&patterns, format!("{secret}\n{device_key}\n")).expect("patterns");
    // A service: started by init, in a group of its own, never swept when serve dies.
    let service = format!(
        "exec {drop_ptrace} python3 {} {} {} {}",
        watcher.display(),
        patterns.display(),
        report.display(),
        stop.display()
    );
    let init = Init::start(
        &[("10-watcher", service.as_str())],
        &[
            ("SECRET_TOKEN", secret),
            ("BOXD_ADB_KEY", device_key),
            ("BOXD_RESTART_DELAY_MS", "50"),
            ("BOXD_MAX_RESTART_DELAY_MS", "200"),
        ],
    );
    init.wait_serving().await;
    let client = reqwest::Client::new();
    const RESTARTS: usize = 20;
    for round in 0..RESTARTS {
        let serve = init.serve_pid().expect("boxd serve runs");
        // SAFETY: kill(2) on a process of this test.
        unsafe { libc::kill(serve, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let restarted = init.serve_pid().is_some_and(|pid| pid != serve);
            let answered = client
                .get(init.url("/fastapi/readyz"))
                .bearer_auth(secret)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|response| response.status() != 403);
            if restarted && answered {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: boxd serve did not come back with its token; stderr:\n{}",
                init.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    std::fs::write(&stop, "").expect("stop");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !report.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap_or_default())
            .expect("the watcher's report");
    assert_eq!(report["found"], serde_json::json!([]), "{report}");
    // Each serve, and each of init's forks before their exec, was tried.
    let attempted = report["attempted"].as_u64().unwrap_or(0);
    assert!(attempted > RESTARTS as u64, "{report}");
    let log = init.stderr();
    assert!(!log.contains("no secrets for boxd serve"), "{log}");
}
