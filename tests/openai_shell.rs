//! OpenAI's `shell` (family `agent`, group `openai`) against the real binary: `POST /tools/shell`
//! answers the Responses API's `shell_call_output` (`output`, one `{stdout, stderr, outcome}` per
//! command that ran, and `max_output_length`) as text and as `structuredContent`.

use crate::common;

use std::time::{Duration, Instant};

use common::{SETTLE, Server, eventually, process_runs};
use serde_json::{Value, json};

/// The call's `isError` and its answer, read from the text (checked equal to `structuredContent`
/// when the call succeeded).
async fn shell(server: &Server, arguments: Value) -> (bool, Value) {
    let result = server.tool_result("shell", &arguments).await;
    let is_error = result["isError"] == true;
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    if is_error {
        return (true, Value::String(text.to_owned()));
    }
    let answer: Value = serde_json::from_str(text).expect("the text is the answer's JSON");
    assert_eq!(result["structuredContent"], answer, "{result}");
    (false, answer)
}

fn exited(stdout: &str, stderr: &str, code: i32) -> Value {
    json!({"stdout": stdout, "stderr": stderr, "outcome": {"type": "exit", "exit_code": code}})
}

#[tokio::test]
async fn commands_run_in_order_each_with_its_own_outcome() {
    let server = Server::start_with(&["--tools", "agent"]);
    assert_eq!(
        shell(&server, json!({"commands": ["echo hello"]})).await,
        (
            false,
            json!({"output": [exited("hello\n", "", 0)], "max_output_length": null})
        )
    );
    // A failure is an outcome, and the commands after it still run; stderr stays apart; stdin is
    // /dev/null (`cat` ends at once); bash runs them (`[[`).
    let (is_error, answer) = shell(
        &server,
        json!({"commands": [
            "echo one > made.txt; cat made.txt",
            "echo two >&2; exit 3",
            "cat; [[ -n $BASH_VERSION ]] && printf three",
        ]}),
    )
    .await;
    assert!(!is_error, "{answer}");
    assert_eq!(
        answer["output"],
        json!([
            exited("one\n", "", 0),
            exited("", "two\n", 3),
            exited("three", "", 0),
        ])
    );
    // Death by a signal is its negative number, as Python's asyncio reports it.
    let (_, answer) = shell(&server, json!({"commands": ["kill -9 $$"]})).await;
    assert_eq!(answer["output"], json!([exited("", "", -9)]));
}

#[tokio::test]
async fn the_workspace_is_the_working_directory_of_every_command() {
    let server = Server::start_with(&["--tools", "agent"]);
    let workspace = std::fs::canonicalize(&server.workspace).expect("workspace");
    let shown = workspace.to_string_lossy();
    let (is_error, answer) = shell(
        &server,
        json!({"commands": ["mkdir sub && cd sub && pwd", "pwd"]}),
    )
    .await;
    assert!(!is_error, "{answer}");
    // Each command has a shell of its own: the `cd` of the first does not reach the second.
    assert_eq!(
        answer["output"],
        json!([
            exited(&format!("{shown}/sub\n"), "", 0),
            exited(&format!("{shown}\n"), "", 0),
        ])
    );
    assert!(server.ws("sub").is_dir());
}

#[tokio::test]
async fn a_timeout_kills_the_group_and_ends_the_call() {
    let server = Server::start_with(&["--tools", "agent"]);
    let started = Instant::now();
    let (is_error, answer) = shell(
        &server,
        json!({
            "commands": ["echo before", "sleep 30 & echo $!; wait", "echo after > after.txt"],
            "timeout_ms": 1000,
        }),
    )
    .await;
    assert!(!is_error, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(15), "{answer}");
    let output = answer["output"].as_array().expect("output");
    // As the SDK's executor: the command that timed out is the last one run.
    assert_eq!(output.len(), 2, "{answer}");
    assert_eq!(output[0], exited("before\n", "", 0));
    assert_eq!(output[1]["outcome"], json!({"type": "timeout"}));
    assert_eq!(output[1]["stderr"], "");
    assert!(!server.ws("after.txt").exists());
    // What the command started went with it: its group was killed whole.
    let sleep: u32 = output[1]["stdout"]
        .as_str()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| panic!("the sleep's pid in {answer}"));
    assert!(
        eventually(SETTLE, || !process_runs(sleep)).await,
        "the sleep {sleep} still runs"
    );
}

#[tokio::test]
async fn max_output_length_is_shared_by_all_output_stdout_first() {
    let server = Server::start_with(&["--tools", "agent"]);
    let commands = json!(["printf abcdef; printf XYZ >&2", "printf 123; exit 4"]);
    let (is_error, answer) = shell(
        &server,
        json!({"commands": commands, "max_output_length": 8}),
    )
    .await;
    assert!(!is_error, "{answer}");
    assert_eq!(
        answer,
        json!({
            "output": [exited("abcdef", "XY", 0), exited("", "", 4)],
            "max_output_length": 8,
        })
    );
    // Characters, not bytes; and the length is passed back as the SDK passes it (negative: 0).
    let (_, answer) = shell(
        &server,
        json!({"commands": ["printf 'héllo'"], "max_output_length": 3}),
    )
    .await;
    assert_eq!(answer["output"], json!([exited("hél", "", 0)]));
    let (_, answer) = shell(
        &server,
        json!({"commands": commands, "max_output_length": -5}),
    )
    .await;
    assert_eq!(
        answer,
        json!({
            "output": [exited("", "", 0), exited("", "", 4)],
            "max_output_length": 0,
        })
    );
}

#[tokio::test]
async fn bad_arguments_are_error_results_saying_what_is_wrong() {
    let server = Server::start_with(&["--tools", "agent"]);
    let refused = [
        (json!({}), "missing field `commands`"),
        (
            json!({"commands": "ls"}),
            "Invalid arguments for shell: invalid type",
        ),
        (json!({"commands": []}), "at least one command"),
        (json!({"commands": vec!["true"; 33]}), "at most 32 commands"),
        (
            json!({"commands": ["x".repeat(128 * 1024)]}),
            "at most 131071 bytes",
        ),
        (json!({"commands": ["a\u{0}b"]}), "NUL"),
        (
            json!({"commands": ["true"], "timeout_ms": -1}),
            "timeout_ms",
        ),
        (
            json!({"commands": ["true"], "timeout_ms": "soon"}),
            "Invalid arguments for shell: invalid type",
        ),
    ];
    for (arguments, says) in refused {
        let (is_error, text) = shell(&server, arguments.clone()).await;
        assert!(is_error, "{arguments}: {text}");
        let text = text.as_str().unwrap_or_default();
        assert!(text.contains(says), "{arguments}: {text}");
    }
    // Nothing was run for them, and the tool still answers.
    let (is_error, answer) = shell(&server, json!({"commands": ["true"]})).await;
    assert!(!is_error, "{answer}");
}

#[tokio::test]
async fn boxd_keeps_at_most_max_output_bytes_of_a_call() {
    let server = Server::start_with(&["--tools", "agent", "--max-output", "1000"]);
    let (is_error, answer) = shell(
        &server,
        json!({"commands": ["head -c 5000 /dev/zero | tr '\\0' a; echo oops >&2", "echo after"]}),
    )
    .await;
    assert!(!is_error, "{answer}");
    let marker = |omitted: u32| format!("\n[boxd: output truncated, {omitted} bytes omitted]\n");
    assert_eq!(
        answer["output"],
        json!([
            exited(
                &format!("{}{}", "a".repeat(1000), marker(4000)),
                &marker(5),
                0
            ),
            exited(&marker(6), "", 0),
        ])
    );
}
