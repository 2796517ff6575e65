//! The 23 tools: their upstream schemas and what each does. Every call holds the browser session for its
//! duration (one browser, one current tab, as upstream), and every wait in it is bounded.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::GROUP;
use super::events::{Download, DownloadState};
use super::family::DOWNLOADS;
use super::keys;
use super::launch::Options;
use super::session::{Capture, Image, NO_PAGE, Running, SETTLE_CAP, Session};
use crate::error::ApiResult;
use crate::filesystem::AllowedDirs;
use crate::tools::{CallToolResult, ContentItem, Tool, ToolError};
use crate::workspace::Workspace;

/// Said of a tab whose renderer exited.
const CRASHED: &str = "The page in this tab crashed (its renderer process exited: out of memory, or a \
    browser bug).";
/// `browser_wait_for`'s `time` is capped here, as upstream caps it.
const MAX_WAIT: Duration = Duration::from_secs(10);
/// How long `browser_wait_for` waits for text to appear or go.
const TEXT_WAIT: Duration = Duration::from_secs(10);
/// Characters `browser_type` takes at most (one protocol event each when typing slowly).
const MAX_TYPED: usize = 100_000;
/// Largest viewport `browser_resize` accepts, per side.
const MAX_SIDE: f64 = 10_000.0;
/// Files `browser_file_upload` takes at once.
const MAX_UPLOADS: usize = 100;
/// Numbered variants tried for a download's name before giving up (`name-1.ext` ... ).
const MAX_SAME_NAME: usize = 1000;

pub struct Browser {
    session: tokio::sync::Mutex<Session>,
    workspace: Workspace,
    /// Where `browser_file_upload` may take files from.
    uploads: AllowedDirs,
}

impl Browser {
    pub fn new(options: Options, workspace: Workspace, uploads: AllowedDirs) -> Browser {
        Browser {
            session: tokio::sync::Mutex::new(Session::new(options)),
            workspace,
            uploads,
        }
    }

    pub async fn close(&self) {
        self.session.lock().await.close().await;
    }

    async fn call(&self, tool: &'static str, arguments: Value) -> ApiResult<CallToolResult> {
        let mut session = self.session.lock().await;
        let _active = session.call_started();
        let outcome = self.run(&mut session, tool, &arguments).await;
        let notice = session.take_notice();
        let (mut items, failed) = match outcome {
            Ok(items) => (items, false),
            Err(ToolError::Reported(reason)) => (vec![text(reason)], true),
            Err(ToolError::Http(err)) => return Err(err),
        };
        if let Some(notice) = notice
            && let Some(ContentItem::Text { text, .. }) = items.last_mut()
        {
            *text = format!("{notice}\n\n{text}");
        }
        Ok(CallToolResult::new(items, failed))
    }

    async fn run(
        &self,
        session: &mut Session,
        tool: &'static str,
        args: &Value,
    ) -> Result<Vec<ContentItem>, ToolError> {
        match tool {
            "browser_close" => {
                let closed = session.close().await;
                return Ok(vec![text(if closed {
                    "Closed the browser. The next browser tool call opens a new one."
                } else {
                    "No browser was open."
                })]);
            }
            "browser_tab_list" => {
                let running = session.page().await?;
                return Ok(vec![text(running.tab_list().await?)]);
            }
            "browser_console_messages" => {
                let running = session.page().await?;
                let lines =
                    running.events(|events| events.console.iter().cloned().collect::<Vec<_>>())?;
                return Ok(vec![text(lines.join("\n"))]);
            }
            "browser_network_requests" => {
                let running = session.page().await?;
                let lines = running.events(|events| {
                    events
                        .requests
                        .iter()
                        .map(|request| {
                            let mut line =
                                format!("[{}] {}", request.method.to_uppercase(), request.url);
                            if let Some((status, reason)) = &request.status {
                                line.push_str(&format!(" => [{status}] {reason}"));
                            }
                            line
                        })
                        .collect::<Vec<_>>()
                })?;
                return Ok(vec![text(lines.join("\n"))]);
            }
            _ => {}
        }
        if tool == "browser_resize" {
            let width = number(args, "width")?;
            let height = number(args, "height")?;
            if !(1.0..=MAX_SIDE).contains(&width) || !(1.0..=MAX_SIDE).contains(&height) {
                return Err(ToolError::Reported(format!(
                    "width and height must be between 1 and {MAX_SIDE} pixels"
                )));
            }
            // Both are whole numbers of pixels within the bounds just checked.
            session.set_viewport((width.round() as u32, height.round() as u32));
        }
        let viewport_now = session.viewport();
        let running = session.page().await?;
        running.forget_ahead();
        let modal_tool = matches!(tool, "browser_handle_dialog" | "browser_file_upload");
        let dialog_open = running.events(|events| events.dialog.is_some())?;
        let tab_tool = tool.starts_with("browser_tab_");
        if dialog_open && !modal_tool && !tab_tool {
            let mut lines = vec![
                format!("Tool \"{tool}\" does not handle the modal state."),
                "### Modal state".to_owned(),
            ];
            lines.extend(running.modal_lines()?);
            return Err(ToolError::Reported(lines.join("\n")));
        }
        // A crashed page's session answers nothing until a navigation gives the tab a new renderer:
        // only the tools that navigate or act on the browser itself go on.
        let crashed = running.events(|events| events.crashed)?;
        let navigates = matches!(
            tool,
            "browser_navigate" | "browser_navigate_back" | "browser_navigate_forward"
        );
        if crashed && !navigates && !tab_tool {
            let (url, _) = running.location().await?;
            return Err(ToolError::Reported(format!(
                "{CRASHED} Tool \"{tool}\" needs a live page: load it again with browser_navigate \
                 (it was at {url}), or open another tab (browser_tab_new)."
            )));
        }
        if navigates {
            // The navigation is what brings the page back; a crash it causes is seen anew.
            running.events(|events| events.crashed = false)?;
        }
        let mut images = Vec::new();
        let mut snapshot = true;
        let mut shot = None;
        let summary: String = match tool {
            "browser_snapshot" => String::new(),
            "browser_navigate" => {
                let url = string(args, "url")?;
                match navigate(running, url).await? {
                    Navigated::Yes => format!("Navigated to {url}"),
                    Navigated::HeldByDialog => held_by_dialog(url),
                }
            }
            "browser_navigate_back" | "browser_navigate_forward" => {
                let back = tool == "browser_navigate_back";
                history(running, back).await?
            }
            "browser_resize" => {
                let (width, height) = viewport_now;
                running.set_viewport(viewport_now).await?;
                format!("Resized the viewport to {width}x{height}")
            }
            "browser_click" => {
                let reference = string(args, "ref")?;
                let (node, _) = running.element(reference).await?;
                let point = running.center(&node, reference).await?;
                let before = running.marks()?;
                running
                    .racing(async {
                        running.mouse_move(point, 0).await?;
                        running.mouse_press(point).await?;
                        running.mouse_release(point).await
                    })
                    .await?;
                running.settle(before).await?;
                format!("Clicked {}", described(args, "element", reference))
            }
            "browser_hover" => {
                let reference = string(args, "ref")?;
                let (node, _) = running.element(reference).await?;
                let point = running.center(&node, reference).await?;
                let before = running.marks()?;
                running.racing(running.mouse_move(point, 0)).await?;
                running.settle(before).await?;
                format!("Hovered over {}", described(args, "element", reference))
            }
            "browser_type" => type_text(running, args).await?,
            "browser_select_option" => select_option(running, args).await?,
            "browser_press_key" => {
                let key = string(args, "key")?;
                let events = keys::press(key).map_err(ToolError::Reported)?;
                let before = running.marks()?;
                running.racing(running.keys(events)).await?;
                running.settle(before).await?;
                format!("Pressed {key}")
            }
            "browser_drag" => drag(running, args).await?,
            "browser_wait_for" => wait_for(running, args).await?,
            "browser_take_screenshot" => {
                // The capture is the compositor's work in the browser process; the snapshot of the
                // answer is the renderer's: both run at once.
                shot = Some(start_screenshot(running, args).await?);
                String::new()
            }
            "browser_pdf_save" => {
                snapshot = false;
                let data = running.print_pdf().await?;
                let saved = self.save(optional(args, "filename"), "pdf", data).await?;
                format!("Saved the page as PDF to {saved}")
            }
            "browser_tab_new" => {
                running.new_tab(viewport_now).await?;
                match optional(args, "url") {
                    Some(url) => match navigate(running, url).await? {
                        Navigated::Yes => format!("Opened a new tab at {url}"),
                        Navigated::HeldByDialog => held_by_dialog(url),
                    },
                    None => "Opened a new tab".to_owned(),
                }
            }
            "browser_tab_select" => {
                let index = tab_index(running, args.get("index"))?;
                running.select_tab(index).await?;
                format!("Selected tab {}", index + 1)
            }
            "browser_tab_close" => {
                let index = match args.get("index") {
                    None | Some(Value::Null) => running.current_tab(),
                    given => tab_index(running, given)?,
                };
                running.close_tab(index).await?;
                if running.tab_count() == 0 {
                    session.close().await;
                    return Ok(vec![text(format!("Closed tab {}.\n{NO_PAGE}", index + 1))]);
                }
                format!("Closed tab {}", index + 1)
            }
            "browser_handle_dialog" => {
                let Some(dialog) = running.events(|events| events.dialog.clone())? else {
                    let mut refusal =
                        "No dialog visible: browser_handle_dialog answers a dialog the \
                                       page opened (alert, confirm, prompt, beforeunload)."
                            .to_owned();
                    let elsewhere = running.modal_lines()?;
                    if !elsewhere.is_empty() {
                        refusal.push_str("\n### Modal state\n");
                        refusal.push_str(&elsewhere.join("\n"));
                    }
                    return Err(ToolError::Reported(refusal));
                };
                let accept = args.get("accept").and_then(Value::as_bool).ok_or_else(|| {
                    ToolError::Reported(
                        "accept is required: true to accept the dialog, false to dismiss it".into(),
                    )
                })?;
                let before = running.marks()?;
                running
                    .answer_dialog(accept, optional(args, "promptText"))
                    .await?;
                running.events(|events| events.dialog = None)?;
                running.settle(before).await?;
                format!(
                    "{} the \"{}\" dialog",
                    if accept { "Accepted" } else { "Dismissed" },
                    dialog.kind
                )
            }
            "browser_file_upload" => self.upload(running, args).await?,
            other => return Err(ToolError::Reported(format!("Unknown browser tool {other}"))),
        };
        let downloads = self.downloads_lines(running).await;
        let answer = page_answer(running, snapshot, downloads).await;
        let mut summary = summary;
        if let Some(shot) = shot {
            let (image, saved) = self.finish_screenshot(shot, args).await?;
            images.push(image);
            summary = format!("Took a screenshot, saved to {saved}");
        }
        let mut lines = Vec::new();
        if !summary.is_empty() {
            lines.push(format!("- {summary}"));
            lines.push(String::new());
        }
        lines.push(answer?);
        images.push(text(lines.join("\n")));
        Ok(images)
    }

    /// Waits for a started capture, saves it in the workspace; the image item and where it went.
    async fn finish_screenshot(
        &self,
        capture: Capture,
        args: &Value,
    ) -> Result<(ContentItem, String), ToolError> {
        let raw = capture.raw();
        let Image {
            base64: data,
            bytes,
        } = capture.finish().await?;
        let extension = if raw { "png" } else { "jpeg" };
        let saved = self
            .save(optional(args, "filename"), extension, bytes)
            .await?;
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
        tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&real)?;
            file.write_all(&data)
        })
        .await
        .map_err(|err| ToolError::Reported(format!("saving the file failed: {err}")))?
        .map_err(|err| ToolError::Reported(format!("cannot save {}: {err}", shown.display())))?;
        Ok(shown.display().to_string())
    }

    /// What became of the browser's downloads since the last answer, as `### Downloads` lines: a
    /// download still running is waited for once (within the settle cap), a finished one is given its
    /// name in the workspace's `downloads/` (the page's suggestion, cleaned, made unique) and said once.
    async fn downloads_lines(&self, running: &Running) -> Vec<String> {
        let events = running.browser_events();
        let unannounced = |downloads: &mut std::collections::VecDeque<Download>| {
            downloads
                .iter()
                .any(|d| d.state == DownloadState::InProgress && !d.announced)
        };
        if events.downloads(unannounced) {
            let deadline = Instant::now() + SETTLE_CAP;
            let mut changes = events.subscribe();
            for _ in 0..10_000 {
                if !events.downloads(unannounced) || running.is_closed() {
                    break;
                }
                if tokio::time::timeout_at(deadline, changes.changed())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
        let pending = events.downloads(|downloads| {
            downloads
                .iter()
                .filter(|d| !d.reported)
                .cloned()
                .collect::<Vec<_>>()
        });
        if pending.is_empty() {
            return Vec::new();
        }
        let directory = self
            .workspace
            .resolve(DOWNLOADS)
            .map(|resolved| resolved.real)
            .ok();
        let shown = self.workspace.root().join(DOWNLOADS);
        let mut lines = Vec::new();
        for download in pending {
            let mut saved = download.saved.clone();
            if download.state == DownloadState::Completed && saved.is_none() {
                let named = match directory.clone() {
                    Some(directory) => {
                        let (guid, suggested) = (download.guid.clone(), download.suggested.clone());
                        tokio::task::spawn_blocking(move || {
                            name_download(&directory, &guid, &suggested)
                        })
                        .await
                        .unwrap_or_else(|err| Err(std::io::Error::other(err.to_string())))
                    }
                    None => Err(std::io::Error::other("the directory leaves the workspace")),
                };
                match named {
                    Ok(name) => saved = Some(name),
                    Err(err) => {
                        tracing::warn!(guid = %download.guid, "cannot name a download: {err}");
                        saved = Some(download.guid.clone());
                    }
                }
            }
            let (line, reported) = match download.state {
                DownloadState::Completed => (
                    format!(
                        "- Downloaded file {} to {}",
                        download.suggested,
                        shown.join(saved.as_deref().unwrap_or_default()).display()
                    ),
                    true,
                ),
                DownloadState::Canceled => (
                    format!("- Download of {} was canceled", download.suggested),
                    true,
                ),
                DownloadState::InProgress if download.announced => continue,
                DownloadState::InProgress => (
                    format!(
                        "- Downloading file {} ... (it goes to {}/; a later answer says its name)",
                        download.suggested,
                        shown.display()
                    ),
                    false,
                ),
            };
            lines.push(line);
            events.downloads(|downloads| {
                if let Some(entry) = downloads.iter_mut().find(|d| d.guid == download.guid) {
                    entry.saved = saved;
                    entry.announced = true;
                    entry.reported = reported;
                }
            });
        }
        lines
    }

    async fn upload(&self, running: &mut Running, args: &Value) -> Result<String, ToolError> {
        let Some((input_session, input)) = running.events(|events| events.file_chooser.clone())?
        else {
            return Err(ToolError::Reported(
                "No file chooser visible: click the file input first (browser_click), then call \
                 browser_file_upload."
                    .into(),
            ));
        };
        let paths: Vec<String> = args
            .get("paths")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .ok_or_else(|| ToolError::Reported("paths must be a list of file paths".into()))?;
        if paths.len() > MAX_UPLOADS {
            return Err(ToolError::Reported(format!(
                "at most {MAX_UPLOADS} files at once"
            )));
        }
        let uploads = self.uploads.clone();
        let files = tokio::task::spawn_blocking(move || {
            paths
                .iter()
                .map(|path| {
                    let resolved = uploads.check(path).map_err(|err| {
                        ToolError::Reported(format!(
                            "cannot upload {path:?}: {err} Upload files of the workspace or of \
                             a directory given with --allow-dir."
                        ))
                    })?;
                    if !resolved.real.is_file() {
                        return Err(ToolError::Reported(format!(
                            "cannot upload {path:?}: not a file"
                        )));
                    }
                    Ok(resolved.real.display().to_string())
                })
                .collect::<Result<Vec<String>, ToolError>>()
        })
        .await
        .map_err(|err| ToolError::Reported(format!("resolving the paths failed: {err}")))??;
        let before = running.marks()?;
        // The input's own renderer: the tab's, or that of the frame (in another process) it is in.
        running.choose_files(&input_session, input, &files).await?;
        running.events(|events| events.file_chooser = None)?;
        running.settle(before).await?;
        Ok(format!("Chose {} file(s) in the file chooser", files.len()))
    }
}

/// Checks the arguments and starts the capture (of the viewport, or of a ref's element).
async fn start_screenshot(running: &mut Running, args: &Value) -> Result<Capture, ToolError> {
    let raw = args.get("raw").and_then(Value::as_bool).unwrap_or(false);
    let element = optional(args, "element");
    let reference = optional(args, "ref");
    if element.is_some() != reference.is_some() {
        return Err(ToolError::Reported(
            "Both element and ref must be provided or neither.".into(),
        ));
    }
    let clip = match reference {
        Some(reference) => {
            let (node, _) = running.element(reference).await?;
            let _ = running.center(&node, reference).await?;
            Some(running.element_clip(&node, reference).await?)
        }
        None => None,
    };
    running.start_screenshot(raw, clip)
}

/// The answer after an action: modal state, tabs, URL, title and (unless a dialog blocks the page)
/// the snapshot.
async fn page_answer(
    running: &mut Running,
    snapshot: bool,
    downloads: Vec<String>,
) -> Result<String, ToolError> {
    let mut lines = Vec::new();
    let modal = running.modal_lines()?;
    let (blocked, crashed) = running.events(|events| (events.dialog.is_some(), events.crashed))?;
    if crashed {
        lines.push(format!(
            "### Page crashed\n- {CRASHED} browser_navigate loads a page in this tab again."
        ));
        lines.push(String::new());
    }
    if !modal.is_empty() {
        lines.push("### Modal state".to_owned());
        lines.extend(modal);
        lines.push(String::new());
    }
    if !downloads.is_empty() {
        lines.push("### Downloads".to_owned());
        lines.extend(downloads);
        lines.push(String::new());
    }
    if running.tab_count() > 1 {
        lines.push(running.tab_list().await?);
        lines.push(String::new());
        lines.push("### Current tab".to_owned());
    }
    let (url, title, snapshot) = running
        .location_and_snapshot(snapshot && !blocked && !crashed)
        .await?;
    lines.push(format!("- Page URL: {url}"));
    lines.push(format!("- Page Title: {title}"));
    lines.extend(snapshot);
    Ok(lines.join("\n"))
}

enum Navigated {
    /// Done, turned into a download, or settled as far as the cap allows.
    Yes,
    /// A dialog the page opened (`beforeunload`) holds it until answered.
    HeldByDialog,
}

fn held_by_dialog(url: &str) -> String {
    format!(
        "Navigation to {url} waits for the page's dialog: accept it with browser_handle_dialog \
         to leave the page, or dismiss it to stay"
    )
}

async fn navigate(running: &mut Running, url: &str) -> Result<Navigated, ToolError> {
    running.events(|events| {
        events.console.clear();
        events.requests.clear();
    })?;
    let before = running.marks()?;
    let navigation = running.racing(running.load(url)).await?;
    let Some(navigation) = navigation else {
        // A dialog (beforeunload) holds the navigation: the answer shows it.
        return Ok(Navigated::HeldByDialog);
    };
    if navigation.download {
        // No document comes: the answer says where the file went, once the browser said it began.
        download_began(running).await;
        return Ok(Navigated::Yes);
    }
    if let Some(error) = navigation.error {
        // Chromium aborts a navigation that turned into a download, and says so a moment later.
        if error.contains("ERR_ABORTED") && download_began(running).await {
            return Ok(Navigated::Yes);
        }
        // The renderer died under it: the answer says the page crashed.
        if running.events(|events| events.crashed)? {
            return Ok(Navigated::Yes);
        }
        return Err(ToolError::Reported(format!(
            "Navigation to {url} failed: {error}"
        )));
    }
    // One cap for the load and the settling after it: a page whose load never fires is usable once
    // it committed, and its hanging requests are not waited for a second time.
    let deadline = Instant::now() + SETTLE_CAP;
    if navigation.new_document {
        running
            .wait_until(deadline, |events| events.loads != before.loads)
            .await?;
    }
    running.settle_loaded(running.marks()?, deadline).await?;
    Ok(Navigated::Yes)
}

/// Whether a download not yet said in an answer begins within a second (the navigation to `url`
/// turned into one; its URL may differ after redirects); false at once when the page crashed.
async fn download_began(running: &Running) -> bool {
    let events = running.browser_events();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut changes = events.subscribe();
    for _ in 0..10_000 {
        if events.downloads(|downloads| downloads.iter().any(|d| !d.announced)) {
            return true;
        }
        if running.is_closed()
            || running.events(|events| events.crashed).unwrap_or(true)
            || tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
        {
            return false;
        }
    }
    false
}

async fn history(running: &mut Running, back: bool) -> Result<String, ToolError> {
    let Some(entry) = running.history_neighbour(back).await? else {
        return Ok(format!(
            "There is no page to go {} to",
            if back { "back" } else { "forward" }
        ));
    };
    let before = running.marks()?;
    let moved = running.racing(running.go_to_history_entry(entry)).await?;
    if moved.is_some() {
        let deadline = Instant::now() + SETTLE_CAP;
        running
            .wait_until(deadline, |events| {
                events.loads != before.loads || events.documents != before.documents
            })
            .await?;
        running.settle_loaded(running.marks()?, deadline).await?;
    }
    Ok(format!("Went {}", if back { "back" } else { "forward" }))
}

const FOCUS_FOR_TYPING: &str = "function(replace) {
  const editable = this.isContentEditable || this.nodeName === 'TEXTAREA' ||
    (this.nodeName === 'INPUT' && !['checkbox', 'radio', 'button', 'submit', 'reset', 'file', 'image', 'range', 'color'].includes(this.type));
  if (!editable) return 'The element is not an editable field (an input, a textarea or a contenteditable element).';
  if (this.disabled || this.readOnly) return 'The field is disabled or read-only.';
  this.focus();
  if (replace) {
    if (typeof this.select === 'function') this.select();
    else { const range = document.createRange(); range.selectNodeContents(this); const selection = getSelection(); selection.removeAllRanges(); selection.addRange(range); }
  }
  return '';
}";

async fn type_text(running: &mut Running, args: &Value) -> Result<String, ToolError> {
    let reference = string(args, "ref")?;
    let typed = args
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::Reported("text is required: the text to type".into()))?;
    if typed.chars().count() > MAX_TYPED {
        return Err(ToolError::Reported(format!(
            "text is longer than {MAX_TYPED} characters"
        )));
    }
    let submit = args.get("submit").and_then(Value::as_bool).unwrap_or(false);
    let slowly = args.get("slowly").and_then(Value::as_bool).unwrap_or(false);
    let (node, object) = running.element(reference).await?;
    let refused = running
        .call_on(&node.session, &object, FOCUS_FOR_TYPING, json!([!slowly]))
        .await?;
    if let Some(reason) = refused.as_str().filter(|reason| !reason.is_empty()) {
        return Err(ToolError::Reported(format!(
            "Cannot type into ref {reference}: {reason}"
        )));
    }
    let before = running.marks()?;
    running
        .racing(async {
            if slowly {
                for character in typed.chars() {
                    running.keys(keys::type_char(character)).await?;
                }
            } else if typed.is_empty() {
                running
                    .keys(keys::press("Delete").map_err(ToolError::Reported)?)
                    .await?;
            } else {
                running.insert_text(typed).await?;
            }
            if submit {
                running
                    .keys(keys::press("Enter").map_err(ToolError::Reported)?)
                    .await?;
            }
            Ok(())
        })
        .await?;
    running.settle(before).await?;
    Ok(format!(
        "Typed {} into {}{}",
        serde_json::to_string(typed).unwrap_or_default(),
        described(args, "element", reference),
        if submit { " and pressed Enter" } else { "" }
    ))
}

const SELECT_OPTIONS: &str = "function(values) {
  if (this.nodeName !== 'SELECT') return {error: 'The element is not a select (a dropdown).'};
  if (this.disabled) return {error: 'The select is disabled.'};
  const options = [...this.options];
  const chosen = [];
  for (const value of values) {
    const option = options.find(o => o.value === value) || options.find(o => o.label === value || o.text.trim() === value);
    if (!option) return {error: 'No option ' + JSON.stringify(value) + '; the options are ' + options.map(o => JSON.stringify(o.value)).join(', ') + '.'};
    chosen.push(option);
  }
  if (chosen.length > 1 && !this.multiple) return {error: 'The select takes one value, not ' + chosen.length + '.'};
  for (const option of options) option.selected = chosen.includes(option);
  this.dispatchEvent(new Event('input', {bubbles: true}));
  this.dispatchEvent(new Event('change', {bubbles: true}));
  return {selected: chosen.map(o => o.value)};
}";

async fn select_option(running: &mut Running, args: &Value) -> Result<String, ToolError> {
    let reference = string(args, "ref")?;
    let values: Vec<&str> = args
        .get("values")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .ok_or_else(|| ToolError::Reported("values must be a list of option values".into()))?;
    let (node, object) = running.element(reference).await?;
    let before = running.marks()?;
    let outcome = running
        .racing(running.call_on(&node.session, &object, SELECT_OPTIONS, json!([values])))
        .await?
        .unwrap_or(Value::Null);
    if let Some(error) = outcome.get("error").and_then(Value::as_str) {
        return Err(ToolError::Reported(format!(
            "Cannot select in ref {reference}: {error}"
        )));
    }
    running.settle(before).await?;
    Ok(format!(
        "Selected {} in {}",
        outcome.get("selected").unwrap_or(&json!(values)),
        described(args, "element", reference)
    ))
}

async fn drag(running: &mut Running, args: &Value) -> Result<String, ToolError> {
    let start_ref = string(args, "startRef")?;
    let end_ref = string(args, "endRef")?;
    let (start_node, _) = running.element(start_ref).await?;
    let (end_node, _) = running.element(end_ref).await?;
    let start = running.center(&start_node, start_ref).await?;
    let end = running.center(&end_node, end_ref).await?;
    let before = running.marks()?;
    running.events(|events| events.drag = None)?;
    running.intercept_drags(true).await?;
    let dragged = running
        .racing(async {
            running.mouse_move(start, 0).await?;
            running.mouse_press(start).await?;
            // A few pixels of motion start a drag (HTML drag and drop) if the element is draggable.
            for step in 1..=3 {
                let offset = f64::from(step) * 5.0;
                running
                    .mouse_move((start.0 + offset, start.1 + offset), 1)
                    .await?;
            }
            // The page starts its drag on that motion; the interception is reported soon after.
            running
                .wait_until(Instant::now() + Duration::from_millis(300), |events| {
                    events.drag.is_some()
                })
                .await?;
            let data = running.events(|events| events.drag.take())?;
            if let Some(data) = data {
                running.drop_dragged(end, &data).await?;
            } else {
                for step in 1..=10 {
                    let fraction = f64::from(step) / 10.0;
                    let point = (
                        start.0 + (end.0 - start.0) * fraction,
                        start.1 + (end.1 - start.1) * fraction,
                    );
                    running.mouse_move(point, 1).await?;
                }
            }
            running.mouse_release(end).await
        })
        .await;
    let _ = running.intercept_drags(false).await;
    dragged?;
    running.settle(before).await?;
    Ok(format!(
        "Dragged {} to {}",
        described(args, "startElement", start_ref),
        described(args, "endElement", end_ref)
    ))
}

async fn wait_for(running: &mut Running, args: &Value) -> Result<String, ToolError> {
    let time = args
        .get("time")
        .and_then(Value::as_f64)
        .filter(|t| *t > 0.0);
    let shown = optional(args, "text");
    let gone = optional(args, "textGone");
    if time.is_none() && shown.is_none() && gone.is_none() {
        return Err(ToolError::Reported(
            "Either time, text or textGone must be provided".into(),
        ));
    }
    let mut done = Vec::new();
    if let Some(seconds) = time {
        let wait = Duration::try_from_secs_f64(seconds)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        tokio::time::sleep(wait).await;
        done.push(format!("Waited {}s", wait.as_secs_f64()));
    }
    for (needle, present) in [(gone, false), (shown, true)] {
        let Some(needle) = needle else { continue };
        let expression = format!(
            "new Promise(resolve => {{ const needle = {needle}; const check = () => \
             (document.body ? document.body.innerText : '').includes(needle) === {present}; \
             if (check()) return resolve(true); const observer = new MutationObserver(() => {{ if \
             (check()) {{ observer.disconnect(); resolve(true); }} }}); observer.observe(document, \
             {{subtree: true, childList: true, characterData: true, attributes: true}}); \
             setTimeout(() => {{ observer.disconnect(); resolve(check()); }}, {limit}); }})",
            needle = serde_json::to_string(needle).unwrap_or_default(),
            limit = TEXT_WAIT.as_millis()
        );
        let answer = running
            .evaluate_in_page(&expression, TEXT_WAIT + Duration::from_secs(2))
            .await?;
        let Some(answer) = answer else { break };
        if answer.pointer("/result/value") != Some(&json!(true)) {
            return Err(ToolError::Reported(format!(
                "Timed out after {}s waiting for the text {} to {}",
                TEXT_WAIT.as_secs(),
                serde_json::to_string(needle).unwrap_or_default(),
                if present { "appear" } else { "disappear" }
            )));
        }
        done.push(format!(
            "The text {} {}",
            serde_json::to_string(needle).unwrap_or_default(),
            if present { "appeared" } else { "is gone" }
        ));
    }
    Ok(done.join("; "))
}

fn tab_index(running: &Running, index: Option<&Value>) -> Result<usize, ToolError> {
    let count = running.tab_count();
    let bad = || {
        ToolError::Reported(format!(
            "index must be the number of an open tab, from 1 to {count} (see browser_tab_list)"
        ))
    };
    let index = index.and_then(Value::as_f64).ok_or_else(bad)?;
    if index.fract() != 0.0 || index < 1.0 || index > count as f64 {
        return Err(bad());
    }
    // A whole number between 1 and the tab count, checked above.
    Ok(index as usize - 1)
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

fn safe_name(requested: &str, extension: &str) -> String {
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

/// Gives the finished download saved as `guid` in `directory` the page's suggested name, cleaned
/// (one path component, no leading dot) and made unique (`name-1.ext`, ...); never replaces a file.
fn name_download(directory: &Path, guid: &str, suggested: &str) -> std::io::Result<String> {
    if guid.is_empty() || !guid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(std::io::Error::other(format!(
            "unexpected download id {guid:?}"
        )));
    }
    let source = directory.join(guid);
    let name = safe_name(suggested, "");
    let name = name.trim_end_matches('.');
    let name = if name.is_empty() { "download" } else { name };
    let (stem, extension) = match name.rsplit_once('.') {
        Some((stem, extension)) if !stem.is_empty() => (stem, format!(".{extension}")),
        _ => (name, String::new()),
    };
    for attempt in 0..MAX_SAME_NAME {
        let candidate = match attempt {
            0 => name.to_owned(),
            n => format!("{stem}-{n}{extension}"),
        };
        // A hard link never replaces an existing file, and the guid's file is the browser's own.
        match std::fs::hard_link(&source, directory.join(&candidate)) {
            Ok(()) => {
                std::fs::remove_file(&source)?;
                return Ok(candidate);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
    Err(std::io::Error::other(format!(
        "{MAX_SAME_NAME} files named like {name:?} already"
    )))
}

fn text(text: impl Into<String>) -> ContentItem {
    ContentItem::Text {
        text: text.into(),
        description: None,
    }
}

/// A string argument: absent, null and "" are "not given" (the client sends its defaults).
fn optional<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn string<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    optional(args, key).ok_or_else(|| ToolError::Reported(format!("{key} is required")))
}

fn number(args: &Value, key: &str) -> Result<f64, ToolError> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| ToolError::Reported(format!("{key} is required: a number of pixels")))
}

fn described(args: &Value, key: &str, reference: &str) -> String {
    match optional(args, key) {
        Some(element) => format!("{element} ({reference})"),
        None => reference.to_owned(),
    }
}

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

const ELEMENT: &str =
    "Human-readable element description used to obtain permission to interact with the element";
const REF: &str = "Exact target element reference from the page snapshot";

fn element_schema(extra: Value, required: &[&str]) -> Value {
    let mut properties = json!({
        "element": {"type": "string", "description": ELEMENT},
        "ref": {"type": "string", "description": REF},
    });
    if let (Some(properties), Some(extra)) = (properties.as_object_mut(), extra.as_object()) {
        properties.extend(extra.clone());
    }
    let mut all = vec!["element", "ref"];
    all.extend(required);
    schema(properties, &all)
}

/// (name, description, schema) of every tool, as @playwright/mcp 0.0.25 declares them.
fn definitions() -> Vec<(&'static str, &'static str, Value)> {
    let none = || schema(json!({}), &[]);
    vec![
        ("browser_close", "Close the page", none()),
        (
            "browser_resize",
            "Resize the browser window",
            schema(
                json!({"width": {"type": "number", "description": "Width of the browser window"},
                       "height": {"type": "number", "description": "Height of the browser window"}}),
                &["width", "height"],
            ),
        ),
        (
            "browser_console_messages",
            "Returns all console messages",
            none(),
        ),
        (
            "browser_handle_dialog",
            "Handle a dialog",
            schema(
                json!({"accept": {"type": "boolean", "description": "Whether to accept the dialog."},
                       "promptText": {"type": "string", "description": "The text of the prompt in case of a prompt dialog."}}),
                &["accept"],
            ),
        ),
        (
            "browser_file_upload",
            "Upload one or multiple files",
            schema(
                json!({"paths": {"type": "array", "items": {"type": "string"},
                       "description": "The absolute paths to the files to upload. Can be a single file or multiple files."}}),
                &["paths"],
            ),
        ),
        (
            "browser_press_key",
            "Press a key on the keyboard",
            schema(
                json!({"key": {"type": "string", "description": "Name of the key to press or a character to generate, such as `ArrowLeft` or `a`"}}),
                &["key"],
            ),
        ),
        (
            "browser_navigate",
            "Navigate to a URL",
            schema(
                json!({"url": {"type": "string", "description": "The URL to navigate to"}}),
                &["url"],
            ),
        ),
        (
            "browser_navigate_back",
            "Go back to the previous page",
            none(),
        ),
        (
            "browser_navigate_forward",
            "Go forward to the next page",
            none(),
        ),
        (
            "browser_network_requests",
            "Returns all network requests since loading the page",
            none(),
        ),
        (
            "browser_pdf_save",
            "Save page as PDF",
            schema(
                json!({"filename": {"type": "string", "description": "File name to save the pdf to. Defaults to `page-{timestamp}.pdf` if not specified."}}),
                &[],
            ),
        ),
        (
            "browser_take_screenshot",
            "Take a screenshot of the current page. You can't perform actions based on the screenshot, use browser_snapshot for actions.",
            schema(
                json!({
                    "raw": {"type": "boolean", "description": "Whether to return without compression (in PNG format). Default is false, which returns a JPEG image."},
                    "filename": {"type": "string", "description": "File name to save the screenshot to. Defaults to `page-{timestamp}.{png|jpeg}` if not specified."},
                    "element": {"type": "string", "description": "Human-readable element description used to obtain permission to screenshot the element. If not provided, the screenshot will be taken of viewport. If element is provided, ref must be provided too."},
                    "ref": {"type": "string", "description": "Exact target element reference from the page snapshot. If not provided, the screenshot will be taken of viewport. If ref is provided, element must be provided too."}
                }),
                &[],
            ),
        ),
        (
            "browser_snapshot",
            "Capture accessibility snapshot of the current page, this is better than screenshot",
            none(),
        ),
        (
            "browser_click",
            "Perform click on a web page",
            element_schema(json!({}), &[]),
        ),
        (
            "browser_drag",
            "Perform drag and drop between two elements",
            schema(
                json!({
                    "startElement": {"type": "string", "description": "Human-readable source element description used to obtain the permission to interact with the element"},
                    "startRef": {"type": "string", "description": "Exact source element reference from the page snapshot"},
                    "endElement": {"type": "string", "description": "Human-readable target element description used to obtain the permission to interact with the element"},
                    "endRef": {"type": "string", "description": "Exact target element reference from the page snapshot"}
                }),
                &["startElement", "startRef", "endElement", "endRef"],
            ),
        ),
        (
            "browser_hover",
            "Hover over element on page",
            element_schema(json!({}), &[]),
        ),
        (
            "browser_type",
            "Type text into editable element",
            element_schema(
                json!({
                    "text": {"type": "string", "description": "Text to type into the element"},
                    "submit": {"type": "boolean", "description": "Whether to submit entered text (press Enter after)"},
                    "slowly": {"type": "boolean", "description": "Whether to type one character at a time. Useful for triggering key handlers in the page. By default entire text is filled in at once."}
                }),
                &["text"],
            ),
        ),
        (
            "browser_select_option",
            "Select an option in a dropdown",
            element_schema(
                json!({"values": {"type": "array", "items": {"type": "string"}, "description": "Array of values to select in the dropdown. This can be a single value or multiple values."}}),
                &["values"],
            ),
        ),
        ("browser_tab_list", "List browser tabs", none()),
        (
            "browser_tab_new",
            "Open a new tab",
            schema(
                json!({"url": {"type": "string", "description": "The URL to navigate to in the new tab. If not provided, the new tab will be blank."}}),
                &[],
            ),
        ),
        (
            "browser_tab_select",
            "Select a tab by index",
            schema(
                json!({"index": {"type": "number", "description": "The index of the tab to select"}}),
                &["index"],
            ),
        ),
        (
            "browser_tab_close",
            "Close a tab",
            schema(
                json!({"index": {"type": "number", "description": "The index of the tab to close. Closes current tab if not provided."}}),
                &[],
            ),
        ),
        (
            "browser_wait_for",
            "Wait for text to appear or disappear or a specified time to pass",
            schema(
                json!({
                    "time": {"type": "number", "description": "The time to wait in seconds"},
                    "text": {"type": "string", "description": "The text to wait for"},
                    "textGone": {"type": "string", "description": "The text to wait for to disappear"}
                }),
                &[],
            ),
        ),
    ]
}

pub fn tools(browser: &Arc<Browser>) -> Vec<Tool> {
    definitions()
        .into_iter()
        .map(|(name, description, input_schema)| {
            let browser = Arc::clone(browser);
            Tool::new(GROUP, name, description, input_schema, move |arguments| {
                let browser = Arc::clone(&browser);
                async move { browser.call(name, arguments).await }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_23_tools_and_saved_names_stay_in_the_workspace() {
        assert_eq!(definitions().len(), 23);
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
