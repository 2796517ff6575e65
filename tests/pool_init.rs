//! Pool mode: a pod of a warm pool starts with no token, answers only its probes and `POST /init`
//! until one init authenticated with the pool secret sets the session token and the children's
//! environment, and from then on accepts only the session token.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Server, item};
use serde_json::{Value, json};

const POOL_SECRET: &str = "pool-secret-0123456789abcdef";
const SESSION: &str = "session-token-0123456789";

struct Pooled {
    server: Server,
    _secret_dir: tempfile::TempDir,
}

fn secret_file(contents: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pool-secret");
    std::fs::write(&path, contents).expect("write the pool secret");
    (dir, path)
}

/// A boxd in pool mode: no `SECRET_TOKEN`, the secret in a file (with the newline a mounted Secret
/// or `echo` leaves).
fn start_pooled() -> Pooled {
    start_pooled_with(&["--tools", "shell,processes"])
}

fn start_pooled_with(extra_args: &[&str]) -> Pooled {
    let (dir, path) = secret_file(&format!("{POOL_SECRET}\n"));
    let path = path.to_str().expect("utf-8 path").to_owned();
    let mut args = vec!["--pool-secret-file", path.as_str()];
    args.extend_from_slice(extra_args);
    let server = Server::start_prepared(&args, |command| {
        command.env_remove("SECRET_TOKEN");
    });
    Pooled {
        server,
        _secret_dir: dir,
    }
}

impl Pooled {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self
            .server
            .anonymous()
            .request(method, self.server.url(path));
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn init(&self, bearer: Option<&str>, body: &Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            "/init",
            bearer,
            Some(&body.to_string()),
        )
        .await
    }

    async fn shell(&self, bearer: &str, command: &str) -> (u16, Value) {
        let body = json!({ "command": command }).to_string();
        self.call(
            reqwest::Method::POST,
            "/tools/run_shell_command",
            Some(bearer),
            Some(&body),
        )
        .await
    }
}

fn detail(body: &Value) -> &str {
    body["detail"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn before_init_only_the_probes_answer() {
    let pooled = start_pooled();
    for probe in ["/livez", "/fastapi/livez"] {
        let (status, _) = pooled.call(reqwest::Method::GET, probe, None, None).await;
        assert_eq!(status, 200, "{probe}");
    }
    // Readiness is the families' (a warm pod counts as ready before its claim), never a 403.
    let (status, body) = pooled
        .call(reqwest::Method::GET, "/readyz/status", None, None)
        .await;
    assert!(status == 200 || status == 503, "{status} {body}");
    assert!(body.get("ready").is_some(), "{body}");

    for bearer in [None, Some(POOL_SECRET), Some("anything-at-all-here")] {
        for path in ["/healthz", "/readyz", "/fastapi/healthz", "/processes"] {
            let (status, body) = pooled.call(reqwest::Method::GET, path, bearer, None).await;
            assert_eq!(status, 403, "{path} with {bearer:?}: {body}");
            assert!(
                detail(&body).contains("not been claimed yet"),
                "{path}: {body}"
            );
        }
        let (status, body) = pooled.shell(bearer.unwrap_or("x"), "echo hi").await;
        assert_eq!(status, 403, "{body}");
    }
}

#[tokio::test]
async fn init_with_a_wrong_secret_or_none_is_403_and_claims_nothing() {
    let pooled = start_pooled();
    let body = json!({ "token": SESSION });
    for bearer in [None, Some("not-the-pool-secret-at-all"), Some(SESSION)] {
        let (status, answer) = pooled.init(bearer, &body).await;
        assert_eq!(status, 403, "{bearer:?}: {answer}");
        assert!(detail(&answer).contains("pool secret"), "{answer}");
    }
    let (status, _) = pooled.shell(SESSION, "true").await;
    assert_eq!(status, 403, "a refused init set no token");
    let (status, answer) = pooled.init(Some(POOL_SECRET), &body).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn after_init_only_the_session_token_works_and_a_second_init_is_409() {
    let pooled = start_pooled();
    let (status, answer) = pooled
        .init(Some(POOL_SECRET), &json!({ "token": SESSION }))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({ "initialized": true }));

    let (status, result) = pooled.shell(SESSION, "echo claimed").await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(item(&result, "stdout"), Some("claimed\n"));
    let (status, _) = pooled
        .call(
            reqwest::Method::GET,
            "/fastapi/healthz",
            Some(SESSION),
            None,
        )
        .await;
    assert_eq!(status, 200);

    let (status, answer) = pooled.shell(POOL_SECRET, "echo stolen").await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        detail(&answer).contains("pool secret is not accepted"),
        "{answer}"
    );
    let (status, _) = pooled.shell("session-token-wrong-guess", "true").await;
    assert_eq!(status, 403);

    // A second claim, by whoever holds a credential of this pod, is told the pod is taken; a
    // stranger only learns that it is refused.
    let second = json!({ "token": "another-session-token-000" });
    for bearer in [POOL_SECRET, SESSION] {
        let (status, answer) = pooled.init(Some(bearer), &second).await;
        assert_eq!(status, 409, "{answer}");
        assert!(detail(&answer).contains("already initialised"), "{answer}");
    }
    let (status, _) = pooled.init(Some("a-stranger-guessing-0000"), &second).await;
    assert_eq!(status, 403);
    let (status, _) = pooled
        .call(
            reqwest::Method::POST,
            "/fastapi/init",
            Some(POOL_SECRET),
            Some(&second.to_string()),
        )
        .await;
    assert_eq!(status, 409);
    let (status, _) = pooled.shell("another-session-token-000", "true").await;
    assert_eq!(status, 403, "the second init changed nothing");
    let (status, _) = pooled.shell(SESSION, "true").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn children_started_after_init_get_its_env_and_not_the_token() {
    let pooled = start_pooled();
    let (status, answer) = pooled
        .init(
            Some(POOL_SECRET),
            &json!({
                "token": SESSION,
                "env": { "CLAIM_ID": "claim-42", "CLAIM_SPACES": "a b  c", "HOME": "/tmp/claimed" }
            }),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, result) = pooled
        .shell(
            SESSION,
            "printf '%s|%s|%s|%s' \"$CLAIM_ID\" \"$CLAIM_SPACES\" \"$HOME\" \"${SECRET_TOKEN:-unset}\"",
        )
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        item(&result, "stdout"),
        Some("claim-42|a b  c|/tmp/claimed|unset")
    );
    // A live process is another spawn site: it gets the layer too.
    let (status, started) = pooled
        .call(
            reqwest::Method::POST,
            "/processes",
            Some(SESSION),
            Some(&json!({ "command": "echo \"$CLAIM_ID\"" }).to_string()),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().expect("process id").to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let output = loop {
        let (status, body) = pooled
            .call(
                reqwest::Method::GET,
                &format!("/processes/{id}/output"),
                Some(SESSION),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let text = body.to_string();
        if text.contains("claim-42") || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(output.contains("claim-42"), "{output}");
}

/// The secret itself in `BOXD_POOL_SECRET` (a Secret's `secretKeyRef` in the manifests, so no file
/// holds it) is pool mode as the file is, and no child sees it.
#[tokio::test]
async fn the_pool_secret_from_the_environment_is_pool_mode_and_no_child_sees_it() {
    let server = Server::start_prepared(&["--tools", "shell"], |command| {
        command
            .env_remove("SECRET_TOKEN")
            .env("BOXD_POOL_SECRET", POOL_SECRET);
    });
    let pooled = Pooled {
        server,
        _secret_dir: tempfile::tempdir().expect("temp dir"),
    };
    let (status, body) = pooled.shell(POOL_SECRET, "true").await;
    assert_eq!(status, 403, "{body}");
    let (status, answer) = pooled
        .init(Some(POOL_SECRET), &json!({ "token": SESSION }))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, result) = pooled
        .shell(SESSION, &format!("printf '%s' \"${{BOXD_POOL_SECRET:-unset}}\"; cat /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {POOL_SECRET}"))
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(item(&result, "stdout"), Some("unset0\n"), "{result}");
}

#[tokio::test]
async fn a_kernel_warmed_before_the_claim_runs_with_its_env() {
    let python = common::python();
    let pooled = start_pooled_with(&["--tools", "shell,ipython", "--python", &python]);
    // The kernel starts with boxd, before any claim: wait until it is up.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = pooled
            .call(reqwest::Method::GET, "/readyz/status", None, None)
            .await;
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the kernel never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, answer) = pooled
        .init(
            Some(POOL_SECRET),
            &json!({ "token": SESSION, "env": { "CLAIM_ID": "claim-7" } }),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, result) = pooled
        .call(
            reqwest::Method::POST,
            "/tools/run_ipython_cell",
            Some(SESSION),
            Some(&json!({ "code": "import os, subprocess; print(os.environ.get('CLAIM_ID'), subprocess.run(['sh', '-c', 'echo $CLAIM_ID'], capture_output=True, text=True).stdout.strip())" }).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        item(&result, "stdout"),
        Some("claim-7 claim-7\n"),
        "{result}"
    );
}

#[tokio::test]
async fn a_malformed_init_body_is_422_and_leaves_the_pod_unclaimed() {
    let pooled = start_pooled();
    for body in [
        "{not json",
        "{}",
        r#"{"token": 42}"#,
        r#"{"token": "session-token-0123456789", "env": ["A=b"]}"#,
        r#"{"token": "session-token-0123456789", "env": {"A": 1}}"#,
        r#"{"token": "session-token-0123456789", "workspace": "/elsewhere"}"#,
    ] {
        let (status, answer) = pooled
            .call(
                reqwest::Method::POST,
                "/init",
                Some(POOL_SECRET),
                Some(body),
            )
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
    }
    // Well-formed but unacceptable: 400, naming what is wrong.
    for (body, expected) in [
        (json!({ "token": "short" }), "16 to 4096"),
        (
            json!({ "token": POOL_SECRET }),
            "differ from the pool secret",
        ),
        (
            json!({ "token": SESSION, "env": { "NOT-A-NAME": "x" } }),
            "not a variable name",
        ),
    ] {
        let (status, answer) = pooled.init(Some(POOL_SECRET), &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(detail(&answer).contains(expected), "{answer}");
    }
    let (status, answer) = pooled
        .init(Some(POOL_SECRET), &json!({ "token": SESSION }))
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn init_outside_pool_mode_is_404() {
    let server = Server::start_with(&["--tools", "shell"]);
    let response = server
        .post("/init")
        .json(&json!({ "token": SESSION }))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 404);
    let body: Value = response.json().await.expect("json");
    assert!(detail(&body).contains("only in pool mode"), "{body}");
}

/// Start-up refusals: a fixed token alongside pool mode would keep working before the claim, and a
/// short pool secret is guessable.
#[test]
fn pool_mode_refuses_a_fixed_token_and_a_short_secret() {
    let workspace = tempfile::tempdir().expect("workspace");
    let (_long_dir, long) = secret_file(POOL_SECRET);
    let (_short_dir, short) = secret_file("short\n");
    for (secret, token, in_environment, expected) in [
        (&long, Some("a-fixed-token"), None, "unset SECRET_TOKEN"),
        (&short, None, None, "at least 16"),
        (&long, None, Some(POOL_SECRET), "not both"),
    ] {
        let mut command = std::process::Command::new(common::boxd_bin());
        command
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--tools",
                "shell",
            ])
            .arg("--workspace")
            .arg(workspace.path())
            .arg("--pool-secret-file")
            .arg(secret)
            .env_remove("SECRET_TOKEN")
            .stdin(std::process::Stdio::null());
        if let Some(token) = token {
            command.env("SECRET_TOKEN", token);
        }
        match in_environment {
            Some(secret) => command.env("BOXD_POOL_SECRET", secret),
            None => command.env_remove("BOXD_POOL_SECRET"),
        };
        let mut child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("boxd starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("boxd kept running with {expected:?} expected");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
            .expect("stderr");
        assert!(!status.success());
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            !stderr.contains(POOL_SECRET),
            "the secret is never logged: {stderr}"
        );
    }
}
