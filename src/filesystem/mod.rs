//! The filesystem tool family: the eleven tools of `@modelcontextprotocol/server-filesystem@2025.3.28`,
//! native, under the group name `filesystem`. Names, argument schemas, result texts and error wording are
//! the reference's; paths are confined for real (see `core::confine::AllowedDirs`), `create_directory` makes missing parents
//! and `move_file` never overwrites, as the reference's own descriptions promise. Every tool acts on the
//! descriptors its paths were checked into (`core::confine::Anchor`), never on a path's name again.

mod family;
pub use family::{family, limits};

mod edit;
mod line_diff;
mod node_error;
mod walk;

use crate::core::confine::{AllowedDirs, Anchor};

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::core::entry::OpenError;
use crate::tools::{
    BadArguments, CallToolResult, ContentItem, SchemaDialect, Tool, ToolError, ToolSpec,
};
use node_error::{Syscall, describe};

pub const GROUP: &str = "filesystem";

/// Files larger than this are refused by the reading tools: their text would not fit a tool answer.
const MAX_READ_BYTES: u64 = 32 * 1024 * 1024;
/// One call's deadline: far above any honest call (32 MiB reads, 100 000-entry walks, the edit match's
/// budget), short enough that a hung network filesystem does not hold the caller forever.
const TOOL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

pub fn tools(allowed: AllowedDirs) -> Vec<Tool> {
    let allowed = Arc::new(allowed);
    vec![
        file_tool::<PathArgs>(
            &allowed,
            "read_file",
            "Read the complete contents of a file from the file system. Handles various text encodings and provides detailed error messages if the file cannot be read. Use this tool when you need to examine the contents of a single file. Only works within allowed directories.",
            |allowed, args| {
                let (path, held) = allowed.open_with_parent(&args.path)?;
                read_text(&path.real, &held, MAX_READ_BYTES)
            },
        ),
        file_tool::<PathsArgs>(
            &allowed,
            "read_multiple_files",
            "Read the contents of multiple files simultaneously. This is more efficient than reading files one by one when you need to analyze or compare multiple files. Each file's content is returned with its path as a reference. Failed reads for individual files won't stop the entire operation. Only works within allowed directories.",
            |allowed, args| Ok(read_multiple(allowed, &args.paths)),
        ),
        file_tool::<WriteArgs>(
            &allowed,
            "write_file",
            "Create a new file or completely overwrite an existing file with new content. Use with caution as it will overwrite existing files without warning. Handles text content with proper encoding. Only works within allowed directories.",
            |allowed, args| {
                let (path, held) = allowed.open_with_parent(&args.path)?;
                write_atomically(&path.real, &held, args.content.as_bytes())?;
                Ok(format!("Successfully wrote to {}", args.path))
            },
        ),
        file_tool::<EditArgs>(
            &allowed,
            "edit_file",
            "Make line-based edits to a text file. Each edit replaces exact line sequences with new content. Returns a git-style diff showing the changes made. Only works within allowed directories.",
            edit_file,
        ),
        file_tool::<PathArgs>(
            &allowed,
            "create_directory",
            "Create a new directory or ensure a directory exists. Can create multiple nested directories in one operation. If the directory already exists, this operation will succeed silently. Perfect for setting up directory structures for projects or ensuring required paths exist. Only works within allowed directories.",
            |allowed, args| {
                let (path, mut held) = allowed.open(&args.path)?;
                held.create_dir_all()
                    .map_err(|err| describe(&err, Syscall::Mkdir(&path.real)))?;
                Ok(format!("Successfully created directory {}", args.path))
            },
        ),
        file_tool::<PathArgs>(
            &allowed,
            "list_directory",
            "Get a detailed listing of all files and directories in a specified path. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is essential for understanding directory structure and finding specific files within a directory. Only works within allowed directories.",
            |allowed, args| {
                let (path, held) = allowed.open_with_parent(&args.path)?;
                walk::list_directory(&path.real, &walk::open_dir(&path.real, &held)?)
            },
        ),
        file_tool::<PathArgs>(
            &allowed,
            "directory_tree",
            "Get a recursive tree view of files and directories as a JSON structure. Each entry includes 'name', 'type' (file/directory), and 'children' for directories. Files have no children array, while directories always have a children array (which may be empty). The output is formatted with 2-space indentation for readability. Only works within allowed directories.",
            |allowed, args| {
                let (path, held) = allowed.open_with_parent(&args.path)?;
                walk::directory_tree(&path.real, &walk::open_dir(&path.real, &held)?)
            },
        ),
        file_tool::<MoveArgs>(
            &allowed,
            "move_file",
            "Move or rename files and directories. Can move files between directories and rename them in a single operation. If the destination exists, the operation will fail. Works across different directories and can be used for simple renaming within the same directory. Both source and destination must be within allowed directories.",
            move_file,
        ),
        file_tool::<SearchArgs>(
            &allowed,
            "search_files",
            "Recursively search for files and directories matching a pattern. Searches through all subdirectories from the starting path. The search is case-insensitive and matches partial names. Returns full paths to all matching items. Great for finding files when you don't know their exact location. Only searches within allowed directories.",
            |allowed, args| {
                let (root, held) = allowed.open_with_parent(&args.path)?;
                let dir = walk::open_dir(&root.real, &held)?;
                walk::search_files(&root.real, &dir, &args.pattern, &args.exclude_patterns)
            },
        ),
        file_tool::<PathArgs>(
            &allowed,
            "get_file_info",
            "Retrieve detailed metadata about a file or directory. Returns comprehensive information including size, creation time, last modified time, permissions, and type. This tool is perfect for understanding file characteristics without reading the actual content. Only works within allowed directories.",
            |allowed, args| {
                let (path, held) = allowed.open_with_parent(&args.path)?;
                file_info(&path.real, &held)
            },
        ),
        // Written by hand upstream, so without zod-to-json-schema's marks.
        file_tool_within::<NoArgs>(
            &allowed,
            "list_allowed_directories",
            "Returns the list of directories that this server is allowed to access. Use this to understand which directories are available before trying to access files.",
            |allowed, _| {
                let dirs: Vec<String> = allowed
                    .shown()
                    .map(|dir| dir.display().to_string())
                    .collect();
                Ok(format!("Allowed directories:\n{}", dirs.join("\n")))
            },
            SchemaDialect::Plain,
            ToolDeadline(TOOL_DEADLINE),
        ),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct PathsArgs {
    paths: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize, JsonSchema)]
struct EditOperation {
    /// Text to search for - must match exactly
    #[serde(rename = "oldText")]
    old_text: String,
    /// Text to replace with
    #[serde(rename = "newText")]
    new_text: String,
}

#[derive(Deserialize, JsonSchema)]
struct EditArgs {
    path: String,
    edits: Vec<EditOperation>,
    /// Preview changes using git-style diff format
    #[serde(default, rename = "dryRun")]
    dry_run: bool,
}

#[derive(Deserialize, JsonSchema)]
struct MoveArgs {
    source: String,
    destination: String,
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    path: String,
    pattern: String,
    #[serde(default, rename = "excludePatterns")]
    exclude_patterns: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// A tool whose work is blocking file I/O: arguments are checked against `A`'s schema (as the reference
/// writes it, with zod-to-json-schema), the work runs on the blocking pool, and failures come back as the
/// reference's `isError` results (`Error: ...`).
fn file_tool<A>(
    allowed: &Arc<AllowedDirs>,
    name: &'static str,
    description: &'static str,
    work: fn(&AllowedDirs, A) -> Result<String, String>,
) -> Tool
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
{
    file_tool_within(
        allowed,
        name,
        description,
        work,
        SchemaDialect::ZodToJsonSchema,
        ToolDeadline(TOOL_DEADLINE),
    )
}

/// How long a caller waits for one filesystem tool call. Blocking file work cannot be interrupted, so
/// past it the caller gets an error and the worker thread finishes (or not) on its own.
#[derive(Clone, Copy)]
struct ToolDeadline(std::time::Duration);

impl ToolDeadline {
    fn after_now(self) -> crate::core::deadline::Deadline {
        crate::core::deadline::Deadline::after(self.0)
    }
}

fn file_tool_within<A>(
    allowed: &Arc<AllowedDirs>,
    name: &'static str,
    description: &'static str,
    work: fn(&AllowedDirs, A) -> Result<String, String>,
    dialect: SchemaDialect,
    deadline: ToolDeadline,
) -> Tool
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
{
    let allowed = Arc::clone(allowed);
    ToolSpec::declare::<A>(GROUP, name, description)
        .dialect(dialect)
        .bad_arguments(BadArguments::ZodIssues)
        .error_prefix("Error: ")
        .handler(move |arguments: A, _| {
            let allowed = Arc::clone(&allowed);
            async move {
                let running = tokio::task::spawn_blocking(move || work(&allowed, arguments));
                let outcome = match tokio::time::timeout_at(deadline.after_now().instant(), running)
                    .await
                {
                    Ok(joined) => joined.unwrap_or_else(|err| Err(format!("{name} failed: {err}"))),
                    Err(_) => {
                        tracing::warn!(tool = name, "filesystem tool over its deadline");
                        Err(format!(
                            "{name} did not finish within {:?} (the filesystem is too slow or the \
                             tree too large); it may still complete in the background",
                            deadline.0
                        ))
                    }
                };
                outcome
                    .map(|text| CallToolResult::new(vec![ContentItem::plain_text(text)], false))
                    .map_err(ToolError::Reported)
            }
        })
}

/// The whole file as text (invalid UTF-8 replaced, as Node's `utf-8` decoding does). `path` is what
/// messages name; `held` is what is read.
fn read_text(path: &Path, held: &Anchor, limit: u64) -> Result<String, String> {
    let bytes = read_bytes(path, held, limit)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
    })
}

fn read_bytes(path: &Path, held: &Anchor, limit: u64) -> Result<Vec<u8>, String> {
    let mut file = held.open_for_reading().map_err(|err| match err {
        OpenError::NotRegular(message) => format!("{}: {message}", path.display()),
        OpenError::Io(err) => describe(&err, Syscall::Open(path)),
    })?;
    let size = file
        .metadata()
        .map_err(|err| describe(&err, Syscall::Stat(path)))?
        .len();
    if size > limit {
        return Err(format!(
            "{} is {size} bytes; files over {limit} bytes are not read whole (use the workspace file routes)",
            path.display()
        ));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.by_ref()
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| describe(&err, Syscall::Read))?;
    Ok(bytes)
}

/// Each file under its name, failures inline; all reads share one size budget.
fn read_multiple(allowed: &AllowedDirs, paths: &[String]) -> String {
    let mut budget = MAX_READ_BYTES;
    let parts: Vec<String> = paths
        .iter()
        .map(|path| {
            let read = allowed
                .open_with_parent(path)
                .and_then(|(checked, held)| read_text(&checked.real, &held, budget));
            match read {
                Ok(content) => {
                    budget = budget.saturating_sub(content.len() as u64);
                    format!("{path}:\n{content}\n")
                }
                Err(message) => format!("{path}: Error - {message}"),
            }
        })
        .collect();
    parts.join("\n---\n")
}

/// Replaces the file whole or not at all: a failed write leaves the old content. `target` is what
/// messages name; `held` is what is replaced.
fn write_atomically(target: &Path, held: &Anchor, content: &[u8]) -> Result<(), String> {
    let open_error = |err: std::io::Error| describe(&err, Syscall::Open(target));
    if held.is_root() || held.metadata().is_ok_and(|meta| meta.is_dir()) {
        return Err(open_error(std::io::Error::from_raw_os_error(libc::EISDIR)));
    }
    // Both paths go through `held`'s descriptor, which outlives the staged file.
    let dir = held.parent_path().map_err(open_error)?;
    let staged = crate::core::staging::stage_bytes(&dir, content).map_err(open_error)?;
    staged
        .persist(&held.entry_path().map_err(open_error)?)
        .map_err(open_error)
}

fn edit_file(allowed: &AllowedDirs, args: EditArgs) -> Result<String, String> {
    let (path, held) = allowed.open_with_parent(&args.path)?;
    // Strict: rewriting lossily decoded bytes would corrupt everything outside the edit.
    let original =
        String::from_utf8(read_bytes(&path.real, &held, MAX_READ_BYTES)?).map_err(|_| {
            format!(
                "{} is not UTF-8 text; edit_file would corrupt it",
                args.path
            )
        })?;
    let content = edit::normalize_line_endings(&original);
    let edits: Vec<edit::Edit> = args
        .edits
        .into_iter()
        .map(|operation| edit::Edit {
            old_text: operation.old_text,
            new_text: operation.new_text,
        })
        .collect();
    let edited = edit::apply(&content, &edits)?;
    let patch = edit::fenced_patch(&path.real.to_string_lossy(), &content, &edited);
    if !args.dry_run {
        write_atomically(&path.real, &held, edited.as_bytes())?;
    }
    Ok(patch)
}

fn move_file(allowed: &AllowedDirs, args: MoveArgs) -> Result<String, String> {
    let (source, source_held) = allowed.open_entry_with_parent(&args.source)?;
    let (destination, destination_held) = allowed.open_entry_with_parent(&args.destination)?;
    if allowed.is_allowed_root(&source.real) || source_held.is_root() {
        return Err(format!(
            "{} is an allowed directory itself and cannot be moved",
            args.source
        ));
    }
    source_held
        .rename_to(&destination_held, true)
        .map_err(|err| describe(&err, Syscall::Rename(&source.real, &destination.real)))?;
    Ok(format!(
        "Successfully moved {} to {}",
        args.source, args.destination
    ))
}

fn file_info(path: &Path, held: &Anchor) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = held
        .metadata()
        .map_err(|err| describe(&err, Syscall::Stat(path)))?;
    let created = meta.created().or_else(|_| meta.modified()).ok();
    let lines = [
        format!("size: {}", meta.len()),
        format!("created: {}", js_date(created)),
        format!("modified: {}", js_date(meta.modified().ok())),
        format!("accessed: {}", js_date(meta.accessed().ok())),
        format!("isDirectory: {}", meta.is_dir()),
        format!("isFile: {}", meta.is_file()),
        format!("permissions: {:03o}", meta.mode() & 0o777),
    ];
    Ok(lines.join("\n"))
}

/// JavaScript's `Date.prototype.toString`, in UTC (the zone sandboxes run in).
fn js_date(time: Option<std::time::SystemTime>) -> String {
    match time {
        Some(time) => chrono::DateTime::<chrono::Utc>::from(time)
            .format("%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)")
            .to_string(),
        None => "Invalid Date".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_call_over_its_deadline_answers_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = Arc::new(AllowedDirs::new(&[dir.path().to_path_buf()]).unwrap());
        let tool = file_tool_within::<NoArgs>(
            &allowed,
            "slow_tool",
            "sleeps",
            |_, _| {
                std::thread::sleep(std::time::Duration::from_millis(500));
                Ok("late".into())
            },
            SchemaDialect::Plain,
            ToolDeadline(std::time::Duration::from_millis(50)),
        );
        let started = std::time::Instant::now();
        let answer = tool
            .call(json!({}), crate::tools::CallContext::default())
            .await
            .unwrap();
        assert!(started.elapsed() < std::time::Duration::from_millis(400));
        let answer = serde_json::to_value(answer).unwrap();
        assert_eq!(answer["isError"], true);
        let text = answer["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("Error: slow_tool did not finish within 50ms"),
            "{text}"
        );
    }
}
