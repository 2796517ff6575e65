//! A long-lived child's stderr: every line goes to boxd's log, and the last few are kept to explain a
//! failure (a kernel that exits at start, an MCP server that refuses its handshake). Both are bounded:
//! a line is cut at [`STDERR_LINE_MAX`] bytes and the tail keeps [`STDERR_TAIL_LINES`] lines, so a child
//! that writes without newlines, or without end, costs boxd a few kilobytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tokio::task::JoinHandle;

pub const STDERR_TAIL_LINES: usize = 20;
pub const STDERR_LINE_MAX: usize = 4096;

/// The last lines a child wrote to stderr, filled by a task until the stream closes.
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    /// None once the stream ended (a finished handle must not be polled again).
    reader: Option<JoinHandle<()>>,
}

impl StderrTail {
    /// Reads `stderr` to its end, logging each line under `child` (with `target` set to
    /// `boxd::child`) and keeping the tail.
    pub fn forward(stderr: impl AsyncRead + Send + Unpin + 'static, child: String) -> StderrTail {
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&lines);
        let reader = tokio::spawn(bounded_lines(
            BufReader::new(stderr),
            STDERR_LINE_MAX,
            move |line| {
                tracing::info!(target: "boxd::child", %child, "{line}");
                let mut tail = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            },
        ));
        StderrTail {
            lines,
            reader: Some(reader),
        }
    }

    /// Waits up to `patience` for the stream to end (a child that just died has its last words in the
    /// pipe), then gives the tail as `"; stderr: a | b"`, or "" when it wrote nothing.
    pub async fn last_words(&mut self, patience: Duration) -> String {
        if let Some(reader) = self.reader.as_mut()
            && tokio::time::timeout(patience, reader).await.is_ok()
        {
            self.reader = None;
        }
        self.text()
    }

    /// The tail as it is now, as `"; stderr: a | b"`, or "" when the child wrote nothing.
    pub fn text(&self) -> String {
        let lines = self
            .lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if lines.is_empty() {
            String::new()
        } else {
            format!(
                "; stderr: {}",
                lines.iter().cloned().collect::<Vec<_>>().join(" | ")
            )
        }
    }
}

/// Reads `reader` line by line into `emit`, each line cut to `max` bytes (marked as cut): an endless line
/// costs `max` bytes of memory, not its length.
async fn bounded_lines<R: AsyncBufRead + Unpin>(
    mut reader: R,
    max: usize,
    mut emit: impl FnMut(String),
) {
    let mut line = Vec::new();
    let mut cut = false;
    let finish = |line: &mut Vec<u8>, cut: bool| {
        let mut text = String::from_utf8_lossy(line)
            .trim_end_matches('\r')
            .to_owned();
        if cut {
            text.push_str(" [line cut]");
        }
        line.clear();
        text
    };
    loop {
        let available = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(available) => available,
        };
        let newline = available.iter().position(|byte| *byte == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        cut |= chunk.len() > room;
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            emit(finish(&mut line, cut));
            cut = false;
        }
    }
    if !line.is_empty() || cut {
        emit(finish(&mut line, cut));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_endless_stderr_line_is_cut_not_buffered() {
        let mut input = vec![b'x'; 1 << 20];
        input.extend_from_slice(b"\nshort\r\nlast");
        let mut lines = Vec::new();
        bounded_lines(BufReader::with_capacity(64, &input[..]), 16, |line| {
            lines.push(line)
        })
        .await;
        assert_eq!(
            lines,
            [
                format!("{} [line cut]", "x".repeat(16)),
                "short".to_owned(),
                "last".to_owned()
            ]
        );
    }

    #[tokio::test]
    async fn the_tail_keeps_the_last_lines() {
        let text: String = (0..50).map(|n| format!("line {n}\n")).collect();
        let mut tail = StderrTail::forward(std::io::Cursor::new(text.into_bytes()), "test".into());
        let words = tail.last_words(Duration::from_secs(5)).await;
        assert!(words.starts_with("; stderr: line 30 | line 31"), "{words}");
        assert!(words.ends_with("line 49"), "{words}");
    }
}
