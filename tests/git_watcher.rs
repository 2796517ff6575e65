//! `/watcher/*` against the real binary and real git repositories.

mod common;

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
