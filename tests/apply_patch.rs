//! `apply_patch` (family `agent`) against the real binary: every scenario of Codex's apply-patch
//! fixtures (`tests/fixtures/apply-patch`, see its SOURCE.md) gives upstream's expected tree.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::Server;
use serde_json::{Value, json};

/// The scenarios whose patch Codex refuses (it exits non-zero): an `isError` answer here.
const REFUSED: &[&str] = &[
    "005_rejects_empty_patch",
    "006_rejects_missing_context",
    "007_rejects_missing_file_delete",
    "008_rejects_empty_update_hunk",
    "009_requires_existing_file_for_update",
    "012_delete_directory_fails",
    "013_rejects_invalid_hunk_header",
    "015_failure_after_partial_success_leaves_changes",
];

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apply-patch/scenarios")
}

/// Every file under `root` by its relative path, with its bytes (directories only through their files).
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path
                    .strip_prefix(root)
                    .expect("under the root")
                    .to_string_lossy()
                    .into_owned();
                files.insert(relative, std::fs::read(&path).expect("readable"));
            }
        }
    }
    files
}

fn empty(dir: &Path) {
    for entry in std::fs::read_dir(dir)
        .expect("workspace listed")
        .filter_map(Result::ok)
    {
        let path = entry.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).expect("emptied");
        } else {
            std::fs::remove_file(&path).expect("emptied");
        }
    }
}

fn fill(workspace: &Path, files: &BTreeMap<String, Vec<u8>>) {
    for (relative, bytes) in files {
        let path = workspace.join(relative);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
        std::fs::write(&path, bytes).expect("written");
    }
}

async fn apply(server: &Server, arguments: Value) -> (bool, String) {
    server.tool_text("apply_patch", arguments).await
}

#[tokio::test]
async fn every_codex_scenario_gives_the_expected_tree() {
    let server = Server::start_with(&["--tools", "agent"]);
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 23, "{names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let scenario = fixtures().join(name);
        empty(&server.workspace);
        fill(&server.workspace, &tree(&scenario.join("input")));
        let patch = std::fs::read_to_string(scenario.join("patch.txt")).expect("patch");
        let (is_error, text) = apply(&server, json!({"input": patch})).await;
        let refused = REFUSED.contains(&name.as_str());
        if is_error != refused {
            failures.push(format!("{name}: isError {is_error}, answer {text:?}"));
        }
        if !refused && !text.starts_with("Success. Updated the following files:\n") {
            failures.push(format!("{name}: answer {text:?}"));
        }
        let got = tree(&server.workspace);
        let expected = tree(&scenario.join("expected"));
        if got != expected {
            failures.push(format!(
                "{name}: tree {:?}, expected {:?}",
                got.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn the_answers_say_what_changed_and_what_failed() {
    let server = Server::start_with(&["--tools", "agent"]);
    std::fs::write(server.ws("keep.txt"), "a\nb\n").expect("written");
    let patch = "*** Begin Patch\n*** Add File: new/one.txt\n+1\n*** Update File: keep.txt\n@@\n-b\n+c\n*** Delete File: new/one.txt\n*** End Patch";
    let (is_error, text) = apply(&server, json!({"input": patch})).await;
    assert!(!is_error, "{text}");
    assert_eq!(
        text,
        "Success. Updated the following files:\nA new/one.txt\nM keep.txt\nD new/one.txt\n"
    );
    // 015 with `atomic`: nothing is left.
    let partial = std::fs::read_to_string(
        fixtures().join("015_failure_after_partial_success_leaves_changes/patch.txt"),
    )
    .expect("patch");
    let (is_error, text) = apply(&server, json!({"input": partial, "atomic": true})).await;
    assert!(is_error, "{text}");
    assert!(
        text.starts_with("Failed to read file to update missing.txt: "),
        "{text}"
    );
    assert!(!server.ws("created.txt").exists());
    // Out of the workspace: refused, nothing written.
    let (is_error, text) = apply(
        &server,
        json!({"input": "*** Begin Patch\n*** Add File: ../out.txt\n+x\n*** End Patch"}),
    )
    .await;
    assert!(is_error, "{text}");
    assert!(!server.workspace.join("../out.txt").exists());
}

#[tokio::test]
async fn one_operation_of_the_responses_api() {
    let server = Server::start_with(&["--tools", "agent"]);
    let create = json!({"operation": {"type": "create_file", "path": "src/a.py", "diff": "+def f():\n+    return 1\n"}});
    assert_eq!(
        apply(&server, create).await,
        (
            false,
            "Success. Updated the following files:\nA src/a.py\n".to_owned()
        )
    );
    let update = json!({"operation": {"type": "update_file", "path": "src/a.py", "diff": "@@ def f():\n-    return 1\n+    return 2\n"}});
    assert_eq!(
        apply(&server, update).await,
        (
            false,
            "Success. Updated the following files:\nM src/a.py\n".to_owned()
        )
    );
    assert_eq!(
        std::fs::read_to_string(server.ws("src/a.py")).expect("read"),
        "def f():\n    return 2\n"
    );
    let delete = json!({"operation": {"type": "delete_file", "path": "src/a.py"}});
    assert_eq!(
        apply(&server, delete).await,
        (
            false,
            "Success. Updated the following files:\nD src/a.py\n".to_owned()
        )
    );
    assert!(!server.ws("src/a.py").exists());
    let (is_error, text) = apply(&server, json!({})).await;
    assert!(is_error && text.contains("exactly one"), "{text}");
}
