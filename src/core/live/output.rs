//! A process's output as a bounded log addressed by byte offsets: readers (streams, sockets, re-attaching
//! clients) each keep their own offset, and the oldest output is dropped once the log is over its cap.

use std::collections::VecDeque;

use bytes::Bytes;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamName {
    Stdout,
    Stderr,
    /// A terminal's single merged stream.
    Pty,
}

#[derive(Debug, Clone)]
pub struct Chunk {
    pub stream: StreamName,
    /// Offset of the chunk's first byte, counted over all streams since the process started.
    pub offset: u64,
    pub data: Bytes,
}

impl Chunk {
    pub fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// What a reader gets from `OutputLog::read_from`.
#[derive(Debug, Default)]
pub struct ReadOut {
    /// Bytes the reader missed because they left the log before it read them.
    pub dropped: u64,
    pub chunks: Vec<Chunk>,
    pub next_offset: u64,
}

#[derive(Debug)]
pub struct OutputLog {
    chunks: VecDeque<Chunk>,
    /// Offset of the first byte still held.
    start: u64,
    end: u64,
    held: usize,
    cap: usize,
}

impl OutputLog {
    pub fn new(cap: usize) -> Self {
        OutputLog {
            chunks: VecDeque::new(),
            start: 0,
            end: 0,
            held: 0,
            cap: cap.max(1),
        }
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    pub fn push(&mut self, stream: StreamName, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let len = data.len();
        self.chunks.push_back(Chunk {
            stream,
            offset: self.end,
            data,
        });
        self.end += len as u64;
        self.held += len;
        while self.held > self.cap {
            let Some(oldest) = self.chunks.pop_front() else {
                break;
            };
            self.held -= oldest.data.len();
            self.start = oldest.end();
        }
    }

    /// Chunks from `offset` on, at most about `max_bytes` of them (whole chunks, at least one).
    pub fn read_from(&self, offset: u64, max_bytes: usize) -> ReadOut {
        let mut out = ReadOut {
            next_offset: offset.max(self.start).min(self.end),
            ..ReadOut::default()
        };
        if offset < self.start {
            out.dropped = self.start - offset;
        }
        let from = out.next_offset;
        let first = self.chunks.partition_point(|chunk| chunk.end() <= from);
        let mut taken = 0;
        for chunk in self.chunks.range(first..) {
            if taken > 0 && taken + chunk.data.len() > max_bytes {
                break;
            }
            let skip = from.saturating_sub(chunk.offset) as usize;
            let piece = Chunk {
                stream: chunk.stream,
                offset: chunk.offset + skip as u64,
                data: chunk.data.slice(skip..),
            };
            taken += piece.data.len();
            out.next_offset = piece.end();
            out.chunks.push(piece);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(out: &ReadOut) -> String {
        out.chunks
            .iter()
            .map(|chunk| String::from_utf8_lossy(&chunk.data).into_owned())
            .collect()
    }

    #[test]
    fn readers_resume_from_any_offset_and_learn_what_was_dropped() {
        let mut log = OutputLog::new(8);
        log.push(StreamName::Stdout, Bytes::from_static(b"abcd"));
        log.push(StreamName::Stderr, Bytes::from_static(b"efgh"));
        let all = log.read_from(0, 1024);
        assert_eq!(
            (text(&all), all.next_offset, all.dropped),
            ("abcdefgh".into(), 8, 0)
        );
        assert_eq!(text(&log.read_from(6, 1024)), "gh");
        log.push(StreamName::Stdout, Bytes::from_static(b"ij"));
        let late = log.read_from(0, 1024);
        assert_eq!(
            (late.dropped, text(&late), late.next_offset),
            (4, "efghij".into(), 10)
        );
        assert!(log.read_from(10, 1024).chunks.is_empty());
    }

    #[test]
    fn reads_are_bounded_but_always_progress() {
        let mut log = OutputLog::new(1024);
        for _ in 0..4 {
            log.push(StreamName::Pty, Bytes::from_static(b"0123456789"));
        }
        let first = log.read_from(0, 15);
        assert_eq!((first.chunks.len(), first.next_offset), (1, 10));
        let tiny = log.read_from(10, 1);
        assert_eq!(tiny.next_offset, 20);
    }
}
