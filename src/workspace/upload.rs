//! Atomic file writes: the body streams into a temporary file beside the target, which is renamed over the
//! target only once the whole body arrived. A failed or aborted upload leaves the old content intact.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::error::{ApiError, ApiResult};

const WRITE_BUFFER: usize = 1024 * 1024;
/// Chunks in flight between the request body and the writer thread: bounds memory per upload.
const WRITE_QUEUE_CHUNKS: usize = 64;

/// A temporary file that is removed unless it was moved into place.
pub struct StagedFile {
    path: Option<PathBuf>,
}

impl StagedFile {
    /// Blocking. Renames over `target`, copying across filesystems when a mount sits in between.
    pub fn persist(mut self, target: &Path) -> std::io::Result<()> {
        let Some(staged) = self.path.take() else {
            return Ok(());
        };
        if let Ok(existing) = std::fs::metadata(target)
            && existing.is_file()
        {
            let _ = std::fs::set_permissions(&staged, existing.permissions());
        }
        match std::fs::rename(&staged, target) {
            Err(err) if err.kind() == std::io::ErrorKind::CrossesDevices => {
                let copied = std::fs::copy(&staged, target).map(|_| ());
                let _ = std::fs::remove_file(&staged);
                copied
            }
            Err(err) => {
                let _ = std::fs::remove_file(&staged);
                Err(err)
            }
            Ok(()) => Ok(()),
        }
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn staging_name(dir: &Path) -> PathBuf {
    let mut random = [0u8; 8];
    let _ = getrandom::fill(&mut random);
    dir.join(format!(".boxd-upload-{}.tmp", hex::encode(random)))
}

/// Blocking. Writes `content` into a new temporary file in `dir` (which must exist).
pub fn stage_bytes(dir: &Path, content: &[u8]) -> std::io::Result<StagedFile> {
    let path = staging_name(dir);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)?;
    let staged = StagedFile { path: Some(path) };
    file.write_all(content)?;
    Ok(staged)
}

/// Streams `body` into a new temporary file in `dir` (which must exist). A blocking writer thread takes the
/// body's chunks as they arrive (no copies), so network reads and disk writes overlap.
pub async fn stage<S, E>(dir: &Path, body: S, what: &str) -> ApiResult<StagedFile>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: std::fmt::Display,
{
    let path = staging_name(dir);
    let file = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(path)
        })
        .await?
        .map_err(|err| ApiError::from_io(&err, what))?
    };
    let staged = StagedFile { path: Some(path) };
    let (chunks, mut received) = tokio::sync::mpsc::channel::<Bytes>(WRITE_QUEUE_CHUNKS);
    let writer = tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::with_capacity(WRITE_BUFFER, file);
        while let Some(chunk) = received.blocking_recv() {
            out.write_all(&chunk)?;
        }
        out.flush()
    });
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|err| ApiError::BadRequest(format!("upload of {what} interrupted: {err}")))?;
        if chunks.send(chunk).await.is_err() {
            break; // the writer stopped on an error, reported below
        }
    }
    drop(chunks);
    writer.await?.map_err(|err| ApiError::from_io(&err, what))?;
    Ok(staged)
}
