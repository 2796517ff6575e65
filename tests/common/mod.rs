//! Starts the real `boxd` binary on a free loopback port with its own temporary workspace.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const TOKEN: &str = "test-token";

/// The binary under test: `BOXD_BIN` when set (another build, e.g. a copy of the images' static one),
/// else the one cargo built for this test run (`make test`: the release profile).
pub fn boxd_bin() -> PathBuf {
    std::env::var_os("BOXD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_boxd")))
}

pub struct Server {
    child: Child,
    pub base: String,
    pub workspace: PathBuf,
    _dir: Option<tempfile::TempDir>,
    http: reqwest::Client,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(extra_args: &[&str]) -> Server {
        Server::start_prepared(extra_args, |_| {})
    }

    /// As `start_with`, with `prepare` adjusting the command before it is spawned.
    pub fn start_prepared(extra_args: &[&str], prepare: impl FnOnce(&mut Command)) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let workspace = dir
            .path()
            .canonicalize()
            .expect("canonical temp dir")
            .join("workspace");
        std::fs::create_dir_all(&workspace).expect("workspace dir");
        let mut server = Server::start_on(&workspace, extra_args, prepare);
        server._dir = Some(dir);
        server
    }

    /// Starts boxd on a workspace the caller owns (it outlives this server, e.g. for the next boxd),
    /// with `prepare` adjusting the command (a `pre_exec`, say) before it is spawned.
    pub fn start_on(
        workspace: &Path,
        extra_args: &[&str],
        prepare: impl FnOnce(&mut Command),
    ) -> Server {
        let mut command = Command::new(boxd_bin());
        command
            .args(["serve", "--host", "127.0.0.1", "--port", "0", "--workspace"])
            .arg(workspace)
            .args(extra_args)
            .env("SECRET_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            // The sandboxd family's listeners on free ports: tests run side by side (its own tests
            // name theirs with the flags, which win over these).
            .env("SANDBOXD_GRPC_ADDR", "127.0.0.1:0")
            .env("SANDBOXD_REST_ADDR", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        prepare(&mut command);
        let mut child = command.spawn().expect("boxd starts");
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
            workspace: workspace.to_path_buf(),
            _dir: None,
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
        self.tool_result(
            "run_shell_command",
            &serde_json::json!({ "command": command }),
        )
        .await
    }

    /// Calls `tool` through `POST /tools/TOOL`: its whole result.
    pub async fn tool_result(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> serde_json::Value {
        self.post(&format!("/tools/{tool}"))
            .json(arguments)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json")
    }

    /// Calls `tool` through `POST /tools/TOOL`: whether it answered `isError`, and its first text.
    pub async fn tool_text(&self, tool: &str, arguments: serde_json::Value) -> (bool, String) {
        let result = self.tool_result(tool, &arguments).await;
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (result["isError"] == true, text)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as an OOM kill would: boxd runs no destructor.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether boxd has exited (with its status), without waiting.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then waits for the exit status (`SETTLE` at most: boxd stops its families first, then
    /// gives in-flight requests up to 5 s; on a loaded machine all that takes longer than alone).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        // SAFETY: plain kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + SETTLE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// Starts a live process (`POST /processes`), which must answer 201; returns its status.
pub async fn start_process(server: &Server, request: serde_json::Value) -> serde_json::Value {
    let response = server
        .post("/processes")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    response.json().await.unwrap()
}

/// How long a test waits for what it asserts to come about: a fork, a signal's delivery, a file a
/// child writes. Generous, since on a loaded 2-core machine these take far longer than alone; a test
/// that passes returns as soon as the thing has happened.
pub const SETTLE: Duration = Duration::from_secs(20);

/// Whether `check` holds within `limit`, asked every 20 ms (and once more at the end): what a test
/// asserts about something that happens a little after what it did, never a first look or a sleep.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return check();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls a live process until it has exited (`SETTLE` at most) and returns its last status.
pub async fn wait_exited(server: &Server, id: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let last = server.get(&format!("/processes/{id}")).fetch_json().await;
        if last["status"] == "exited" || tokio::time::Instant::now() >= deadline {
            assert_eq!(last["status"], "exited", "{last}");
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many processes `pgrep SELECTOR ID` finds (`-g` a group, `-s` a session).
pub fn pgrep_count(selector: &str, id: u64) -> usize {
    let out = Command::new("pgrep")
        .args([selector, &id.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

pub type Terminal =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a live process's WebSocket from `offset`, with the bearer header.
pub async fn connect_terminal(server: &Server, id: &str, offset: u64) -> Terminal {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!(
        "{}/processes/{id}/ws?offset={offset}",
        server.base.replace("http", "ws")
    );
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

/// A path as a query value.
pub fn encode(path: &str) -> String {
    percent_encoding::utf8_percent_encode(path, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Reading and writing `path` through `/workspace/file` are both refused with 403.
pub async fn assert_read_and_write_refused(server: &Server, path: &str) {
    let q = encode(path);
    let read = server
        .get(&format!("/workspace/file?path={q}"))
        .fetch_status()
        .await;
    assert_eq!(read, 403, "read {path}");
    let write = server
        .put(&format!("/workspace/file?path={q}"))
        .body("pwned")
        .fetch_status()
        .await;
    assert_eq!(write, 403, "write {path}");
}

/// Whether process `pid` still runs: gone, or a zombie nobody has reaped yet, it does not. The state is
/// the field after the command's closing parenthesis (a command may hold ") Z " itself).
pub fn process_runs(pid: impl std::fmt::Display) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}
