//! Anthropic's agent toolset, `agent_toolset_20260401`: `bash`, `read`, `write`, `edit`, `glob` and
//! `grep`, with the input schemas of the SDK's `BetaManagedAgentsAgentToolset20260401*Input` types
//! and the answers of its reference implementation (`anthropic/lib/tools/agent_toolset.py`, the
//! same in 2.10.0 and 2.14.0), as its session runner hands them to the model: an empty answer reads
//! `(no output)`, an error is an `isError` result with the reference's text. Files are the
//! workspace's, confined as the reference confines them to its working directory.

mod bash;
mod files;
mod glob;
mod grep;
mod lax;
mod paths;

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use lax::{LaxBool, LaxInt};

pub use bash::{
    BASH_DEFAULT_TIMEOUT, BASH_IDLE, BASH_MAX_TIMEOUT, BASH_OUTPUT_LIMIT, MAX_BASH_SESSIONS,
};
pub use files::{MAX_FILE_BYTES, MAX_PDF_BYTES};
pub use glob::{GLOB_RESULT_LIMIT, WALK_MAX_ENTRIES};
pub use grep::{GREP_MAX_LINE_LENGTH, GREP_OUTPUT_LIMIT};

use crate::core::confine::Workspace;
use crate::tools::{
    BadArguments, CallToolResult, ContentItem, SchemaDialect, Tool, ToolError, ToolSpec,
};

/// How long a `glob` or `grep` walks before it stops (`grep`'s `_GREP_CPU_SECONDS`).
pub const WALK_DEADLINE: Duration = Duration::from_secs(30);
/// How long one file tool call may take before the caller is answered (the work may go on).
pub const FILE_TOOL_DEADLINE: Duration = Duration::from_secs(60);

/// What a tool answers: a block, or the text of an error.
type Answer = Result<Block, String>;

/// A content block of an answer, as the reference returns them.
enum Block {
    Text(String),
    Image { media_type: String, data: String },
    Document { data: String },
}

impl Block {
    fn text(text: String) -> Block {
        Block::Text(text)
    }

    /// The block as MCP content: text as text, an image as an image, a PDF as an embedded resource.
    fn into_content(self) -> ContentItem {
        match self {
            Block::Text(text) => ContentItem::plain_text(shown(text)),
            Block::Image { media_type, data } => ContentItem::Image {
                data,
                mime_type: media_type,
            },
            Block::Document { data } => ContentItem::Raw(serde_json::json!({
                "type": "resource",
                "resource": {
                    "uri": "file:///document.pdf",
                    "mimeType": "application/pdf",
                    "blob": data,
                },
            })),
        }
    }
}

/// What the SDK's session runner sends for an empty text.
fn shown(text: String) -> String {
    if text.is_empty() {
        "(no output)".to_owned()
    } else {
        text
    }
}

fn answered(answer: Answer) -> CallToolResult {
    match answer {
        Ok(block) => CallToolResult::new(vec![block.into_content()], false),
        Err(text) => CallToolResult::new(vec![ContentItem::plain_text(shown(text))], true),
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "BetaManagedAgentsAgentToolset20260401BashInput",
    description = "Input payload for the `bash` tool of the\n`agent_toolset_20260401` toolset.\n\nAll fields are optional;\na normal invocation supplies `command`, while `restart=true`\n(with no `command`) reboots the runner-side bash session."
)]
struct BashArgs {
    /// Shell command to execute. Omit only when `restart` is true.
    command: Option<String>,
    /// When true, restart the persistent bash session instead of running a command.
    restart: Option<LaxBool>,
    /// Per-call timeout in milliseconds; 0 or omitted: 120 s.
    timeout_ms: Option<LaxInt>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "BetaManagedAgentsAgentToolset20260401ReadInput",
    description = "Input payload for the `read` tool.\n\nReads file contents\nrelative to the runner's working directory (or absolute when\nthe runner permits)."
)]
struct ReadArgs {
    file_path: String,
    /// `[start_line, end_line]`, 1-indexed inclusive; an end of 0 or less: to the end of the file.
    view_range: Option<Vec<LaxInt>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "BetaManagedAgentsAgentToolset20260401WriteInput",
    description = "Input payload for the `write` tool.\n\nWrites (overwriting) the\nentire file contents."
)]
struct WriteArgs {
    file_path: String,
    content: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "BetaManagedAgentsAgentToolset20260401EditInput",
    description = "Input payload for the `edit` tool.\n\nPerforms a string\nreplacement in the named file; by default `old_string` must\noccur exactly once."
)]
struct EditArgs {
    file_path: String,
    old_string: String,
    new_string: String,
    replace_all: Option<LaxBool>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "BetaManagedAgentsAgentToolset20260401GlobInput",
    description = "Input payload for the `glob` tool.\n\nReturns paths matching a\ndoublestar glob pattern, newest first."
)]
struct GlobArgs {
    pattern: String,
    path: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "BetaManagedAgentsAgentToolset20260401GrepInput",
    description = "Input payload for the `grep` tool.\n\nSearches file contents for\na regular expression, returning matching lines."
)]
struct GrepArgs {
    pattern: String,
    path: Option<String>,
}

/// The six tools, in the reference's order.
pub fn tools(group: &'static str, workspace: Workspace) -> Vec<Tool> {
    let workspace = Arc::new(workspace);
    let sessions = Arc::new(bash::BashSessions::new(workspace.real_root().to_path_buf()));
    vec![
        declare::<BashArgs>(group, "bash", "Run a command in a persistent bash shell.").handler(
            move |args: BashArgs, context| {
                let sessions = Arc::clone(&sessions);
                async move {
                    let session = context.session.unwrap_or_default();
                    let answer = sessions
                        .call(
                            &session,
                            args.command.as_deref(),
                            args.restart.is_some_and(|restart| restart.0),
                            args.timeout_ms.map(|timeout| timeout.0),
                        )
                        .await;
                    Ok(answered(answer))
                }
            },
        ),
        file_tool::<ReadArgs>(
            group,
            "read",
            "Read a file rooted at the working directory.",
            &workspace,
            |workspace, args| {
                let range: Option<Vec<i64>> = args
                    .view_range
                    .map(|range| range.into_iter().map(|line| line.0).collect());
                files::read(workspace, &args.file_path, range.as_deref())
            },
        ),
        file_tool::<WriteArgs>(
            group,
            "write",
            "Write a file, creating parent directories as needed.",
            &workspace,
            |workspace, args| files::write(workspace, &args.file_path, &args.content),
        ),
        file_tool::<EditArgs>(
            group,
            "edit",
            "Replace text in a file by exact string match.",
            &workspace,
            |workspace, args| {
                files::edit(
                    workspace,
                    &args.file_path,
                    &args.old_string,
                    &args.new_string,
                    args.replace_all.is_some_and(|all| all.0),
                )
            },
        ),
        file_tool::<GlobArgs>(
            group,
            "glob",
            "List files matching a glob pattern, newest first.",
            &workspace,
            |workspace, args| glob::glob(workspace, &args.pattern, args.path.as_deref()),
        ),
        file_tool::<GrepArgs>(
            group,
            "grep",
            "Search file contents for a regular expression.",
            &workspace,
            |workspace, args| grep::grep(workspace, &args.pattern, args.path.as_deref()),
        ),
    ]
}

fn declare<A: JsonSchema + serde::de::DeserializeOwned + Send + 'static>(
    group: &'static str,
    name: &'static str,
    description: &'static str,
) -> crate::tools::Declared<A> {
    ToolSpec::declare::<A>(group, name, description)
        .dialect(SchemaDialect::Pydantic)
        .bad_arguments(BadArguments::PydanticFunction)
}

/// A tool that works on files: blocking work on its own thread, bounded in time.
fn file_tool<A>(
    group: &'static str,
    name: &'static str,
    description: &'static str,
    workspace: &Arc<Workspace>,
    work: fn(&Workspace, A) -> Answer,
) -> Tool
where
    A: JsonSchema + serde::de::DeserializeOwned + Send + 'static,
{
    let workspace = Arc::clone(workspace);
    declare::<A>(group, name, description).handler(move |args: A, _| {
        let workspace = Arc::clone(&workspace);
        async move {
            let running = tokio::task::spawn_blocking(move || work(&workspace, args));
            let answer = match tokio::time::timeout(FILE_TOOL_DEADLINE, running).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(err)) => {
                    return Err(ToolError::Reported(format!("{name} failed: {err}")));
                }
                Err(_) => {
                    tracing::warn!(tool = name, "over its deadline");
                    Err(format!(
                        "{name}: did not finish within {}s; it may still complete in the background",
                        FILE_TOOL_DEADLINE.as_secs()
                    ))
                }
            };
            Ok(answered(answer))
        }
    })
}
