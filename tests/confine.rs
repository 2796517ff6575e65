//! One confinement for the workspace routes and the filesystem tools, against the real binary: a final
//! symlink is the link itself for delete, move and exists (never its target), what goes *through* a link
//! stays confined, and what is not a regular file is refused promptly instead of hanging a reader.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use common::{Fetch, Server, encode};
use serde_json::{Value, json};

/// Every request here must answer well within this: a FIFO read that blocks would not.
const PROMPT: Duration = Duration::from_secs(10);

fn filesystem_server() -> Server {
    Server::start_with(&["--tools", "filesystem,workspace"])
}

/// A directory beside the workspace, outside it, with one file.
fn outside_dir(server: &Server) -> std::path::PathBuf {
    let outside = server.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    outside
}

fn is_link(path: &Path) -> bool {
    path.symlink_metadata()
        .is_ok_and(|meta| meta.file_type().is_symlink())
}

async fn delete(server: &Server, path: &str) -> u16 {
    server
        .delete(&format!("/workspace/entry?path={}", encode(path)))
        .fetch_status()
        .await
}

async fn exists(server: &Server, path: &str) -> Value {
    server
        .get(&format!("/workspace/exists?path={}", encode(path)))
        .fetch_json()
        .await
}

async fn call_tool(server: &Server, tool: &str, arguments: Value) -> (bool, String) {
    let answer: Value = tokio::time::timeout(
        PROMPT,
        server
            .post(&format!("/tools/{tool}"))
            .json(&arguments)
            .fetch_json(),
    )
    .await
    .unwrap_or_else(|_| panic!("{tool} {arguments} did not answer within {PROMPT:?}"));
    let text = answer["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (answer["isError"] == json!(true), text)
}

#[tokio::test]
async fn deleting_a_link_to_a_directory_removes_the_link_and_keeps_the_directory() {
    let server = filesystem_server();
    std::fs::create_dir_all(server.ws("real/deep")).unwrap();
    std::fs::write(server.ws("real/deep/data.txt"), "precious").unwrap();
    symlink("real", server.ws("link")).unwrap();
    std::fs::write(server.ws("file.txt"), "also precious").unwrap();
    symlink("file.txt", server.ws("file-link")).unwrap();

    let listed: Value = server.get("/workspace/list?path=").fetch_json().await;
    let link_kind = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == "link")
        .map(|entry| entry["type"].clone());
    assert_eq!(link_kind, Some(json!("symlink")));

    assert_eq!(delete(&server, "link").await, 204);
    assert!(!is_link(&server.ws("link")), "the link must be gone");
    assert_eq!(
        std::fs::read_to_string(server.ws("real/deep/data.txt")).unwrap(),
        "precious",
        "deleting a link deleted its target"
    );
    assert_eq!(delete(&server, "file-link").await, 204);
    assert!(!is_link(&server.ws("file-link")));
    assert_eq!(
        std::fs::read_to_string(server.ws("file.txt")).unwrap(),
        "also precious"
    );
}

#[tokio::test]
async fn moving_a_link_moves_the_link_and_leaves_its_target_in_place() {
    let server = filesystem_server();
    std::fs::create_dir_all(server.ws("real")).unwrap();
    std::fs::write(server.ws("real/data.txt"), "stays").unwrap();
    symlink("real", server.ws("link")).unwrap();

    let moved: Value = server
        .post("/workspace/move")
        .json(&json!({"source": "link", "destination": "renamed"}))
        .fetch_json()
        .await;
    assert_eq!(moved["type"], "symlink", "{moved}");
    assert!(is_link(&server.ws("renamed")));
    assert!(!is_link(&server.ws("link")));
    assert_eq!(
        std::fs::read_to_string(server.ws("real/data.txt")).unwrap(),
        "stays"
    );
    assert_eq!(
        std::fs::read_link(server.ws("renamed")).unwrap(),
        Path::new("real")
    );
}

#[tokio::test]
async fn links_out_and_dangling_links_are_entries_to_delete_and_move_but_never_followed() {
    let server = filesystem_server();
    let outside = outside_dir(&server);
    symlink(outside.join("secret.txt"), server.ws("out-file")).unwrap();
    symlink(&outside, server.ws("out-dir")).unwrap();
    symlink("nowhere", server.ws("dangling")).unwrap();
    std::fs::write(server.ws("mine.txt"), "mine").unwrap();

    // The entries exist, whatever they point at.
    for link in ["out-file", "out-dir", "dangling"] {
        assert_eq!(
            exists(&server, link).await,
            json!({"exists": true}),
            "{link}"
        );
    }
    assert_eq!(
        exists(&server, "out-dir/secret.txt").await["detail"]
            .as_str()
            .map(|detail| detail.contains("outside")),
        Some(true),
        "a path through a link out stays refused"
    );

    // Through them: refused as before.
    for path in ["out-file", "out-dir/secret.txt", "out-dir/new.txt"] {
        common::assert_read_and_write_refused(&server, path).await;
    }
    assert_eq!(delete(&server, "out-dir/secret.txt").await, 403);
    assert_eq!(
        server
            .post("/workspace/move")
            .json(&json!({"source": "mine.txt", "destination": "out-dir/stolen.txt"}))
            .fetch_status()
            .await,
        403
    );

    // The links themselves: moved within the workspace, then deleted.
    let moved: Value = server
        .post("/workspace/move")
        .json(&json!({"source": "out-dir", "destination": "sub/out-dir-moved"}))
        .fetch_json()
        .await;
    assert_eq!(moved["type"], "symlink", "{moved}");
    assert_eq!(
        std::fs::read_link(server.ws("sub/out-dir-moved")).unwrap(),
        outside
    );
    let moved: Value = server
        .post("/workspace/move")
        .json(&json!({"source": "dangling", "destination": "still-dangling"}))
        .fetch_json()
        .await;
    assert_eq!(moved["type"], "symlink", "{moved}");
    for link in ["out-file", "sub/out-dir-moved", "still-dangling"] {
        assert_eq!(delete(&server, link).await, 204, "delete {link}");
        assert!(!is_link(&server.ws(link)), "{link} still there");
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.join("stolen.txt").exists());
    assert!(!outside.join("new.txt").exists());
}

#[tokio::test]
async fn a_move_onto_a_link_replaces_the_link_and_never_writes_through_it() {
    let server = filesystem_server();
    let outside = outside_dir(&server);
    symlink(outside.join("secret.txt"), server.ws("out-file")).unwrap();
    std::fs::write(server.ws("mine.txt"), "mine").unwrap();
    let moved: Value = server
        .post("/workspace/move")
        .json(&json!({"source": "mine.txt", "destination": "out-file"}))
        .fetch_json()
        .await;
    assert_eq!(moved["type"], "file", "{moved}");
    assert_eq!(
        std::fs::read_to_string(server.ws("out-file")).unwrap(),
        "mine"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
}

#[tokio::test]
async fn move_file_tool_moves_the_link_itself() {
    let server = filesystem_server();
    let outside = outside_dir(&server);
    std::fs::create_dir_all(server.ws("real")).unwrap();
    std::fs::write(server.ws("real/data.txt"), "stays").unwrap();
    symlink("real", server.ws("link")).unwrap();
    symlink(outside.join("secret.txt"), server.ws("escape")).unwrap();

    let (failed, text) = call_tool(
        &server,
        "move_file",
        json!({"source": "link", "destination": "link-renamed"}),
    )
    .await;
    assert!(!failed, "{text}");
    assert_eq!(text, "Successfully moved link to link-renamed");
    assert!(is_link(&server.ws("link-renamed")));
    assert!(server.ws("real").is_dir(), "move_file moved the target");
    assert_eq!(
        std::fs::read_to_string(server.ws("real/data.txt")).unwrap(),
        "stays"
    );

    // A link out can be renamed inside the allowed directories, never followed nor moved out.
    let (failed, text) = call_tool(
        &server,
        "move_file",
        json!({"source": "escape", "destination": "escape-renamed"}),
    )
    .await;
    assert!(!failed, "{text}");
    assert!(is_link(&server.ws("escape-renamed")));
    let (failed, text) = call_tool(&server, "read_file", json!({"path": "escape-renamed"})).await;
    assert!(failed);
    assert!(
        text.starts_with("Error: Access denied - path outside allowed directories: "),
        "{text}"
    );
    let (failed, text) = call_tool(
        &server,
        "move_file",
        json!({"source": "escape-renamed", "destination": outside.join("moved").to_str().unwrap()}),
    )
    .await;
    assert!(failed, "{text}");
    assert!(!outside.join("moved").exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
}

#[tokio::test]
async fn a_fifo_is_refused_promptly_by_every_reader() {
    let server = filesystem_server();
    mkfifo(&server.ws("pipe"));
    symlink("pipe", server.ws("pipe-link")).unwrap();

    for path in ["pipe", "pipe-link"] {
        let response = tokio::time::timeout(
            PROMPT,
            server.get(&format!("/workspace/file?path={path}")).send(),
        )
        .await
        .expect("GET /workspace/file on a FIFO answers promptly")
        .unwrap();
        assert_eq!(response.status().as_u16(), 404);
        let detail: Value = response.json().await.unwrap();
        assert!(
            detail["detail"].as_str().unwrap().contains("FIFO"),
            "{detail}"
        );
    }

    for path in ["pipe", "pipe-link"] {
        let (failed, text) = call_tool(&server, "read_file", json!({"path": path})).await;
        assert!(failed, "{text}");
        assert!(text.contains("is a FIFO, not a regular file"), "{text}");
    }
    let (failed, text) = call_tool(
        &server,
        "edit_file",
        json!({"path": "pipe", "edits": [{"oldText": "a", "newText": "b"}]}),
    )
    .await;
    assert!(failed, "{text}");
    assert!(text.contains("is a FIFO"), "{text}");
    let (failed, text) =
        call_tool(&server, "read_multiple_files", json!({"paths": ["pipe"]})).await;
    assert!(!failed, "{text}");
    assert!(
        text.contains("pipe: Error - ") && text.contains("FIFO"),
        "{text}"
    );

    // What does not read the content still works on it.
    let (failed, text) = call_tool(&server, "get_file_info", json!({"path": "pipe"})).await;
    assert!(!failed && text.contains("isFile: false"), "{text}");
    assert_eq!(exists(&server, "pipe").await, json!({"exists": true}));
    assert_eq!(delete(&server, "pipe").await, 204);
    assert!(!server.ws("pipe").exists());
}
