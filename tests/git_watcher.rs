//! `/watcher/*` against the real binary and real git repositories.

use crate::common;

use common::{Fetch, Server, git};
use serde_json::{Value, json};

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = server.post(path).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn commit_initialises_the_repository_and_stages_adds_changes_and_deletions() {
    let server = Server::start();
    assert!(!server.ws(".git").exists());
    std::fs::write(server.ws("a.txt"), "one\n").unwrap();
    std::fs::write(server.ws("gone.txt"), "bye\n").unwrap();
    let (status, first) = post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "first"}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["message"], "first");
    assert_eq!(first["commit"].as_str().unwrap().len(), 40);
    assert!(server.ws(".git").exists());

    std::fs::write(server.ws("a.txt"), "two\n").unwrap();
    std::fs::remove_file(server.ws("gone.txt")).unwrap();
    std::fs::create_dir_all(server.ws("sub")).unwrap();
    std::fs::write(server.ws("sub/new.txt"), "new\n").unwrap();
    let (_, second) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(second["message"], "Automated commit");
    assert_eq!(git(&server.workspace, &["status", "--porcelain"]), "");
    let files = git(&server.workspace, &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(files, "a.txt\nsub/new.txt\n");
}

#[tokio::test]
async fn uncommitted_diff_reads_old_to_new_includes_untracked_and_leaves_the_index_alone() {
    let server = Server::start();
    git(&server.workspace, &["init", "-q"]);
    std::fs::write(server.ws("a.txt"), "old\n").unwrap();
    post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "base"}),
    )
    .await;
    std::fs::write(server.ws("a.txt"), "new\n").unwrap();
    std::fs::write(server.ws("untracked.txt"), "fresh\n").unwrap();
    std::fs::write(server.ws(".gitignore"), "ignored.txt\n").unwrap();
    std::fs::write(server.ws("ignored.txt"), "noise\n").unwrap();
    let status_before = git(&server.workspace, &["status", "--porcelain"]);

    for body in [
        json!({"commit_a": null, "commit_b": null}),
        json!({"commit_a": "", "commit_b": ""}),
        json!({}),
    ] {
        let (status, answer) = post(&server, "/watcher/generate_diff", body.clone()).await;
        assert_eq!(status, 200, "{body}: {answer}");
        let diffs = answer["diffs"].as_object().unwrap();
        let a = diffs["a.txt"].as_str().unwrap();
        assert!(a.contains("-old\n+new\n"), "{a}");
        assert!(diffs["untracked.txt"].as_str().unwrap().contains("+fresh"));
        assert!(!diffs.contains_key("ignored.txt"));
    }
    let bare = server.post("/watcher/generate_diff").send().await.unwrap();
    assert_eq!(bare.status().as_u16(), 200);
    assert_eq!(
        git(&server.workspace, &["status", "--porcelain"]),
        status_before,
        "the index changed"
    );
}

#[tokio::test]
async fn diff_before_any_commit_is_against_the_empty_tree() {
    let server = Server::start();
    std::fs::write(server.ws("first.txt"), "hello\n").unwrap();
    let (status, answer) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": null, "commit_b": null}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["diffs"]["first.txt"]
            .as_str()
            .unwrap()
            .contains("+hello")
    );
}

#[tokio::test]
async fn diff_between_commits_and_bad_ranges() {
    let server = Server::start();
    std::fs::write(server.ws("f.txt"), "v1\n").unwrap();
    let (_, a) = post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "a"}),
    )
    .await;
    std::fs::write(server.ws("f.txt"), "v2\n").unwrap();
    let (_, b) = post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "b"}),
    )
    .await;
    let (a, b) = (a["commit"].as_str().unwrap(), b["commit"].as_str().unwrap());

    let (status, answer) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": a, "commit_b": b}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        answer["diffs"]["f.txt"]
            .as_str()
            .unwrap()
            .contains("-v1\n+v2\n")
    );

    let (status, _) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": a, "commit_b": null}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": "", "commit_b": b}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, answer) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": "deadbeef", "commit_b": b}),
    )
    .await;
    assert_eq!(status, 404);
    assert!(answer["detail"].as_str().unwrap().contains("deadbeef"));
}

#[tokio::test]
async fn logs_are_newest_first_with_parent_to_commit_diffs_and_paging() {
    let server = Server::start();
    let empty: Value = server.get("/watcher/git_logs").fetch_json().await;
    assert_eq!(empty, json!({"logs": []}));
    for version in 1..=3 {
        std::fs::write(server.ws("f.txt"), format!("v{version}\n")).unwrap();
        post(
            &server,
            "/watcher/commit_changes",
            json!({"commit_message": format!("c{version}")}),
        )
        .await;
    }
    std::fs::write(server.ws("blob.bin"), [0u8, 1, 2, 0, 255]).unwrap();
    post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "binary"}),
    )
    .await;

    let logs: Value = server.get("/watcher/git_logs").fetch_json().await;
    let logs = logs["logs"].as_array().unwrap();
    let messages: Vec<&str> = logs
        .iter()
        .map(|entry| entry["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["binary", "c3", "c2", "c1"]);
    assert!(
        logs[0]["diff"]["blob.bin"]
            .as_str()
            .unwrap()
            .contains("Binary files")
    );
    assert!(
        logs[1]["diff"]["f.txt"]
            .as_str()
            .unwrap()
            .contains("-v2\n+v3\n")
    );
    assert!(logs[3]["diff"]["f.txt"].as_str().unwrap().contains("+v1\n"));
    let date = logs[0]["date"].as_str().unwrap();
    assert!(date.len() >= 25 && date.as_bytes()[10] == b'T', "{date}");
    assert!(logs[0]["author"].is_string());

    let page: Value = server
        .get("/watcher/git_logs?skip=1&limit=2")
        .fetch_json()
        .await;
    let messages: Vec<&str> = page["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["c3", "c2"]);
    let bad = server
        .get("/watcher/git_logs?limit=abc")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
}

#[tokio::test]
async fn a_workspace_owned_by_another_user_works_like_a_bind_mount() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to give the workspace to another user");
        return;
    }
    let server = Server::start();
    git(&server.workspace, &["init", "-q"]);
    std::fs::write(server.ws("f.txt"), "x\n").unwrap();
    let status = std::process::Command::new("chown")
        .args(["-R", "12345:12345"])
        .arg(&server.workspace)
        .status()
        .unwrap();
    assert!(status.success());
    let (status, answer) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) = post(&server, "/watcher/generate_diff", json!({})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn commit_keeps_modes_and_symlinks_and_leaves_a_clean_status() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start();
    git(&server.workspace, &["init", "-q"]);
    std::fs::create_dir_all(server.ws("deep/er")).unwrap();
    std::fs::write(server.ws("deep/er/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(
        server.ws("deep/er/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(server.ws("plain.txt"), "plain\n").unwrap();
    std::os::unix::fs::symlink("plain.txt", server.ws("link")).unwrap();
    let (status, _) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200);
    let tree = git(&server.workspace, &["ls-tree", "-r", "HEAD"]);
    assert!(
        tree.contains("100755 blob") && tree.contains("deep/er/run.sh"),
        "{tree}"
    );
    assert!(
        tree.contains("120000 blob") && tree.contains("\tlink"),
        "{tree}"
    );
    assert!(
        tree.contains("100644 blob") && tree.contains("plain.txt"),
        "{tree}"
    );
    assert_eq!(git(&server.workspace, &["show", "HEAD:link"]), "plain.txt");
    assert_eq!(git(&server.workspace, &["status", "--porcelain"]), "");
    assert_eq!(git(&server.workspace, &["fsck", "--no-progress"]), "");
}

#[tokio::test]
async fn gitattributes_filters_still_apply() {
    let server = Server::start();
    git(&server.workspace, &["init", "-q"]);
    std::fs::write(server.ws(".gitattributes"), "*.txt text eol=lf\n").unwrap();
    std::fs::write(server.ws("crlf.txt"), "one\r\ntwo\r\n").unwrap();
    let (status, _) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(
        git(&server.workspace, &["show", "HEAD:crlf.txt"]),
        "one\ntwo\n",
        "CRLF was not normalised"
    );
}

// ---- Git is pinned to the workspace: nothing in the repository can move its reads or writes outside. ----

/// A directory next to the workspace, outside it, holding a file whose content must never be served.
fn outside_secret(server: &Server) -> std::path::PathBuf {
    let outside = server.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOPSECRET\n").unwrap();
    outside
}

/// A repository outside the workspace with one commit of the secret.
fn outside_repository(server: &Server) -> std::path::PathBuf {
    let outside = outside_secret(server);
    git(&outside, &["init", "-q"]);
    git(&outside, &["add", "-A"]);
    git(
        &outside,
        &[
            "-c",
            "user.name=Outsider",
            "-c",
            "user.email=o@example.com",
            "commit",
            "-qm",
            "outside secret",
        ],
    );
    outside
}

/// `git config` run from outside the repository: git itself refuses to start in a repository whose
/// `core.worktree` does not exist.
fn config_file(server: &Server, args: &[&str]) -> String {
    let file = server.ws(".git/config");
    let mut all = vec!["config", "--file", file.to_str().unwrap()];
    all.extend_from_slice(args);
    git(server.workspace.parent().unwrap(), &all)
}

fn set_config(server: &Server, key: &str, value: &str) {
    config_file(server, &[key, value]);
}

/// Every watcher route answers `status` with a detail containing `reason`, and no answer shows the secret.
async fn every_route_refuses(server: &Server, status: u16, reason: &str) {
    let mut answers = Vec::new();
    answers.push(post(server, "/watcher/generate_diff", json!({})).await);
    answers.push(post(server, "/watcher/commit_changes", json!({})).await);
    let logs = server.get("/watcher/git_logs").send().await.unwrap();
    answers.push((logs.status().as_u16(), logs.json().await.unwrap()));
    for (got, answer) in answers {
        let text = answer.to_string();
        assert!(
            !text.contains("TOPSECRET") && !text.contains("outside secret"),
            "{text}"
        );
        assert_eq!(got, status, "{text}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(reason), "{detail}");
    }
}

#[tokio::test]
async fn a_git_file_pointing_outside_is_refused() {
    let server = Server::start();
    let outside = outside_repository(&server);
    let head_before = git(&outside, &["rev-parse", "HEAD"]);
    std::fs::write(
        server.ws(".git"),
        format!("gitdir: {}\n", outside.join(".git").display()),
    )
    .unwrap();
    std::fs::write(server.ws("mine.txt"), "mine\n").unwrap();
    every_route_refuses(&server, 403, ".git is a file").await;
    assert_eq!(git(&outside, &["rev-parse", "HEAD"]), head_before);
}

#[tokio::test]
async fn a_git_symlink_pointing_outside_is_refused() {
    let server = Server::start();
    let outside = outside_repository(&server);
    std::os::unix::fs::symlink(outside.join(".git"), server.ws(".git")).unwrap();
    every_route_refuses(&server, 403, ".git is a symbolic link").await;
}

#[tokio::test]
async fn core_worktree_is_overridden_by_the_workspace() {
    let server = Server::start();
    let outside = outside_secret(&server);
    git(&server.workspace, &["init", "-q"]);
    std::fs::write(server.ws("mine.txt"), "mine\n").unwrap();
    for worktree in [outside.to_str().unwrap(), "/nonexistent/worktree"] {
        set_config(&server, "core.worktree", worktree);
        let (status, answer) = post(&server, "/watcher/generate_diff", json!({})).await;
        assert_eq!(status, 200, "{worktree}: {answer}");
        let diffs = answer["diffs"].as_object().unwrap();
        assert!(diffs.contains_key("mine.txt"), "{answer}");
        assert!(!answer.to_string().contains("TOPSECRET"), "{answer}");
    }
    set_config(&server, "core.worktree", outside.to_str().unwrap());
    let (status, answer) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let files = git(
        &server.workspace,
        &[
            "--git-dir=.git",
            "--work-tree=.",
            "ls-tree",
            "-r",
            "--name-only",
            "HEAD",
        ],
    );
    assert_eq!(files, "mine.txt\n");
    // The user's config is not rewritten.
    let worktree = config_file(&server, &["core.worktree"]);
    assert_eq!(
        worktree.trim(),
        outside.to_str().unwrap(),
        "{}",
        std::fs::read_to_string(server.ws(".git/config")).unwrap()
    );
}

#[tokio::test]
async fn config_includes_are_refused_without_reading_them() {
    let server = Server::start();
    let outside = outside_secret(&server);
    git(&server.workspace, &["init", "-q"]);
    std::fs::write(server.ws("mine.txt"), "mine\n").unwrap();
    let included = outside.join("included.gitconfig");
    std::fs::write(
        &included,
        format!("[core]\n\tworktree = {}\n", outside.display()),
    )
    .unwrap();
    git(
        &server.workspace,
        &["config", "include.path", included.to_str().unwrap()],
    );
    every_route_refuses(&server, 403, "include").await;

    // A FIFO would block whoever opens it for reading: the refusal must come before any such open.
    let fifo = outside.join("fifo.gitconfig");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c_path is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    git(&server.workspace, &["config", "--unset", "include.path"]);
    std::fs::write(
        server.ws(".git/config"),
        std::fs::read_to_string(server.ws(".git/config")).unwrap()
            + &format!("[includeIf \"gitdir:/\"]\n\tpath = {}\n", fifo.display()),
    )
    .unwrap();
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        post(&server, "/watcher/generate_diff", json!({})),
    )
    .await
    .expect("generate_diff does not open the FIFO");
    assert_eq!(answer.0, 403, "{}", answer.1);
}

#[tokio::test]
async fn config_naming_files_outside_is_refused() {
    let server = Server::start();
    let outside = outside_secret(&server);
    git(&server.workspace, &["init", "-q"]);
    // An outside file used as patterns is an oracle: which workspace names get ignored tells its lines.
    std::fs::write(server.ws("TOPSECRET"), "probe\n").unwrap();
    for key in ["core.excludesFile", "core.attributesFile"] {
        git(
            &server.workspace,
            &["config", key, outside.join("secret.txt").to_str().unwrap()],
        );
        let (status, answer) = post(&server, "/watcher/generate_diff", json!({})).await;
        assert_eq!(status, 403, "{key}: {answer}");
        assert!(
            answer["detail"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains(&key.to_lowercase()),
            "{answer}"
        );
        git(&server.workspace, &["config", "--unset", key]);
    }
    let (status, _) = post(&server, "/watcher/generate_diff", json!({})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn alternates_and_commondir_leading_outside_are_refused() {
    let server = Server::start();
    let outside = outside_repository(&server);
    let secret_commit = git(&outside, &["rev-parse", "HEAD"]).trim().to_owned();
    git(&server.workspace, &["init", "-q"]);
    std::fs::write(server.ws("mine.txt"), "mine\n").unwrap();
    let (_, base) = post(&server, "/watcher/commit_changes", json!({})).await;
    let base = base["commit"].as_str().unwrap().to_owned();
    std::fs::write(
        server.ws(".git/objects/info/alternates"),
        format!("{}\n", outside.join(".git/objects").display()),
    )
    .unwrap();
    let (status, answer) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": base, "commit_b": secret_commit}),
    )
    .await;
    assert!(!answer.to_string().contains("TOPSECRET"), "{answer}");
    assert_eq!(status, 403, "{answer}");
    assert!(answer["detail"].as_str().unwrap().contains("alternates"));
    std::fs::remove_file(server.ws(".git/objects/info/alternates")).unwrap();

    std::fs::write(
        server.ws(".git/commondir"),
        format!("{}\n", outside.join(".git").display()),
    )
    .unwrap();
    every_route_refuses(&server, 403, "commondir").await;
    std::fs::remove_file(server.ws(".git/commondir")).unwrap();

    // Symlinks inside .git that lead outside: objects written or read there would leave the workspace.
    let objects = server.ws(".git/objects");
    std::fs::rename(&objects, server.ws("objects.moved")).unwrap();
    std::os::unix::fs::symlink(outside.join(".git/objects"), &objects).unwrap();
    every_route_refuses(&server, 403, "objects").await;
}

// ---- Bad input: every malformed or impossible request is a 4xx with a reason, never a 5xx. ----

enum Call {
    Post(&'static str, Vec<u8>),
    Get(String),
}

/// What the fuzzer sent: wrong types, odd strings, NUL bytes, huge numbers, unknown or malformed ids.
fn bad_requests() -> Vec<(Call, u16)> {
    let body = |value: Value| value.to_string().into_bytes();
    let raw = |text: &str| text.as_bytes().to_vec();
    let diff = |a: &str, b: &str| body(json!({"commit_a": a, "commit_b": b}));
    let long_id = "a".repeat(100_000);
    let mut calls = vec![
        (
            Call::Post(
                "/watcher/commit_changes",
                body(json!({"commit_message": 5})),
            ),
            422,
        ),
        (
            Call::Post(
                "/watcher/commit_changes",
                body(json!({"commit_message": ["x"]})),
            ),
            422,
        ),
        (
            Call::Post(
                "/watcher/commit_changes",
                body(json!({"commit_message": "a\u{0}b"})),
            ),
            400,
        ),
        (
            Call::Post("/watcher/commit_changes", body(json!([1, 2]))),
            422,
        ),
        (
            Call::Post("/watcher/commit_changes", body(json!("text"))),
            422,
        ),
        (Call::Post("/watcher/commit_changes", raw("null")), 422),
        (Call::Post("/watcher/commit_changes", raw("{")), 422),
        (Call::Post("/watcher/commit_changes", vec![0xff, 0xfe]), 422),
        (
            Call::Post(
                "/watcher/generate_diff",
                body(json!({"commit_a": 1, "commit_b": 2})),
            ),
            422,
        ),
        (
            Call::Post(
                "/watcher/generate_diff",
                body(json!({"commit_a": {}, "commit_b": []})),
            ),
            422,
        ),
        (Call::Post("/watcher/generate_diff", raw("[]")), 422),
        (
            Call::Post("/watcher/generate_diff", vec![b'{', 0, b'}']),
            422,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("a\u{0}b", "HEAD")),
            400,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("HEAD", "\u{0}")),
            400,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("HEAD@{", "HEAD")),
            400,
        ),
        (
            Call::Post(
                "/watcher/generate_diff",
                diff("HEAD~99999999999999999999999", "HEAD"),
            ),
            400,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("HEAD..HEAD", "HEAD")),
            400,
        ),
        (
            Call::Post("/watcher/generate_diff", diff(":/(", "HEAD")),
            400,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("deadbeef", "HEAD")),
            404,
        ),
        (
            Call::Post("/watcher/generate_diff", diff(&"0".repeat(40), "HEAD")),
            404,
        ),
        (
            Call::Post("/watcher/generate_diff", diff(&long_id, "HEAD")),
            404,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("@{-1}", "HEAD")),
            404,
        ),
        (
            Call::Post("/watcher/generate_diff", diff("\u{ffff}\u{1}", "HEAD")),
            400,
        ),
        (
            Call::Post("/watcher/generate_diff", body(json!({"commit_a": "HEAD"}))),
            400,
        ),
    ];
    for query in [
        "limit=abc",
        "limit=-1",
        "limit=0",
        "limit=1e9999",
        "limit=99999999999999999999999",
        "limit=1001",
        "skip=-5",
        "skip=99999999999999999999999",
        "skip=%00",
        "limit=%00",
        "limit=1&limit=2",
    ] {
        calls.push((Call::Get(format!("/watcher/git_logs?{query}")), 400));
    }
    calls
}

async fn sweep(server: &Server, state: &str, calls: Vec<(Call, u16)>) {
    for (call, expected) in calls {
        let (label, response) = match call {
            Call::Post(path, body) => {
                let label = format!("POST {path} {}", String::from_utf8_lossy(&body));
                (label, server.post(path).body(body).send().await.unwrap())
            }
            Call::Get(path) => (
                format!("GET {path}"),
                server.get(&path).send().await.unwrap(),
            ),
        };
        let label: String = label.chars().take(200).collect();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, expected, "{state}: {label}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            !detail.is_empty(),
            "{state}: {label}: no detail in {answer}"
        );
    }
}

#[tokio::test]
async fn bad_watcher_requests_are_4xx_with_a_reason_in_every_repository_state() {
    let server = Server::start();
    // No repository at all: the watcher creates one on first use, so the sweep runs against that.
    // The table holds for an empty repository as for one with history: names are checked before they are
    // resolved, and a well-formed name that resolves to nothing is 404 in both.
    sweep(&server, "no repository", bad_requests()).await;
    let (status, answer) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": "HEAD", "commit_b": "HEAD"}),
    )
    .await;
    assert_eq!(status, 404, "empty repository: {answer}");
    assert!(answer["detail"].as_str().unwrap().contains("HEAD"));

    std::fs::write(server.ws("a.txt"), "one\n").unwrap();
    let (status, _) = post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "one"}),
    )
    .await;
    assert_eq!(status, 200);
    std::fs::write(server.ws("a.txt"), "two\n").unwrap();
    let (status, _) = post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "two"}),
    )
    .await;
    assert_eq!(status, 200);
    sweep(&server, "two commits", bad_requests()).await;

    // Valid extremes are not errors.
    let far: Value = server
        .get("/watcher/git_logs?skip=18446744073709551615&limit=1000")
        .fetch_json()
        .await;
    assert_eq!(far["logs"], json!([]));
    let (status, answer) = post(
        &server,
        "/watcher/generate_diff",
        json!({"commit_a": "HEAD:a.txt", "commit_b": "HEAD"}),
    )
    .await;
    assert_eq!(status, 400, "a blob is not a commit: {answer}");
}

// ---- git_logs is bounded: a default and a maximum page, and a size budget per commit. ----

#[tokio::test]
async fn logs_default_to_100_commits_and_say_when_more_follow() {
    let server = Server::start();
    git(&server.workspace, &["init", "-q"]);
    for n in 0..101 {
        git(
            &server.workspace,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.com",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("c{n}"),
            ],
        );
    }
    let page: Value = server.get("/watcher/git_logs").fetch_json().await;
    let logs = page["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 100);
    assert_eq!(logs[0]["message"], "c100");
    assert_eq!(page["has_more"], true);
    let rest: Value = server.get("/watcher/git_logs?skip=100").fetch_json().await;
    assert_eq!(rest["logs"].as_array().unwrap().len(), 1);
    assert_eq!(rest["logs"][0]["message"], "c0");
    assert!(rest.get("has_more").is_none(), "{rest}");
    let all: Value = server
        .get("/watcher/git_logs?limit=1000")
        .fetch_json()
        .await;
    assert_eq!(all["logs"].as_array().unwrap().len(), 101);

    let response = server
        .get("/watcher/git_logs?limit=1001")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.unwrap();
    assert!(
        answer["detail"].as_str().unwrap().contains("1000"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_commit_diff_in_the_log_is_cut_at_1_mib_with_a_marker() {
    let server = Server::start();
    let line = "x".repeat(99) + "\n";
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(server.ws(name), line.repeat(6000)).unwrap();
    }
    let (status, _) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200);
    let small_line = "y\n";
    std::fs::write(server.ws("small.txt"), small_line).unwrap();
    let (status, _) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200);

    let page: Value = server.get("/watcher/git_logs").fetch_json().await;
    let logs = page["logs"].as_array().unwrap();
    assert!(logs[0].get("diff_truncated").is_none(), "{}", logs[0]);
    let big = &logs[1];
    assert_eq!(big["diff_truncated"], true);
    let diff = big["diff"].as_object().unwrap();
    let total: usize = diff.values().map(|text| text.as_str().unwrap().len()).sum();
    assert!(total <= 1024 * 1024 + 512, "{total} bytes");
    let a = diff["a.txt"].as_str().unwrap();
    assert!(a.ends_with(&format!("+{line}")) && !a.contains("[boxd:"));
    let b = diff["b.txt"].as_str().unwrap();
    assert!(
        b.contains("[boxd: diff truncated, "),
        "{}",
        &b[b.len() - 200..]
    );
    assert!(
        b.contains("the remaining files are omitted"),
        "{}",
        &b[b.len() - 200..]
    );
    assert!(!diff.contains_key("c.txt"));
}

// ---- A repository the client damaged or filled oddly is a 409 with git's reason, never a 500. ----

#[tokio::test]
async fn damaged_or_nested_repositories_are_409_with_a_reason() {
    let server = Server::start();
    std::fs::write(server.ws("a.txt"), "a\n").unwrap();
    let (status, _) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200);

    let nested = server.ws("clone");
    std::fs::create_dir_all(&nested).unwrap();
    git(&nested, &["init", "-q"]);
    std::fs::write(nested.join("x.txt"), "x\n").unwrap();
    let (status, answer) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 409, "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(
        detail.contains("clone/") && detail.contains(".gitignore"),
        "{detail}"
    );
    std::fs::write(server.ws(".gitignore"), "clone/\n").unwrap();
    let (status, answer) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200, "{answer}");

    let head = std::fs::read(server.ws(".git/HEAD")).unwrap();
    for (what, content) in [
        ("garbage", "garbage\n"),
        ("an invalid ref name", "ref: refs/heads/x..y\n"),
    ] {
        std::fs::write(server.ws(".git/HEAD"), content).unwrap();
        let mut answers = vec![
            post(&server, "/watcher/generate_diff", json!({})).await,
            post(&server, "/watcher/commit_changes", json!({})).await,
        ];
        let logs = server.get("/watcher/git_logs").send().await.unwrap();
        answers.push((logs.status().as_u16(), logs.json().await.unwrap()));
        for (status, answer) in answers {
            assert_eq!(status, 409, "HEAD holding {what}: {answer}");
            assert!(
                answer["detail"].as_str().unwrap().contains("git"),
                "{answer}"
            );
        }
    }
    std::fs::write(server.ws(".git/HEAD"), head).unwrap();

    std::fs::write(server.ws(".git/config"), "[core\n").unwrap();
    let (status, answer) = post(&server, "/watcher/generate_diff", json!({})).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("config"),
        "{answer}"
    );
}

// ---- Files that vanish while a git route runs (uploads' staging files, deletes mid-walk). ----

/// An upload that replaces a file is linked in beside it under a `.boxd-upload-*.tmp` name for a moment
/// before it is renamed over its target: git must never list or commit such a file.
#[tokio::test]
async fn upload_staging_names_are_invisible_to_git() {
    let server = Server::start();
    std::fs::write(server.ws("a.txt"), "a\n").unwrap();
    std::fs::create_dir_all(server.ws("sub")).unwrap();
    std::fs::write(server.ws(".boxd-upload-0011223344556677.tmp"), "staged\n").unwrap();
    std::fs::write(
        server.ws("sub/.boxd-upload-8899aabbccddeeff.tmp"),
        "staged\n",
    )
    .unwrap();
    let (status, answer) = post(&server, "/watcher/generate_diff", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let listed: Vec<&String> = answer["diffs"].as_object().unwrap().keys().collect();
    assert_eq!(listed, ["a.txt"], "{answer}");
    let (status, answer) = post(&server, "/watcher/commit_changes", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    let files = git(&server.workspace, &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(files, "a.txt\n");
}

/// Uploads (replacing files, so each passes through a staging name beside its target) and plain creates
/// and deletes race `generate_diff` and `commit_changes`: never a 404 or 500 about a file that was there
/// when the walk started and gone when it was read. A call that met vanishing files on each of its
/// tries is the documented 409 "kept changing"; the churner here never pauses, so on a loaded machine
/// one call in a while meets it five times running: allowed for a few calls, any other status never.
#[tokio::test]
async fn git_routes_tolerate_files_that_vanish_while_they_run() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    const ROUNDS: usize = 150;
    const TIME_LIMIT: Duration = Duration::from_secs(60);
    let server = Arc::new(Server::start());
    std::fs::create_dir_all(server.ws("up")).unwrap();
    std::fs::create_dir_all(server.ws("churn")).unwrap();
    for n in 0..8 {
        std::fs::write(server.ws(&format!("up/f{n}.txt")), "start\n").unwrap();
    }
    let (status, answer) = post(
        &server,
        "/watcher/commit_changes",
        json!({"commit_message": "base"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let uploader = {
        let (server, stop) = (Arc::clone(&server), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < TIME_LIMIT {
                let body = format!("content {n}\n").repeat(64);
                let response = server
                    .put(&format!("/workspace/file?path=up/f{}.txt", n % 8))
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert!(response.status().is_success(), "upload {n}");
                n += 1;
            }
            n
        })
    };
    let churner = {
        let (server, stop) = (Arc::clone(&server), Arc::clone(&stop));
        tokio::task::spawn_blocking(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < TIME_LIMIT {
                let path = server.ws(&format!("churn/c{}.txt", n % 16));
                let _ = std::fs::write(&path, format!("churn {n}\n"));
                let _ = std::fs::remove_file(server.ws(&format!("churn/c{}.txt", (n + 8) % 16)));
                let _ = std::fs::create_dir_all(server.ws(&format!("churn/d{}", n % 4)));
                let _ = std::fs::write(server.ws(&format!("churn/d{}/x", n % 4)), "x\n");
                let _ = std::fs::remove_dir_all(server.ws(&format!("churn/d{}", (n + 2) % 4)));
                n += 1;
            }
            n
        })
    };

    let mut failures = Vec::new();
    let mut kept_changing = Vec::new();
    let mut rounds = 0;
    while rounds < ROUNDS && started.elapsed() < TIME_LIMIT {
        let (path, body) = if rounds % 2 == 0 {
            ("/watcher/generate_diff", json!({}))
        } else {
            ("/watcher/commit_changes", json!({"commit_message": "race"}))
        };
        let (status, answer) = post(&server, path, body).await;
        if status == 409
            && answer["detail"]
                .as_str()
                .is_some_and(|d| d.contains("kept changing"))
        {
            kept_changing.push(format!("{path}: {answer}"));
        } else if status != 200 {
            failures.push(format!("{path}: {status} {answer}"));
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let uploads = uploader.await.unwrap();
    let churns = churner.await.unwrap();
    assert!(
        failures.is_empty(),
        "{} of {rounds} git calls failed ({uploads} uploads, {churns} churn rounds): {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(
        kept_changing.len() * 20 <= rounds,
        "{} of {rounds} git calls gave up as the workspace kept changing: {:#?}",
        kept_changing.len(),
        &kept_changing[..kept_changing.len().min(5)]
    );
    assert!(uploads > 0 && churns > 0, "nothing raced the git calls");
    // No staging file was ever committed.
    let files = git(
        &server.workspace,
        &["log", "--all", "--name-only", "--format="],
    );
    assert!(!files.contains(".boxd-upload-"), "{files}");
}

/// Exit status and output of `git` in the workspace (the shared helper keeps only stdout).
fn git_checked(workspace: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(workspace)
        .output()
        .expect("git runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A commit's new objects are written as one pack rather than one loose file each, and small packs are
/// merged once there are many: the repository stays valid for git, every commit reads back whole
/// (a file above the in-memory limit too), few objects are loose and the packs stay few.
#[tokio::test]
async fn commits_are_packed_stay_readable_by_git_and_their_packs_stay_few() {
    let server = Server::start();
    git(&server.workspace, &["init", "-q"]);
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(server.ws("big.bin"), &big).unwrap();
    std::fs::create_dir_all(server.ws("sub")).unwrap();
    let mut commits = Vec::new();
    for round in 0..20 {
        for file in 0..10 {
            std::fs::write(
                server.ws(&format!("sub/f{file}.txt")),
                format!("round {round} file {file}\n"),
            )
            .unwrap();
        }
        let (status, answer) = post(
            &server,
            "/watcher/commit_changes",
            json!({"commit_message": format!("r{round}")}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        commits.push(answer["commit"].as_str().unwrap().to_owned());
    }
    let (ok, fsck) = git_checked(&server.workspace, &["fsck", "--strict"]);
    assert!(ok, "{fsck}");
    assert_eq!(git(&server.workspace, &["status", "--porcelain"]), "");
    for (round, commit) in commits.iter().enumerate() {
        assert_eq!(
            git(
                &server.workspace,
                &["show", &format!("{commit}:sub/f3.txt")]
            ),
            format!("round {round} file 3\n")
        );
    }
    assert_eq!(
        git(&server.workspace, &["rev-parse", "HEAD:big.bin"]),
        git(&server.workspace, &["hash-object", "big.bin"])
    );
    let packs = std::fs::read_dir(server.ws(".git/objects/pack"))
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".pack")
        })
        .count();
    assert!((1..=17).contains(&packs), "{packs} packs");
    // Loose: the 20 commit objects and the large blob; the 200 small blobs and the trees are packed.
    let counts = git(&server.workspace, &["count-objects", "-v"]);
    let loose: usize = counts
        .lines()
        .find_map(|line| line.strip_prefix("count: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(loose <= 21, "{counts}");
}
