//! The sandboxd family on the wire: its REST API (reqwest) and its gRPC ProcessService (a tonic client
//! over the generated stubs), against the real binary on free ports.

use crate::common;

use std::time::Duration;

use common::{Server, process_runs};
use futures_util::StreamExt;
use serde_json::Value;

#[allow(clippy::all, dead_code)]
mod pb {
    include!("../src/sandboxd/generated/process.v1.rs");
}

use pb::process_service_client::ProcessServiceClient;
use pb::start_response::Event;
use pb::write_stdin_request::Payload;
use pb::{
    ExecuteRequest, ProcessConfig, Pty, ResizeTtyRequest, SendSignalRequest, Signal, StartRequest,
    StartResponse, WriteStdinRequest,
};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

struct Sandboxd {
    server: Server,
    rest: String,
    grpc: String,
    http: reqwest::Client,
}

impl Sandboxd {
    async fn start() -> Sandboxd {
        Sandboxd::start_with_env(&[]).await
    }

    async fn start_with_env(env: &[(&str, &str)]) -> Sandboxd {
        let (grpc_port, rest_port) = (free_port(), free_port());
        let grpc = format!("127.0.0.1:{grpc_port}");
        let rest = format!("127.0.0.1:{rest_port}");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let server = Server::start_prepared(
            &[
                "--sandboxd-grpc-addr",
                &grpc,
                "--sandboxd-rest-addr",
                &rest,
                "--tools",
                "shell,ipython,filesystem,workspace,git,processes,watch,mcp,sandboxd",
            ],
            move |command| {
                command.envs(env);
            },
        );
        let http = reqwest::Client::new();
        let health = format!("http://{rest}/v1/health");
        let mut ready = false;
        for _ in 0..400 {
            if http
                .get(&health)
                .send()
                .await
                .is_ok_and(|answer| answer.status() == 200)
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(ready, "sandboxd's REST listener answers within 10 s");
        Sandboxd {
            server,
            rest: format!("http://{rest}"),
            grpc: format!("http://{grpc}"),
            http,
        }
    }

    fn files(&self, path: &str) -> String {
        format!("{}/v1/files/{path}", self.rest)
    }

    async fn client(&self) -> ProcessServiceClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(self.grpc.clone())
            .expect("endpoint")
            .connect()
            .await
            .expect("gRPC connects");
        ProcessServiceClient::new(channel)
    }
}

async fn error_code(answer: reqwest::Response) -> (u16, String) {
    let status = answer.status().as_u16();
    let body: Value = answer.json().await.expect("an error body");
    assert!(body["message"].is_string(), "{body}");
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

fn config(command: &[&str]) -> ProcessConfig {
    ProcessConfig {
        command: command.iter().map(|part| (*part).to_owned()).collect(),
        ..ProcessConfig::default()
    }
}

#[tokio::test]
async fn files_are_written_read_listed_probed_and_deleted() {
    let sandboxd = Sandboxd::start().await;
    let http = &sandboxd.http;
    // The SDK joins segments with %2F; parents are created; the mode is applied as given.
    let put = http
        .put(sandboxd.files("src%2Fmain.py?mode=0755"))
        .header("content-type", "application/octet-stream")
        .body("print(1)\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    let written = sandboxd.server.ws("src/main.py");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "print(1)\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&written).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);

    let read = http
        .get(sandboxd.files("src/main.py"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.headers()["content-type"], "application/octet-stream");
    assert_eq!(read.text().await.unwrap(), "print(1)\n");

    // HEAD: the metadata, no body; a missing path is 404.
    let head = http
        .head(sandboxd.files("src%2Fmain.py"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "9");
    assert!(head.bytes().await.unwrap().is_empty());
    let missing = http.head(sandboxd.files("nope.txt")).send().await.unwrap();
    assert_eq!(missing.status(), 404);

    // A directory is its DirectoryListing; `/workspace/...` names the root wherever it is.
    let listing: Value = http
        .get(sandboxd.files("%2Fworkspace%2Fsrc"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["path"], "/workspace/src");
    let entry = &listing["entries"][0];
    assert_eq!(entry["name"], "main.py");
    assert_eq!(entry["type"], "file");
    assert_eq!(entry["size"], 9);
    assert_eq!(entry["mode"], "0755");
    assert!(entry["modified_at"].as_str().unwrap().ends_with('Z'));
    let root: Value = http
        .get(sandboxd.files(""))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(root["entries"][0]["type"], "directory");

    // multipart/form-data, part `file`; overwrite in place of the old content.
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"two".to_vec()).file_name("x"),
    );
    let put = http
        .put(sandboxd.files("src%2Fmain.py"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "two");
    let mode = std::fs::metadata(&written).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644, "the default mode");

    // Refusals: a directory as target, a bad mode.
    let onto_dir = http
        .put(sandboxd.files("src"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(onto_dir).await, (400, "INVALID_ARGUMENT".into()));
    let bad_mode = http
        .put(sandboxd.files("f?mode=755"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(bad_mode).await, (400, "INVALID_ARGUMENT".into()));

    // DELETE: 409 on a non-empty directory, then recursive; 404 when missing; the root only emptied.
    let not_empty = http.delete(sandboxd.files("src")).send().await.unwrap();
    assert_eq!(error_code(not_empty).await, (409, "CONFLICT".into()));
    let gone = http
        .delete(sandboxd.files("src?recursive=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);
    assert!(!sandboxd.server.ws("src").exists());
    let missing = http.delete(sandboxd.files("src")).send().await.unwrap();
    assert_eq!(error_code(missing).await, (404, "NOT_FOUND".into()));
    std::fs::write(sandboxd.server.ws("left.txt"), "x").unwrap();
    let root = http.delete(sandboxd.files("")).send().await.unwrap();
    assert_eq!(error_code(root).await, (409, "CONFLICT".into()));
    let cleared = http
        .delete(sandboxd.files("%2E?recursive=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), 204);
    assert!(sandboxd.server.workspace.is_dir());
    assert_eq!(
        std::fs::read_dir(&sandboxd.server.workspace)
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn paths_leading_outside_are_refused_with_permission_denied() {
    let sandboxd = Sandboxd::start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "OUTSIDE").unwrap();
    std::os::unix::fs::symlink(outside.path(), sandboxd.server.ws("out")).unwrap();
    let http = &sandboxd.http;
    for path in [
        "%2E%2E%2Fx",
        "..%2F..%2Fetc%2Fpasswd",
        "out%2Fsecret",
        "out",
    ] {
        let read = http.get(sandboxd.files(path)).send().await.unwrap();
        assert_eq!(
            error_code(read).await,
            (403, "PERMISSION_DENIED".into()),
            "{path}"
        );
    }
    let write = http
        .put(sandboxd.files("out%2Fvictim"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(write).await, (403, "PERMISSION_DENIED".into()));
    assert!(!outside.path().join("victim").exists());
    // A link leading outside is left out of a listing.
    let listing: Value = http
        .get(sandboxd.files(""))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["entries"], serde_json::json!([]));
}

#[tokio::test]
async fn health_and_metadata_withhold_secret_looking_names() {
    let sandboxd = Sandboxd::start_with_env(&[
        ("SANDBOX_ID", "sb-1"),
        ("SANDBOX_API_TOKEN", "hidden"),
        ("OTHER", "not allowlisted"),
    ])
    .await;
    let health: Value = sandboxd
        .http
        .get(format!("{}/v1/health", sandboxd.rest))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let metadata: Value = sandboxd
        .http
        .get(format!("{}/v1/metadata", sandboxd.rest))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["env"], serde_json::json!({"SANDBOX_ID": "sb-1"}));
}

#[tokio::test]
async fn execute_answers_output_exit_codes_and_errors_as_grpc_statuses() {
    let sandboxd = Sandboxd::start().await;
    let mut client = sandboxd.client().await;
    std::fs::create_dir(sandboxd.server.ws("sub")).unwrap();
    let mut request = config(&["/bin/sh", "-c", "pwd; echo \"$FOO\"; echo oops >&2; exit 3"]);
    request.env_vars.insert("FOO".into(), "bar".into());
    request.cwd = Some("/workspace/sub".into());
    let answer = client
        .execute(ExecuteRequest {
            config: Some(request),
        })
        .await
        .unwrap()
        .into_inner();
    let expected = format!("{}\nbar\n", sandboxd.server.ws("sub").display());
    assert_eq!(String::from_utf8_lossy(&answer.stdout), expected);
    assert_eq!(answer.stderr, b"oops\n");
    assert_eq!(answer.exit_code, 3);

    // A signal's exit names it (128+N), where the reference daemon says -1.
    let killed = client
        .execute(ExecuteRequest {
            config: Some(config(&["/bin/sh", "-c", "kill -9 $$"])),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(killed.exit_code, 137);

    let empty = client
        .execute(ExecuteRequest {
            config: Some(config(&[])),
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
    let mut escaping = config(&["true"]);
    escaping.cwd = Some("../..".into());
    let escaping = client
        .execute(ExecuteRequest {
            config: Some(escaping),
        })
        .await
        .unwrap_err();
    assert_eq!(escaping.code(), tonic::Code::PermissionDenied);
    let missing = client
        .execute(ExecuteRequest {
            config: Some(config(&["/no/such/program"])),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
}

async fn gone_within(pid: i32, limit: Duration) -> bool {
    let until = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < until {
        if !process_runs(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    !process_runs(pid)
}

#[tokio::test]
async fn a_passed_deadline_kills_the_whole_group_of_execute() {
    let sandboxd = Sandboxd::start().await;
    let mut client = sandboxd.client().await;
    let pid_file = sandboxd.server.ws("background.pid");
    let mut request = tonic::Request::new(ExecuteRequest {
        config: Some(config(&[
            "/bin/sh",
            "-c",
            "sleep 60 & echo $! > background.pid; wait",
        ])),
    });
    // Long enough for a loaded machine's shell to have written the pid before the group is killed.
    request.set_timeout(Duration::from_secs(3));
    let err = client.execute(request).await.unwrap_err();
    // tonic's channel ends the call itself at the deadline ("Timeout expired", CANCELLED); grpcio
    // reports DEADLINE_EXCEEDED, as the server does when it gets there first.
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );
    let mut pid = None;
    for _ in 0..250 {
        if let Some(read) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
        {
            pid = Some(read);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = pid.expect("the background child's pid");
    assert!(
        gone_within(pid, Duration::from_secs(5)).await,
        "the background child is killed with the group"
    );
}

/// Starts `command` and takes its first event, which must be the InitEvent.
async fn start(
    client: &mut ProcessServiceClient<tonic::transport::Channel>,
    command: &[&str],
    pty: Option<Pty>,
) -> (tonic::Streaming<StartResponse>, pb::InitEvent) {
    let mut stream = client
        .start(StartRequest {
            config: Some(config(command)),
            pty,
        })
        .await
        .unwrap()
        .into_inner();
    let Event::Init(init) = next_event(&mut stream).await else {
        panic!("the first event is InitEvent");
    };
    (stream, init)
}

async fn next_event(stream: &mut tonic::Streaming<StartResponse>) -> Event {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream goes on")
        .expect("no error")
        .event
        .expect("an event")
}

/// Collects stdout until it contains `wanted`.
async fn stdout_until(stream: &mut tonic::Streaming<StartResponse>, wanted: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(wanted) {
        match next_event(stream).await {
            Event::Stdout(data) => seen.push_str(&String::from_utf8_lossy(&data)),
            Event::Exit(exit) => panic!("exited ({}) before {wanted:?}: {seen:?}", exit.exit_code),
            _ => {}
        }
    }
    seen
}

#[tokio::test]
async fn start_streams_output_takes_stdin_and_eof_and_shares_the_table() {
    let sandboxd = Sandboxd::start().await;
    let mut client = sandboxd.client().await;
    let (mut stream, init) = start(
        &mut client,
        &["/bin/sh", "-c", "echo ready; echo warn >&2; cat"],
        None,
    )
    .await;
    let id = init.process_id;
    assert!(id > 0);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    while !(stdout.contains("ready") && stderr.contains("warn")) {
        match next_event(&mut stream).await {
            Event::Stdout(data) => stdout.push_str(&String::from_utf8_lossy(&data)),
            Event::Stderr(data) => stderr.push_str(&String::from_utf8_lossy(&data)),
            other => panic!("unexpected {other:?}"),
        }
    }
    // One table: the process is a live process of `/processes` too.
    let listed: Value = sandboxd
        .server
        .get("/processes")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["processes"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    client
        .write_stdin(WriteStdinRequest {
            process_id: id,
            payload: Some(Payload::Input(b"echoed\n".to_vec())),
        })
        .await
        .unwrap();
    stdout_until(&mut stream, "echoed").await;
    client
        .write_stdin(WriteStdinRequest {
            process_id: id,
            payload: Some(Payload::Eof(())),
        })
        .await
        .unwrap();
    loop {
        if let Event::Exit(exit) = next_event(&mut stream).await {
            assert_eq!(exit.exit_code, 0);
            break;
        }
    }
    assert!(
        stream.next().await.is_none(),
        "the stream ends after ExitEvent"
    );

    let unknown = client
        .write_stdin(WriteStdinRequest {
            process_id: 9999,
            payload: Some(Payload::Input(b"x".to_vec())),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    let resize = client
        .resize_tty(ResizeTtyRequest {
            process_id: id,
            cols: 80,
            rows: 24,
        })
        .await
        .unwrap_err();
    assert_eq!(resize.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test]
async fn signals_reach_the_group_and_the_exit_names_them() {
    let sandboxd = Sandboxd::start().await;
    let mut client = sandboxd.client().await;
    let (mut stream, init) = start(
        &mut client,
        &["/bin/sh", "-c", "sleep 60 & echo $!; wait"],
        None,
    )
    .await;
    let pid: i32 = stdout_until(&mut stream, "\n")
        .await
        .trim()
        .parse()
        .unwrap();
    let unspecified = client
        .send_signal(SendSignalRequest {
            process_id: init.process_id,
            signal: Signal::Unspecified as i32,
        })
        .await
        .unwrap_err();
    assert_eq!(unspecified.code(), tonic::Code::InvalidArgument);
    client
        .send_signal(SendSignalRequest {
            process_id: init.process_id,
            signal: Signal::Sigterm as i32,
        })
        .await
        .unwrap();
    loop {
        if let Event::Exit(exit) = next_event(&mut stream).await {
            assert_eq!(exit.exit_code, 128 + 15);
            break;
        }
    }
    assert!(
        gone_within(pid, Duration::from_secs(5)).await,
        "the whole group got it"
    );
    let unknown = client
        .send_signal(SendSignalRequest {
            process_id: 4242,
            signal: Signal::Sigkill as i32,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn a_pty_is_sized_resized_and_a_cancelled_start_kills_its_group() {
    let sandboxd = Sandboxd::start().await;
    let mut client = sandboxd.client().await;
    let (mut stream, init) = start(
        &mut client,
        &[
            "/bin/sh",
            "-c",
            "stty size; read line; stty size; sleep 60 & echo bg=$!; wait",
        ],
        Some(Pty { cols: 80, rows: 24 }),
    )
    .await;
    stdout_until(&mut stream, "24 80").await;
    client
        .resize_tty(ResizeTtyRequest {
            process_id: init.process_id,
            cols: 100,
            rows: 30,
        })
        .await
        .unwrap();
    client
        .write_stdin(WriteStdinRequest {
            process_id: init.process_id,
            payload: Some(Payload::Input(b"go\n".to_vec())),
        })
        .await
        .unwrap();
    let mut seen = String::new();
    let background = |seen: &str| {
        seen.split("bg=")
            .nth(1)
            .filter(|rest| rest.contains('\n'))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|pid| pid.parse::<i32>().ok())
    };
    while !(seen.contains("30 100") && background(&seen).is_some()) {
        match next_event(&mut stream).await {
            Event::Stdout(data) => seen.push_str(&String::from_utf8_lossy(&data)),
            Event::Exit(exit) => panic!("exited ({}): {seen:?}", exit.exit_code),
            _ => {}
        }
    }
    let pid = background(&seen).unwrap_or_default();
    assert!(process_runs(pid));
    // Cancelling the call (dropping the stream) ends the whole group, the background child too.
    drop(stream);
    assert!(
        gone_within(pid, Duration::from_secs(5)).await,
        "a cancelled Start kills its group"
    );
}

/// What of gRPC's reflection messages (`grpc.reflection.v1[alpha].ServerReflection`) a service listing
/// needs: the oneof's `list_services` (tag 7) and the answer's `list_services_response` (tag 6).
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionRequest {
    #[prost(string, tag = "1")]
    host: String,
    #[prost(string, optional, tag = "7")]
    list_services: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionResponse {
    #[prost(message, optional, tag = "6")]
    list_services_response: Option<ServiceList>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServiceList {
    #[prost(message, repeated, tag = "1")]
    service: Vec<ServiceName>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServiceName {
    #[prost(string, tag = "1")]
    name: String,
}

/// Server reflection (what `grpcurl -plaintext HOST:PORT list` asks), in both versions clients use.
#[tokio::test]
async fn reflection_lists_the_process_service() {
    let sandboxd = Sandboxd::start().await;
    for version in ["v1", "v1alpha"] {
        let channel = tonic::transport::Endpoint::from_shared(sandboxd.grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let path = format!("/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo");
        let request = tonic::Request::new(futures_util::stream::iter([ReflectionRequest {
            host: String::new(),
            list_services: Some(String::new()),
        }]));
        let codec = tonic_prost::ProstCodec::<ReflectionRequest, ReflectionResponse>::default();
        let mut answers = grpc
            .streaming(request, path.parse().unwrap(), codec)
            .await
            .unwrap()
            .into_inner();
        let answer = answers.message().await.unwrap().expect("one answer");
        let names: Vec<String> = answer
            .list_services_response
            .expect("a service list")
            .service
            .into_iter()
            .map(|service| service.name)
            .collect();
        assert!(
            names.iter().any(|name| name == "process.v1.ProcessService"),
            "{version}: {names:?}"
        );
    }
}

/// `Execute(command)` over `client`: its answer or status.
async fn execute(
    client: &mut ProcessServiceClient<tonic::transport::Channel>,
    command: &[&str],
) -> Result<pb::ExecuteResponse, tonic::Status> {
    client
        .execute(ExecuteRequest {
            config: Some(config(command)),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Raw requests to sandboxd's listeners from a process of `user` (via `setpriv`; the test's own user
/// when `None`), by Debian's Python (one any user can run, unlike a pyenv under /root): for each, the first bytes answered, or `closed` when the connection ended unanswered.
fn raw_answers(user: Option<&str>, requests: &[(&str, Vec<u8>)]) -> Vec<String> {
    let script = r#"
import json, socket, sys
out = []
for address, payload in json.load(sys.stdin):
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(bytes(payload))
            data = s.recv(64)
        out.append(data.decode("latin-1") if data else "closed")
    except (ConnectionResetError, BrokenPipeError):
        out.append("closed")
    except OSError as err:
        out.append(f"error {err}")
print(json.dumps(out))
"#;
    let mut command = match user {
        Some(user) => {
            let mut command = std::process::Command::new("setpriv");
            command.args([
                &format!("--reuid={user}"),
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                script,
            ]);
            command
        }
        None => {
            let mut command = std::process::Command::new("/usr/bin/python3");
            command.args(["-c", script]);
            command
        }
    };
    let input: Vec<(String, Vec<u8>)> = requests
        .iter()
        .map(|(address, payload)| ((*address).to_owned(), payload.clone()))
        .collect();
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(&serde_json::to_vec(&input).expect("json"))
            .expect("requests written");
    }
    let output = child.wait_with_output().expect("python3 ends");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("no answers: {}", String::from_utf8_lossy(&output.stdout)))
}

/// `Execute(["sh", "-c", "id -u"])` as one gRPC frame in a plain HTTP/1.1 POST (no HTTP/2, no gRPC
/// content type: what a web page or a script can send).
fn http1_execute(address: &str) -> Vec<u8> {
    use prost::Message;
    let request = ExecuteRequest {
        config: Some(config(&["sh", "-c", "id -u"])),
    };
    let message = request.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    frame.extend_from_slice(&message);
    let mut bytes = format!(
        "POST /process.v1.ProcessService/Execute HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
        frame.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&frame);
    bytes
}

fn http1_get(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// HTTP/2 with prior knowledge: the connection preface and an empty SETTINGS frame.
fn http2_preface() -> Vec<u8> {
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    bytes
}

/// sandboxd runs anything as boxd's user, without a token: a process of another user (the browser's,
/// a training instance's, anyone's) is refused at accept on both listeners, over HTTP/2 and HTTP/1.1;
/// boxd's own user gets gRPC only as gRPC (HTTP/1.1 refused), and REST only under a host name that
/// cannot be rebound.
#[tokio::test]
async fn only_boxd_user_reaches_the_listeners_and_only_as_their_clients_speak() {
    let sandboxd = Sandboxd::start().await;
    let grpc = sandboxd.grpc.trim_start_matches("http://").to_owned();
    let rest = sandboxd.rest.trim_start_matches("http://").to_owned();
    let requests = [
        (grpc.as_str(), http1_execute(&grpc)),
        (grpc.as_str(), http2_preface()),
        (rest.as_str(), http1_get(&rest, "/v1/health")),
        (rest.as_str(), http1_get("evil.example:8080", "/v1/health")),
    ];
    let own = raw_answers(None, &requests);
    assert!(own[0].starts_with("HTTP/1.1 505"), "{own:?}");
    // An HTTP/2 server answers the preface with its SETTINGS frame (type 4).
    assert!(own[1].as_bytes().get(3) == Some(&4), "{own:?}");
    assert!(own[2].starts_with("HTTP/1.1 200"), "{own:?}");
    assert!(own[3].starts_with("HTTP/1.1 421"), "{own:?}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let other = raw_answers(Some("65534"), &requests);
        assert_eq!(other, vec!["closed"; 4], "{other:?}");
    }
    // The real client still works.
    let mut client = sandboxd.client().await;
    let answer = execute(&mut client, &["sh", "-c", "echo ok"])
        .await
        .expect("Execute over gRPC");
    assert_eq!(answer.stdout, b"ok\n");
}

/// An `Execute` whose call names no deadline still ends: at `--sandboxd-exec-timeout`.
#[tokio::test]
async fn an_execute_without_a_deadline_ends_at_the_exec_timeout() {
    let sandboxd = Sandboxd::start_with_env(&[("SANDBOX_EXEC_TIMEOUT_SECONDS", "1")]).await;
    let mut client = sandboxd.client().await;
    let started = std::time::Instant::now();
    let answer = client
        .execute(ExecuteRequest {
            config: Some(config(&["sleep", "30"])),
        })
        .await;
    let status = answer.expect_err("the command outlived the timeout");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// A pooled pod nobody has claimed runs nothing through sandboxd (what `kubectl port-forward` to a warm
/// pod reaches); after `POST /init` it serves.
#[tokio::test]
async fn an_unclaimed_pool_pod_serves_nothing_on_sandboxd() {
    const POOL_SECRET: &str = "pool-secret-0123456789-sandboxd";
    const SESSION: &str = "session-token-0123456789-sandboxd";
    let (grpc_port, rest_port) = (free_port(), free_port());
    let grpc = format!("127.0.0.1:{grpc_port}");
    let rest = format!("127.0.0.1:{rest_port}");
    let server = Server::start_prepared(
        &[
            "--sandboxd-grpc-addr",
            &grpc,
            "--sandboxd-rest-addr",
            &rest,
            "--tools",
            "shell,processes,sandboxd",
        ],
        |command| {
            command
                .env_remove("SECRET_TOKEN")
                .env("BOXD_POOL_SECRET", POOL_SECRET);
        },
    );
    let http = reqwest::Client::new();
    let health = format!("http://{rest}/v1/health");
    let mut status = 0;
    for _ in 0..200 {
        if let Ok(answer) = http.get(&health).send().await {
            status = answer.status().as_u16();
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status, 503, "REST before the claim");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("gRPC connects");
    let mut client = ProcessServiceClient::new(channel);
    let refused = execute(&mut client, &["sh", "-c", "echo planted"])
        .await
        .expect_err("Execute before the claim");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let claimed = http
        .post(server.url("/init"))
        .bearer_auth(POOL_SECRET)
        .json(&serde_json::json!({ "token": SESSION, "env": {} }))
        .send()
        .await
        .expect("POST /init");
    assert_eq!(claimed.status(), 200);
    assert_eq!(
        http.get(&health).send().await.expect("health").status(),
        200
    );
    let answer = execute(&mut client, &["sh", "-c", "echo served"])
        .await
        .expect("Execute after the claim");
    assert_eq!(answer.stdout, b"served\n");
}

/// `Start` of a program that is not there: `NOT_FOUND`, as sandboxd (and `Execute`) answer it.
#[tokio::test]
async fn start_of_a_missing_program_is_not_found() {
    let sandboxd = Sandboxd::start().await;
    let mut client = sandboxd.client().await;
    for program in ["no-such-program-anywhere", "/no/such/program"] {
        let refused = client
            .start(StartRequest {
                config: Some(config(&[program])),
                pty: None,
            })
            .await
            .expect_err("a missing program does not start");
        assert_eq!(
            refused.code(),
            tonic::Code::NotFound,
            "{program}: {refused:?}"
        );
    }
}
