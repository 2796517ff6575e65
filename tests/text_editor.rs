//! `str_replace_based_edit_tool` (family `agent`, group `anthropic`) against the real binary: each
//! command through `POST /tools/str_replace_based_edit_tool`, answers and `isError` as Anthropic's
//! reference implementation gives them.

use crate::common;

use common::Server;
use serde_json::{Value, json};

async fn edit(server: &Server, arguments: Value) -> (bool, String) {
    server
        .tool_text("str_replace_based_edit_tool", arguments)
        .await
}

#[tokio::test]
async fn create_view_replace_insert_through_boxd() {
    let server = Server::start_with(&["--tools", "agent"]);
    assert_eq!(
        edit(
            &server,
            json!({"command": "create", "path": "src/app.py", "file_text": "def f():\n    return 1\n"})
        )
        .await,
        (false, "File created successfully at: src/app.py".to_owned())
    );
    assert_eq!(
        edit(&server, json!({"command": "view", "path": "src/app.py"})).await,
        (
            false,
            "Here's the result of running `cat -n` on src/app.py:\n     1\tdef f():\n     2\t    return 1\n     3\t\n"
                .to_owned()
        )
    );
    let (is_error, text) = edit(
        &server,
        json!({"command": "str_replace", "path": "src/app.py", "old_str": "return 1", "new_str": "return 2"}),
    )
    .await;
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with("The file src/app.py has been edited. Here's the result of running `cat -n` on a snippet of src/app.py:\n     1\tdef f():\n     2\t    return 2\n"),
        "{text}"
    );
    let (is_error, text) = edit(
        &server,
        json!({"command": "insert", "path": "src/app.py", "insert_line": 0, "new_str": "import os"}),
    )
    .await;
    assert!(!is_error, "{text}");
    assert_eq!(
        std::fs::read_to_string(server.ws("src/app.py")).expect("read"),
        "import os\ndef f():\n    return 2\n"
    );
    // Refusals are `isError` results with the reference's words.
    assert_eq!(
        edit(
            &server,
            json!({"command": "str_replace", "path": "src/app.py", "old_str": "nope"})
        )
        .await,
        (
            true,
            "No replacement was performed, old_str `nope` did not appear verbatim in src/app.py."
                .to_owned()
        )
    );
    assert_eq!(
        edit(
            &server,
            json!({"command": "create", "path": "src/app.py", "file_text": "x"})
        )
        .await,
        (
            true,
            "File already exists at: src/app.py. Cannot overwrite files using command `create`."
                .to_owned()
        )
    );
    let (is_error, text) = edit(
        &server,
        json!({"command": "create", "path": "../out.txt", "file_text": "x"}),
    )
    .await;
    assert!(is_error, "{text}");
    assert!(!server.workspace.join("../out.txt").exists());
    let (is_error, text) = edit(&server, json!({"command": "view", "path": "."})).await;
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with("Here's the files and directories up to 2 levels deep in ., excluding hidden items:\n.\n"),
        "{text}"
    );
    assert!(text.contains("\n./src/app.py\n"), "{text}");
}
