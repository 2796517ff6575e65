//! Files in and out of the page: uploads through the page's file chooser, and the downloads the
//! page started, saved in the workspace (upstream's output directory) under their suggested names and
//! said in the next answer; a download past its bounds is stopped and its partial file deleted.

use std::path::Path;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;

use super::super::events::{Download, DownloadState};
use super::super::launch::stage_uploads;
use super::super::session::{Running, SETTLE_CAP};
use super::capture::safe_name;
use super::{Answer, Browser, BrowserTool, Declared, PageCall, Policy};
use crate::tools::ToolError;

/// Files `browser_file_upload` takes at once.
const MAX_UPLOADS: usize = 100;
/// Numbered variants tried for a download's name before giving up (`name-1.ext` ... ).
const MAX_SAME_NAME: usize = 1000;

pub(super) fn declarations() -> Vec<Declared> {
    vec![
        BrowserTool::on_page(
            "browser_file_upload",
            "Upload one or multiple files",
            Policy::MODAL,
            file_upload,
        )
        .declared(),
    ]
}

#[derive(Deserialize, JsonSchema)]
struct UploadArguments {
    #[schemars(
        description = "The absolute paths to the files to upload. Can be a single file or multiple files."
    )]
    paths: Vec<String>,
}

fn file_upload(
    call: PageCall<'_>,
    arguments: UploadArguments,
) -> BoxFuture<'_, Result<Answer, ToolError>> {
    Box::pin(async move {
        Ok(Answer::page(
            call.browser.upload(call.page, arguments).await?,
        ))
    })
}

impl Browser {
    /// What became of the browser's downloads since the last answer, as `### Downloads` lines: a
    /// download still running is waited for once (within the settle cap), a finished one is given its
    /// name in the workspace's `downloads/` (the page's suggestion, cleaned, made unique) and said once.
    pub(in crate::browser) async fn downloads_lines(&self, running: &Running) -> Vec<String> {
        let events = running.browser_events();
        // The addressed session's downloads: those its tabs started.
        let context = running.browser_context().map(str::to_owned);
        let unannounced = |downloads: &mut std::collections::VecDeque<Download>| {
            downloads.iter().any(|d| {
                d.state == DownloadState::InProgress && !d.announced && d.context == context
            })
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
                .filter(|d| !d.reported && d.context == context)
                .cloned()
                .collect::<Vec<_>>()
        });
        if pending.is_empty() {
            return Vec::new();
        }
        // The session's directory, unless the file is in another's (a download a frame that is no
        // tab's main frame started is the default session's, wherever its file is).
        let staging = running.download_dirs();
        let destination = self.workspace.real_root().to_path_buf();
        let shown = self.workspace.root().to_path_buf();
        let limits = self.download_limits;
        let mut lines = Vec::new();
        for download in pending {
            let mut saved = download.saved.clone();
            if download.state.stopped() {
                // Its partial file (or a whole one that came faster than the cancel) goes.
                let (staging, guid) = (staging.clone(), download.guid.clone());
                let removed = tokio::task::spawn_blocking(move || {
                    staging.iter().try_for_each(|dir| remove_staged(dir, &guid))
                })
                .await;
                if let Ok(Err(err)) = removed {
                    tracing::warn!(guid = %download.guid, "cannot delete a stopped download: {err}");
                }
            }
            if download.state == DownloadState::Completed && saved.is_none() {
                let (staging, destination) = (staging.clone(), destination.clone());
                let (guid, suggested) = (download.guid.clone(), download.suggested.clone());
                let named = tokio::task::spawn_blocking(move || {
                    name_download(staged_in(&staging, &guid), &destination, &guid, &suggested)
                })
                .await
                .unwrap_or_else(|err| Err(std::io::Error::other(err.to_string())));
                match named {
                    Ok(name) => saved = Some(name),
                    Err(err) => {
                        tracing::warn!(guid = %download.guid, "cannot save a download: {err}");
                        lines.push(format!(
                            "- Download of {} could not be saved in the workspace: {err}",
                            download.suggested
                        ));
                        events.downloads(|downloads| {
                            if let Some(entry) =
                                downloads.iter_mut().find(|d| d.guid == download.guid)
                            {
                                entry.announced = true;
                                entry.reported = true;
                            }
                        });
                        continue;
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
                DownloadState::TooLarge { received } => (
                    format!(
                        "- Download of {} was stopped after {received} bytes: over the bound of \
                         {} bytes per download (`--browser-max-download-bytes`); its partial file \
                         was deleted",
                        download.suggested, limits.max_bytes
                    ),
                    true,
                ),
                DownloadState::OverCount => (
                    format!(
                        "- Download of {} was refused: this browser already took {} downloads, \
                         the bound (`--browser-max-downloads`); browser_close starts the count \
                         again",
                        download.suggested, limits.max_count
                    ),
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

    /// The paths the browser reads `paths` from: each a file of the workspace or of a directory given
    /// with `--allow-dir`, opened once through the confinement (for a browser under its own user, a
    /// copy staged for it from those very descriptors).
    pub(in crate::browser) async fn upload_paths(
        &self,
        running: &Running,
        paths: Vec<String>,
    ) -> Result<Vec<String>, ToolError> {
        if paths.len() > MAX_UPLOADS {
            return Err(ToolError::Reported(format!(
                "at most {MAX_UPLOADS} files at once"
            )));
        }
        let uploads = self.uploads.clone();
        // Each file opened once, through the confinement's descriptors (no link followed after the
        // check, no FIFO or device opened): a copy for a browser under its own user is made from
        // these very descriptors, so nothing swapped in at the path since can be read instead.
        let opened = tokio::task::spawn_blocking(move || {
            paths
                .iter()
                .map(|path| {
                    let (resolved, held) = uploads.open(path).map_err(|err| {
                        ToolError::Reported(format!(
                            "cannot upload {path:?}: {err} Upload files of the workspace or of \
                             a directory given with --allow-dir."
                        ))
                    })?;
                    let not_a_file =
                        || ToolError::Reported(format!("cannot upload {path:?}: not a file"));
                    let file = held.open_for_reading().map_err(|_| not_a_file())?;
                    if !file.metadata().is_ok_and(|meta| meta.is_file()) {
                        return Err(not_a_file());
                    }
                    Ok((resolved.real, file))
                })
                .collect::<Result<Vec<(std::path::PathBuf, std::fs::File)>, ToolError>>()
        })
        .await
        .map_err(|err| ToolError::Reported(format!("resolving the paths failed: {err}")))??;
        let files: Vec<String> = match running.upload_staging() {
            None => opened
                .iter()
                .map(|(path, _)| path.display().to_string())
                .collect(),
            Some((staging, user)) => {
                tokio::task::spawn_blocking(move || stage_uploads(&staging, &user, opened))
                    .await
                    .map_err(|err| ToolError::Reported(format!("copying the files failed: {err}")))?
                    .map_err(|err| ToolError::Reported(format!("cannot upload the files: {err}")))?
                    .iter()
                    .map(|path| path.display().to_string())
                    .collect()
            }
        };
        Ok(files)
    }

    async fn upload(
        &self,
        running: &mut Running,
        args: UploadArguments,
    ) -> Result<String, ToolError> {
        let Some((input_session, input)) = running.events(|events| events.file_chooser.clone())?
        else {
            return Err(ToolError::Reported(
                "No file chooser visible: click the file input first (browser_click), then call \
                 browser_file_upload."
                    .into(),
            ));
        };
        let files = self.upload_paths(running, args.paths).await?;
        let before = running.marks()?;
        // The input's own renderer: the tab's, or that of the frame (in another process) it is in.
        running.choose_files(&input_session, input, &files).await?;
        running.events(|events| events.file_chooser = None)?;
        running.settle(before).await?;
        Ok(format!("Chose {} file(s) in the file chooser", files.len()))
    }
}

/// Checks a download id before it names a file: the browser's own, hex digits and dashes.
fn check_guid(guid: &str) -> std::io::Result<()> {
    if guid.is_empty() || !guid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(std::io::Error::other(format!(
            "unexpected download id {guid:?}"
        )));
    }
    Ok(())
}

/// The directory of `dirs` (the sessions' download directories) holding the download `guid`; the
/// first when none does.
fn staged_in<'a>(dirs: &'a [std::path::PathBuf], guid: &str) -> &'a Path {
    dirs.iter()
        .find(|dir| std::fs::symlink_metadata(dir.join(guid)).is_ok())
        .or(dirs.first())
        .map_or(Path::new(""), |dir| dir.as_path())
}

/// Deletes what the browser wrote of a stopped download (nothing there is no failure).
fn remove_staged(staging: &Path, guid: &str) -> std::io::Result<()> {
    check_guid(guid)?;
    for name in [guid.to_owned(), format!("{guid}.crdownload")] {
        match std::fs::remove_file(staging.join(name)) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
    }
    Ok(())
}

/// Moves the finished download saved as `guid` in `staging` into `destination` under the page's
/// suggested name, cleaned (one path component, no leading dot) and made unique (`name-1.ext`, ...);
/// never replaces a file, never follows a symlink. A link when both are on one filesystem, a copy
/// otherwise (the staging directory is in the browser's profile, in the temporary directory).
fn name_download(
    staging: &Path,
    destination: &Path,
    guid: &str,
    suggested: &str,
) -> std::io::Result<String> {
    check_guid(guid)?;
    let source = staging.join(guid);
    // A browser under its own user wrote the file: a hard link would leave that user a writable name
    // for a workspace file, so it gets a copy of boxd's instead.
    let written_by_boxd = {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid only reads the caller's credentials.
        std::fs::symlink_metadata(&source)?.uid() == unsafe { libc::geteuid() }
    };
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
        let target = destination.join(&candidate);
        // A hard link never replaces an existing file, and the guid's file is the browser's own.
        let linked = if written_by_boxd {
            std::fs::hard_link(&source, &target)
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::CrossesDevices))
        };
        match linked {
            Ok(()) => {
                std::fs::remove_file(&source)?;
                return Ok(candidate);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) if err.kind() == std::io::ErrorKind::CrossesDevices => {
                match copy_new(&source, &target) {
                    Ok(()) => {
                        std::fs::remove_file(&source)?;
                        return Ok(candidate);
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(err) => return Err(err),
                }
            }
            Err(err) => return Err(err),
        }
    }
    Err(std::io::Error::other(format!(
        "{MAX_SAME_NAME} files named like {name:?} already"
    )))
}

/// Copies `source` to `target`, a new file (`O_EXCL`, no symlink followed); a failed copy leaves no
/// part of it.
fn copy_new(source: &Path, target: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // The source is in the browser's profile, which a browser under its own user may rearrange: its
    // name must not lead boxd to a file elsewhere (a link to a file of root's), nor block on a FIFO.
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(source)?;
    if !from.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{source:?} is not a regular file"
        )));
    }
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(target)?;
    if let Err(err) = std::io::copy(&mut from, &mut to) {
        drop(to);
        let _ = std::fs::remove_file(target);
        return Err(err);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_is_moved_under_a_unique_name_and_a_stopped_one_deleted() {
        let staging = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let guid = "0a1b-2c";
        std::fs::write(workspace.path().join("report.csv"), b"older").unwrap();
        std::fs::write(staging.path().join(guid), b"new").unwrap();
        let name = name_download(staging.path(), workspace.path(), guid, "../report.csv").unwrap();
        assert_eq!(name, "report-1.csv");
        assert_eq!(
            std::fs::read(workspace.path().join("report.csv")).unwrap(),
            b"older"
        );
        assert_eq!(std::fs::read(workspace.path().join(&name)).unwrap(), b"new");
        assert!(!staging.path().join(guid).exists());
        // Across filesystems the file is copied, never over an existing one.
        std::fs::write(staging.path().join(guid), b"copied").unwrap();
        copy_new(
            &staging.path().join(guid),
            &workspace.path().join("copy.csv"),
        )
        .unwrap();
        assert!(
            copy_new(
                &staging.path().join(guid),
                &workspace.path().join("copy.csv")
            )
            .is_err()
        );
        assert_eq!(
            std::fs::read(workspace.path().join("copy.csv")).unwrap(),
            b"copied"
        );
        remove_staged(staging.path(), guid).unwrap();
        remove_staged(staging.path(), guid).unwrap();
        assert!(!staging.path().join(guid).exists());
        assert!(remove_staged(staging.path(), "../x").is_err());
    }

    #[test]
    fn a_staged_download_that_is_a_link_or_no_file_is_never_copied() {
        // A browser under its own user owns its profile: a "download" swapped for a link to a file
        // only boxd may read, or for a FIFO, must not land in the workspace.
        let staging = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let secret = staging.path().join("secret");
        std::fs::write(&secret, b"root's").unwrap();
        std::os::unix::fs::symlink(&secret, staging.path().join("0a")).unwrap();
        assert!(copy_new(&staging.path().join("0a"), &workspace.path().join("a")).is_err());
        let fifo =
            std::ffi::CString::new(staging.path().join("0b").to_string_lossy().as_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(copy_new(&staging.path().join("0b"), &workspace.path().join("b")).is_err());
        assert!(
            std::fs::read_dir(workspace.path())
                .unwrap()
                .next()
                .is_none()
        );
    }
}
