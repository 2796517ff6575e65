//! A per-stream output cap that keeps the head and the tail, because the end of a long log (the error) is
//! usually what matters, and says exactly how much was left out in between.

use std::collections::VecDeque;

pub struct CappedOutput {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    omitted: u64,
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        let tail_cap = cap / 2;
        CappedOutput {
            head_cap: cap - tail_cap,
            tail_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            omitted: 0,
        }
    }

    pub fn push(&mut self, mut chunk: &[u8]) {
        if self.head.len() < self.head_cap {
            let take = chunk.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= self.tail_cap {
            let skipped = chunk.len() - self.tail_cap;
            self.omitted += (self.tail.len() + skipped) as u64;
            self.tail.clear();
            self.tail.extend(&chunk[skipped..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(self.tail_cap);
        if overflow > 0 {
            self.tail.drain(..overflow);
            self.omitted += overflow as u64;
        }
        self.tail.extend(chunk);
    }

    #[cfg(test)]
    pub fn omitted(&self) -> u64 {
        self.omitted
    }

    /// Decodes lossily: a command printing invalid UTF-8 still gets its answer.
    pub fn into_text(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.omitted > 0 {
            text.push_str(&format!(
                "\n[boxd: output truncated, {} bytes omitted]\n",
                self.omitted
            ));
        }
        let (first, second) = self.tail.as_slices();
        if second.is_empty() {
            text.push_str(&String::from_utf8_lossy(first));
        } else {
            let tail: Vec<u8> = self.tail.into_iter().collect();
            text.push_str(&String::from_utf8_lossy(&tail));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut out = CappedOutput::new(16);
        out.push(b"hello ");
        out.push(b"world");
        assert_eq!(out.omitted(), 0);
        assert_eq!(out.into_text(), "hello world");
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_counts_the_rest() {
        let mut out = CappedOutput::new(10);
        for _ in 0..10 {
            out.push(b"0123456789");
        }
        assert_eq!(out.omitted(), 90);
        assert_eq!(
            out.into_text(),
            "01234\n[boxd: output truncated, 90 bytes omitted]\n56789"
        );
    }

    #[test]
    fn one_huge_chunk_is_capped() {
        let mut out = CappedOutput::new(4);
        out.push(&[b'a'; 1000]);
        assert_eq!(out.omitted(), 996);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_rejected() {
        let mut out = CappedOutput::new(64);
        out.push(&[b'o', b'k', 0xff, 0xfe]);
        assert_eq!(out.into_text(), "ok\u{fffd}\u{fffd}");
    }
}
