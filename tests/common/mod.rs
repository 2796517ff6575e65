//! Starts the real `boxd` binary on a free loopback port with its own temporary workspace.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const TOKEN: &str = "test-token";

/// The binary under test: `BOXD_BIN` when set (`make smoke-release` points it at the release build, whose
/// profile differs), else the debug build cargo made for this test run.
pub fn boxd_bin() -> PathBuf {
    std::env::var_os("BOXD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_boxd")))
}

pub struct Server {
    child: Child,
    pub base: String,
    pub workspace: PathBuf,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(extra_args: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let workspace = dir
            .path()
            .canonicalize()
            .expect("canonical temp dir")
            .join("workspace");
        std::fs::create_dir_all(&workspace).expect("workspace dir");
        let mut child = Command::new(boxd_bin())
            .args(["serve", "--host", "127.0.0.1", "--port", "0", "--workspace"])
            .arg(&workspace)
            .args(extra_args)
            .env("SECRET_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("boxd starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (address_tx, address_rx) = mpsc::channel();
        // Keeps draining stderr after the address is found, so boxd never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on http://") {
                    let address = line[at + "listening on http://".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    let _ = address_tx.send(address);
                }
                if std::env::var_os("BOXD_TEST_LOG").is_some() {
                    eprintln!("[boxd] {line}");
                }
            }
        });
        let address = address_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("boxd reports its address within 20 s");
        Server {
            child,
            base: format!("http://{address}"),
            workspace,
            _dir: dir,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("http client"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn ws(&self, relative: &str) -> PathBuf {
        self.workspace.join(relative)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(TOKEN)
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(TOKEN)
    }

    pub fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.put(self.url(path)).bearer_auth(TOKEN)
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.delete(self.url(path)).bearer_auth(TOKEN)
    }

    pub fn anonymous(&self) -> &reqwest::Client {
        &self.http
    }

    pub async fn shell(&self, command: &str) -> serde_json::Value {
        self.post("/tools/run_shell_command")
            .json(&serde_json::json!({ "command": command }))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the exit status (bounded).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        // SAFETY: plain kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        for _ in 0..100 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of the item with this `description` in a CallToolResult, if present.
pub fn item<'a>(result: &'a serde_json::Value, description: &str) -> Option<&'a str> {
    result["content"]
        .as_array()?
        .iter()
        .find(|item| item["description"] == description)?["text"]
        .as_str()
}

/// The Python of the venv `make test` prepares (IPython, the `mcp` SDK); `BOXD_TEST_PYTHON` overrides it.
pub fn python() -> String {
    std::env::var("BOXD_TEST_PYTHON")
        .unwrap_or_else(|_| format!("{}/.venv/bin/python", env!("CARGO_MANIFEST_DIR")))
}

pub fn git(workspace: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(workspace)
        .output()
        .expect("git runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Sends and reads the answer, for tests where transport failure is simply a failed test.
pub trait Fetch {
    async fn fetch_json(self) -> serde_json::Value;
    async fn fetch_status(self) -> u16;
    /// Every event of a newline-delimited JSON stream, read to its end (within 20 s).
    async fn fetch_ndjson(self) -> Vec<serde_json::Value>;
}

impl Fetch for reqwest::RequestBuilder {
    async fn fetch_json(self) -> serde_json::Value {
        self.send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json answer")
    }

    async fn fetch_status(self) -> u16 {
        self.send().await.expect("request").status().as_u16()
    }

    async fn fetch_ndjson(self) -> Vec<serde_json::Value> {
        let mut events = NdjsonEvents::new(self.send().await.expect("request"));
        let mut all = Vec::new();
        while let Some(event) = events.next().await {
            all.push(event);
        }
        all
    }
}

/// Reads a newline-delimited JSON response one event at a time, as the events arrive.
pub struct NdjsonEvents {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: Vec<u8>,
}

impl NdjsonEvents {
    pub fn new(response: reqwest::Response) -> Self {
        NdjsonEvents {
            body: Box::pin(response.bytes_stream()),
            buffer: Vec::new(),
        }
    }

    /// The next event, within 20 s; `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<serde_json::Value> {
        use futures_util::StreamExt;
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Some(at) = self.buffer.iter().position(|&byte| byte == b'\n') {
                    let line: Vec<u8> = self.buffer.drain(..=at).collect();
                    return Some(serde_json::from_slice(&line).expect("a JSON line"));
                }
                let chunk = self.body.next().await?.expect("the stream continues");
                self.buffer.extend_from_slice(&chunk);
            }
        })
        .await
        .expect("an event within 20 s")
    }
}
