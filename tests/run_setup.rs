//! `make run` on a machine whose Python has no IPython (issue #23): `scripts/run.sh`, what `make run` runs
//! once the binary is built, makes the kernel's venv itself and serves cells from it; a ready venv costs
//! nothing; with no registry boxd still starts and one line says what is missing and how to fix it.
//! Every case starts from an empty temporary directory and a fresh venv made with `--without-pip`, so
//! nothing installed on the developer's machine can make them pass. The first case installs
//! `images/base/kernel-requirements.txt` from PyPI (pip's cache makes later runs quick).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{TOKEN, item};
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A Python that certainly has no IPython: a venv of `python3` without pip or system site-packages.
fn bare_python(dir: &Path) -> PathBuf {
    let venv = dir.join("bare");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(made.success(), "python3 -m venv --without-pip {venv:?}");
    let python = venv.join("bin/python");
    let has_ipython = Command::new(&python)
        .args(["-c", "import IPython"])
        .stderr(Stdio::null())
        .status()
        .expect("the bare python runs");
    assert!(!has_ipython.success(), "{python:?} must not have IPython");
    python
}

/// The environment `make run` would see on a fresh machine: no interpreter or tool choice of the
/// developer's, the venv and base interpreter given.
fn script(name: &str, venv: &Path, base: &Path) -> Command {
    let mut command = Command::new(Path::new(ROOT).join("scripts").join(name));
    command
        .env("KERNEL_VENV", venv)
        .env("BASE_PYTHON", base)
        .env_remove("PYTHON")
        .env_remove("BOXD_PYTHON")
        .env_remove("BOXD_TOOLS")
        .stdin(Stdio::null());
    command
}

/// A registry that refuses every connection, and no pip configuration that could point elsewhere.
fn without_registry(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PIP_") {
            command.env_remove(name);
        }
    }
    command
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple");
}

/// `scripts/run.sh` serving on a free port, with its stderr lines collected.
struct Run {
    child: Child,
    base: String,
    lines: Vec<String>,
    _workspace: tempfile::TempDir,
}

impl Run {
    fn start(mut command: Command, within: Duration) -> Run {
        let workspace = tempfile::tempdir().expect("workspace");
        let mut child = command
            .env("BOXD_BIN", common::boxd_bin())
            .env("PORT", "0")
            .env("WORKSPACE", workspace.path())
            .env("SECRET_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("scripts/run.sh starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (line_tx, line_rx) = mpsc::channel();
        // Keeps draining stderr for the whole run, so boxd never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        });
        let deadline = Instant::now() + within;
        let mut lines = Vec::new();
        let base = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = line_rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `listening on` within {within:?}: {lines:#?}"));
            if let Some(at) = line.find("listening on http://") {
                let address = line[at + "listening on ".len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                break address;
            }
            lines.push(line);
        };
        Run {
            child,
            base,
            lines,
            _workspace: workspace,
        }
    }

    /// What the set-up said before boxd took over stderr.
    fn said(&self) -> Vec<&str> {
        self.lines
            .iter()
            .map(String::as_str)
            .filter(|line| line.starts_with("make run:"))
            .collect()
    }

    async fn cell(&self, code: &str) -> Value {
        reqwest::Client::new()
            .post(format!("{}/tools/run_ipython_cell", self.base))
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(90))
            .json(&json!({ "code": code }))
            .send()
            .await
            .expect("the cell answers")
            .json()
            .await
            .expect("json")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name==version` pins of the base image's kernel list.
fn kernel_pins() -> Vec<(String, String)> {
    let list = std::fs::read_to_string(Path::new(ROOT).join("images/base/kernel-requirements.txt"))
        .expect("the kernel list");
    list.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, version) = line
                .split_once("==")
                .expect("every kernel package is pinned");
            (name.to_owned(), version.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn make_run_makes_the_kernel_venv_on_a_python_without_ipython_and_serves_a_cell() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = bare_python(dir.path());
    let venv = dir.path().join("kernel");

    let started = Instant::now();
    let run = Run::start(script("run.sh", &venv, &base), Duration::from_secs(600));
    println!(
        "first make run, set-up to listening: {:?}",
        started.elapsed()
    );
    let said = run.said();
    assert_eq!(said.len(), 1, "only the progress line: {said:#?}");
    assert!(said[0].contains("preparing"), "{said:#?}");

    let versions = kernel_pins()
        .iter()
        .map(|(name, _)| format!("print(importlib.metadata.version({name:?}))"))
        .collect::<Vec<_>>()
        .join("\n");
    let answer = run
        .cell(&format!(
            "import importlib.metadata, sys\nprint(sys.prefix)\n{versions}"
        ))
        .await;
    assert_eq!(answer["isError"], false, "{answer}");
    let stdout = item(&answer, "stdout").expect("stdout");
    let mut printed = stdout.lines();
    assert_eq!(printed.next(), Some(venv.to_str().expect("utf-8 path")));
    for (name, version) in kernel_pins() {
        assert_eq!(printed.next(), Some(version.as_str()), "{name}: {stdout}");
    }
    drop(run);

    // Ready and matching: no pip, no Python start, no network (the registry is unreachable anyway).
    let log = venv.join("pip.log");
    let log_written = std::fs::metadata(&log)
        .and_then(|m| m.modified())
        .expect("pip.log");
    let mut again = script("kernel-venv.sh", &venv, &base);
    without_registry(&mut again);
    let asked = Instant::now();
    let output = again.output().expect("kernel-venv.sh runs");
    let took = asked.elapsed();
    println!("second set-up: {took:?}");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        venv.join("bin/python").to_str().expect("utf-8 path")
    );
    assert!(output.stderr.is_empty(), "{output:?}");
    // pip alone takes longer than this to start; the bound leaves room for a loaded CI machine.
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(
        std::fs::metadata(&log).and_then(|m| m.modified()).ok(),
        Some(log_written),
        "pip ran again"
    );
}

#[tokio::test]
async fn without_a_registry_boxd_still_starts_and_one_line_says_how_to_fix_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = bare_python(dir.path());
    let mut command = script("run.sh", &dir.path().join("kernel"), &base);
    without_registry(&mut command);
    let run = Run::start(command, Duration::from_secs(120));
    let problems: Vec<&str> = run
        .said()
        .into_iter()
        .filter(|line| !line.contains("preparing"))
        .collect();
    assert_eq!(problems.len(), 1, "{:#?}", run.lines);
    assert!(
        problems[0].contains("could not install") && problems[0].contains("fix: make kernel-venv"),
        "{problems:#?}"
    );

    // The ipython family is `failed` with the reason: a cell answers 503 naming it.
    let answer = run.cell("1").await;
    let text = answer.to_string();
    assert!(text.contains("IPython is not installed"), "{text}");
}

#[test]
fn without_the_venv_module_one_line_names_the_package() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = bare_python(dir.path());
    // Debian's python3 without python3-venv: `import ensurepip` fails, everything else works.
    let no_venv = dir.path().join("python-without-venv");
    std::fs::write(
        &no_venv,
        format!(
            "#!/bin/sh\ncase \"$*\" in *ensurepip*) echo 'No module named ensurepip' >&2; exit 1;; esac\n\
             exec {} \"$@\"\n",
            base.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(
        &no_venv,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("executable");

    let output = script("kernel-venv.sh", &dir.path().join("kernel"), &no_venv)
        .output()
        .expect("kernel-venv.sh runs");
    assert!(!output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        no_venv.to_str().expect("utf-8 path"),
        "the kernel falls back to the base interpreter"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no venv/ensurepip module")
            && stderr.contains("fix: sudo apt-get install -y python3-venv && make run"),
        "{stderr}"
    );
    assert!(!dir.path().join("kernel").exists());
}
