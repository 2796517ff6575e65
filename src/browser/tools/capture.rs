//! What the page shows and recorded: its accessibility snapshot, a screenshot, a PDF, its console
//! messages and network requests. Images and PDFs are saved in the workspace.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::super::session::{Capture, Image, Running};
use super::super::snapshot::{MAX_SNAPSHOT_CHARS, SnapshotOptions};
use super::{Answer, Browser, BrowserTool, Declared, NoArguments, PageCall, Policy};
use crate::tools::{ContentItem, ToolError};

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_snapshot",
            "Capture accessibility snapshot of the current page, this is better than screenshot",
            Policy::ACTION,
            snapshot,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_take_screenshot",
            "Take a screenshot of the current page. You can't perform actions based on the screenshot, use browser_snapshot for actions.",
            Policy::ACTION,
            take_screenshot,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_pdf_save",
            "Save page as PDF",
            Policy::ACTION,
            pdf_save,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_console_messages",
            "Returns all console messages",
            Policy::ANY_PAGE,
            console_messages,
        )
        .declared(),
        BrowserTool::on_page(
            "browser_network_requests",
            "Returns all network requests since loading the page",
            Policy::ANY_PAGE,
            network_requests,
        )
        .declared(),
    ]
}

/// Characters a token stands for in `max_tokens` (the usual estimate for English text and markup).
const CHARS_PER_TOKEN: usize = 4;

/// boxd's own arguments (upstream's call takes none, and answers as upstream's): a part of the page,
/// within a size, or its changes.
#[derive(Deserialize, JsonSchema)]
struct SnapshotArguments {
    #[schemars(
        description = "Only elements that can be acted on (buttons, links, fields, elements that look clickable), without text or layout. Default false."
    )]
    interactive: Option<bool>,
    #[schemars(
        description = "Only what is within the viewport (what a screenshot shows) and the elements holding it. Default false."
    )]
    visible: Option<bool>,
    #[schemars(
        description = "Levels of nesting shown (1: the top level only). The answer names the refs whose children were left out."
    )]
    depth: Option<f64>,
    #[schemars(
        description = "Exact target element reference from the page snapshot: only its subtree is shown."
    )]
    root: Option<String>,
    #[schemars(
        description = "Size of the answer's snapshot at most, in tokens (4 characters each; at most 12500). What is cut is named, with the refs to pass as root to read it."
    )]
    max_tokens: Option<f64>,
    #[schemars(
        description = "Only the changes since this tab's previous snapshot with the same interactive, visible, depth and root (a navigation starts anew). Default false."
    )]
    diff: Option<bool>,
}

/// A count argument: a whole number from 1 up.
fn count(name: &str, value: Option<f64>) -> Result<Option<usize>, ToolError> {
    match value {
        None => Ok(None),
        Some(value) if value.fract() == 0.0 && (1.0..=1e9).contains(&value) => {
            Ok(Some(value as usize))
        }
        Some(value) => Err(ToolError::Reported(format!(
            "{name} must be a whole number from 1 up (got {value})."
        ))),
    }
}

/// The answer is the page, with its snapshot as the arguments ask; a root ref the tab never gave is
/// refused before anything is fetched.
fn snapshot(
    call: PageCall<'_>,
    arguments: SnapshotArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let max_tokens = count("max_tokens", arguments.max_tokens)?;
        let options = SnapshotOptions {
            interactive_only: arguments.interactive.unwrap_or(false),
            viewport_only: arguments.visible.unwrap_or(false),
            max_depth: count("depth", arguments.depth)?,
            root_ref: arguments.root,
            max_chars: max_tokens.map(|tokens| {
                tokens
                    .saturating_mul(CHARS_PER_TOKEN)
                    .min(MAX_SNAPSHOT_CHARS)
            }),
            diff: arguments.diff.unwrap_or(false),
        };
        if let Some(root) = &options.root_ref {
            call.page.node_of(root)?;
        }
        Ok(Answer::Snapshot(options))
    })
}

#[derive(Deserialize, JsonSchema)]
struct ScreenshotArguments {
    #[schemars(
        description = "Whether to return without compression (in PNG format). Default is false, which returns a JPEG image."
    )]
    raw: Option<bool>,
    #[schemars(
        description = "File name to save the screenshot to. Defaults to `page-{timestamp}.{png|jpeg}` if not specified."
    )]
    filename: Option<String>,
    #[schemars(
        description = "Human-readable element description used to obtain permission to screenshot the element. If not provided, the screenshot will be taken of viewport. If element is provided, ref must be provided too."
    )]
    element: Option<String>,
    #[serde(rename = "ref")]
    #[schemars(
        description = "Exact target element reference from the page snapshot. If not provided, the screenshot will be taken of viewport. If ref is provided, element must be provided too."
    )]
    reference: Option<String>,
}

/// The capture is the compositor's work in the browser process; the snapshot of the answer is the
/// renderer's: both run at once.
fn take_screenshot(
    call: PageCall<'_>,
    arguments: ScreenshotArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let capture = start_screenshot(call.page, &arguments).await?;
        Ok(Answer::Screenshot {
            capture,
            filename: arguments.filename,
        })
    })
}

/// Checks the arguments and starts the capture (of the viewport, or of a ref's element).
async fn start_screenshot(
    running: &mut Running,
    arguments: &ScreenshotArguments,
) -> Result<Capture, ToolError> {
    let raw = arguments.raw.unwrap_or(false);
    let element = arguments.element.as_deref();
    let reference = arguments.reference.as_deref();
    if element.is_some() != reference.is_some() {
        return Err(ToolError::Reported(
            "Both element and ref must be provided or neither.".into(),
        ));
    }
    let clip = match reference {
        Some(reference) => {
            let element = running.element(reference).await?;
            let _ = running.center(element.node(), reference).await?;
            Some(running.element_clip(element.node(), reference).await?)
        }
        None => None,
    };
    running.start_screenshot(raw, clip)
}

#[derive(Deserialize, JsonSchema)]
struct PdfArguments {
    #[schemars(
        description = "File name to save the pdf to. Defaults to `page-{timestamp}.pdf` if not specified."
    )]
    filename: Option<String>,
}

fn pdf_save(
    call: PageCall<'_>,
    arguments: PdfArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let data = call.page.print_pdf().await?;
        let saved = call
            .browser
            .save(arguments.filename.as_deref(), "pdf", data)
            .await?;
        Ok(Answer::Page {
            done: format!("Saved the page as PDF to {saved}"),
            snapshot: false,
        })
    })
}

fn console_messages(
    call: PageCall<'_>,
    _: NoArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let lines = call
            .page
            .events(|events| events.console.iter().cloned().collect::<Vec<_>>())?;
        Ok(Answer::Text(lines.join("\n")))
    })
}

fn network_requests(
    call: PageCall<'_>,
    _: NoArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        let lines = call.page.events(|events| {
            events
                .requests
                .iter()
                .map(|request| {
                    let mut line = format!("[{}] {}", request.method.to_uppercase(), request.url);
                    if let Some((status, reason)) = &request.status {
                        line.push_str(&format!(" => [{status}] {reason}"));
                    }
                    line
                })
                .collect::<Vec<_>>()
        })?;
        Ok(Answer::Text(lines.join("\n")))
    })
}

impl Browser {
    /// Waits for a started capture, saves it in the workspace; the image item and where it went.
    pub(super) async fn finish_screenshot(
        &self,
        capture: Capture,
        filename: Option<&str>,
    ) -> Result<(ContentItem, String), ToolError> {
        let raw = capture.raw();
        let Image {
            base64: data,
            bytes,
        } = capture.finish().await?;
        let extension = if raw { "png" } else { "jpeg" };
        let saved = self.save(filename, extension, bytes).await?;
        let image = ContentItem::Image {
            data,
            mime_type: format!("image/{extension}"),
        };
        Ok((image, saved))
    }

    /// Writes `data` into the workspace under a name that cannot leave it (the last path component,
    /// cleaned), never through a symlink; the path written.
    async fn save(
        &self,
        requested: Option<&str>,
        extension: &str,
        data: Vec<u8>,
    ) -> Result<String, ToolError> {
        let name = match requested {
            Some(requested) => saved_name(requested, extension),
            None => format!(
                "page-{}.{extension}",
                chrono::Utc::now().format("%Y-%m-%dT%H-%M-%S-%3fZ")
            ),
        };
        let real = self.workspace.real_root().join(&name);
        let shown = self.workspace.root().join(&name);
        tokio::task::spawn_blocking(move || write_regular(&real, &data))
            .await
            .map_err(|err| ToolError::Reported(format!("saving the file failed: {err}")))?
            .map_err(|err| {
                ToolError::Reported(format!("cannot save {}: {err}", shown.display()))
            })?;
        Ok(shown.display().to_string())
    }
}

/// Why a screenshot or PDF could not be written.
#[derive(Debug, thiserror::Error)]
enum SaveError {
    #[error("it is not a regular file ({0}); choose another filename")]
    NotRegular(&'static str),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What a file that is not a regular one is, as the refusal names it.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Writes `data` to `path`, a regular file (created if missing), never blocking on what the name
/// already is: anything existing that is not a regular file is refused before it is opened (a FIFO's
/// open would wait for a reader while the call holds the browser session), the open itself does not
/// block (`O_NONBLOCK`; a FIFO made meanwhile fails with `ENXIO` or is refused by `fstat`), follows no
/// symlink, and truncates only once the file is known to be a regular one.
fn write_regular(path: &Path, data: &[u8]) -> Result<(), SaveError> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if !metadata.file_type().is_file() => {
            return Err(SaveError::NotRegular(kind_of(metadata.file_type())));
        }
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err.into()),
    }
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        // A FIFO nobody reads, made after the check above.
        Err(err) if err.raw_os_error() == Some(libc::ENXIO) => {
            return Err(SaveError::NotRegular("a FIFO"));
        }
        Err(err) => return Err(err.into()),
    };
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(SaveError::NotRegular(kind_of(file_type)));
    }
    file.set_len(0)?;
    file.write_all(data)?;
    Ok(())
}

/// The name a screenshot or PDF is saved under in the workspace: the requested one, cleaned, given
/// the file's extension unless it already ends in one of its kind, so that a name such as `main.py`
/// never replaces a workspace file with an image (it becomes `main.py.jpeg`).
fn saved_name(requested: &str, extension: &str) -> String {
    let mut name = safe_name(requested, extension);
    let kind: &[&str] = if extension == "pdf" {
        &["pdf"]
    } else {
        &["jpeg", "jpg", "png"]
    };
    let own = name
        .rsplit_once('.')
        .is_some_and(|(_, last)| kind.iter().any(|ext| last.eq_ignore_ascii_case(ext)));
    if !own {
        name.push('.');
        name.push_str(extension);
    }
    name
}

pub(super) fn safe_name(requested: &str, extension: &str) -> String {
    let last = requested.rsplit(['/', '\\']).next().unwrap_or_default();
    let mut name: String = last
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_start_matches('.').chars().take(128).collect();
    if name.is_empty() {
        name = format!(
            "page-{}",
            chrono::Utc::now().format("%Y-%m-%dT%H-%M-%S-%3fZ")
        );
    }
    if !name.contains('.') {
        name.push('.');
        name.push_str(extension);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_written_and_nothing_blocks() {
        let directory = tempfile::tempdir().unwrap();
        let fifo = directory.path().join("shot.png");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let refused = write_regular(&fifo, b"png").unwrap_err();
        assert!(
            matches!(refused, SaveError::NotRegular("a FIFO")),
            "{refused}"
        );
        assert!(matches!(
            write_regular(directory.path(), b"x"),
            Err(SaveError::NotRegular("a directory"))
        ));
        let file = directory.path().join("page.pdf");
        std::fs::write(&file, b"an older, longer content").unwrap();
        write_regular(&file, b"%PDF").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"%PDF");
    }

    #[test]
    fn saved_names_stay_in_the_workspace() {
        assert_eq!(safe_name("../../etc/passwd", "png"), "passwd.png");
        assert_eq!(safe_name("shot.jpeg", "jpeg"), "shot.jpeg");
        assert_eq!(saved_name("shot.PNG", "jpeg"), "shot.PNG");
        assert_eq!(saved_name("main.py", "jpeg"), "main.py.jpeg");
        assert_eq!(saved_name("report.png", "pdf"), "report.png.pdf");
        assert_eq!(saved_name("report", "pdf"), "report.pdf");
        assert!(safe_name("..", "pdf").ends_with(".pdf"));
        assert_eq!(safe_name("a b:c", "png"), "a-b-c.png");
        assert!(!safe_name(".hidden", "png").starts_with('.'));
    }
}
