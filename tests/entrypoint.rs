//! The base image's entrypoint (`images/base/entrypoint.sh`) with stub `boxd` and `nginx` on PATH: a
//! usage error (exit status 2) stops it with boxd's message instead of a restart loop; a crash is restarted
//! after a growing delay; SIGTERM stops everything promptly. Its `/etc/` paths are moved into a temporary
//! directory, so the machine's own configuration is never touched.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BOXD_STUB: &str = r#"#!/bin/sh
echo "$(date +%s.%N) $$" >> "$STUB_DIR/boxd.runs"
runs=$(wc -l < "$STUB_DIR/boxd.runs")
case "$STUB_PLAN" in
  usage) echo "error: invalid value 'bogus' for '--tools <TOOLS>'" >&2; exit 2 ;;
  crash) if [ "$runs" -le 2 ]; then echo "boxd stub: crash $runs" >&2; exit 1; fi ;;
esac
exec sleep 300
"#;

// bash starts background jobs with SIGQUIT ignored and a shell cannot undo that; nginx installs its own
// handler for it (graceful stop), so the stub restores the default action in Python.
const NGINX_STUB: &str = r#"#!/bin/sh
echo $$ >> "$STUB_DIR/nginx.pids"
exec python3 -c 'import signal, time; signal.signal(signal.SIGQUIT, signal.SIG_DFL); time.sleep(300)'
"#;

struct Entrypoint {
    child: Child,
    dir: tempfile::TempDir,
}

impl Entrypoint {
    fn start(plan: &str) -> Entrypoint {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        for (name, text) in [("boxd", BOXD_STUB), ("nginx", NGINX_STUB)] {
            let path = bin.join(name);
            std::fs::write(&path, text).expect("stub");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("executable");
        }
        let etc = root.join("etc");
        std::fs::create_dir_all(etc.join("boxd")).expect("etc/boxd");
        std::fs::create_dir_all(etc.join("nginx")).expect("etc/nginx");
        std::fs::write(
            etc.join("boxd/nginx.conf.template"),
            "timeout @NGINX_TIMEOUT@;\n",
        )
        .expect("template");
        let original = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("images/base/entrypoint.sh"),
        )
        .expect("entrypoint.sh");
        assert!(original.contains("/etc/nginx/nginx.conf"));
        let script = root.join("entrypoint.sh");
        std::fs::write(
            &script,
            original.replace("/etc/", &format!("{}/", etc.display())),
        )
        .expect("script");

        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new("bash")
            .arg(&script)
            .env("PATH", path)
            .env("STUB_DIR", root)
            .env("STUB_PLAN", plan)
            .env("SECRET_TOKEN", "stub-token")
            .env_remove("BOXD_MCP_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash runs the entrypoint");
        Entrypoint { child, dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Start times of the boxd stub, in seconds.
    fn boxd_runs(&self) -> Vec<f64> {
        std::fs::read_to_string(self.file("boxd.runs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split_whitespace().next()?.parse().ok())
            .collect()
    }

    fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn stderr(&mut self) -> String {
        use std::io::Read;
        let mut text = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    }

    fn stubs_alive(&self) -> usize {
        let mut pids: Vec<i32> = std::fs::read_to_string(self.file("nginx.pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        pids.extend(
            std::fs::read_to_string(self.file("boxd.runs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|line| line.split_whitespace().nth(1)?.parse::<i32>().ok()),
        );
        pids.into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
            })
            .count()
    }
}

impl Drop for Entrypoint {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child; the stubs die with their parent's SIGTERM handling.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn a_usage_error_stops_the_container_with_boxds_message_instead_of_restarting() {
    let mut entrypoint = Entrypoint::start("usage");
    let status = entrypoint
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| {
            panic!(
                "still running; boxd started {} times",
                entrypoint.boxd_runs().len()
            )
        });
    assert_eq!(status.code(), Some(2));
    assert_eq!(entrypoint.boxd_runs().len(), 1, "boxd is not restarted");
    let stderr = entrypoint.stderr();
    assert!(
        stderr.contains("invalid value 'bogus'") && stderr.contains("stopping the container"),
        "{stderr}"
    );
    assert_eq!(entrypoint.stubs_alive(), 0, "nginx is stopped too");
}

#[test]
fn a_crash_is_restarted_with_a_growing_delay_and_sigterm_stops_both() {
    let mut entrypoint = Entrypoint::start("crash");
    let deadline = Instant::now() + Duration::from_secs(20);
    while entrypoint.boxd_runs().len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs = entrypoint.boxd_runs();
    assert_eq!(runs.len(), 3, "two crashes, two restarts");
    assert!(runs[1] - runs[0] >= 0.9, "first delay ~1 s: {runs:?}");
    assert!(runs[2] - runs[1] >= 1.9, "second delay ~2 s: {runs:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while entrypoint.stubs_alive() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(entrypoint.stubs_alive(), 2, "nginx and the third boxd run");

    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(entrypoint.child.id() as i32, libc::SIGTERM);
    }
    let status = entrypoint
        .wait_exit(Duration::from_secs(5))
        .expect("the entrypoint stops within 5 s of SIGTERM");
    assert!(status.success(), "{status:?}");
    let stderr = entrypoint.stderr();
    assert!(
        stderr.contains("boxd exited (status 1); restarting it in 1 s")
            && stderr.contains("restarting it in 2 s"),
        "{stderr}"
    );
    assert_eq!(entrypoint.stubs_alive(), 0, "both stopped");
}
