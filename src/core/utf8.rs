//! Output read in pieces, decoded as text only on whole characters.

use bytes::Bytes;

/// Holds back the incomplete UTF-8 sequence at the end of a read, so every chunk a reader sees decodes
/// cleanly and text split across reads is not garbled. Bytes that are not UTF-8 pass through as they are.
#[derive(Debug, Default)]
pub struct Utf8Boundary {
    pending: Vec<u8>,
}

impl Utf8Boundary {
    pub fn split(&mut self, read: &[u8]) -> Bytes {
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(read);
        let keep = incomplete_tail(&joined);
        self.pending = joined.split_off(joined.len() - keep);
        Bytes::from(joined)
    }

    /// Whatever is still held back, at end of stream.
    pub fn finish(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.pending))
    }
}

/// Length of a truncated-but-valid-so-far multi-byte sequence at the end of `bytes` (0 to 3).
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back for the lead
        }
        let needed = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multibyte_characters_are_never_split() {
        let mut boundary = Utf8Boundary::default();
        let euro = "€".as_bytes(); // 3 bytes
        assert_eq!(&boundary.split(&[b'a', euro[0]])[..], b"a");
        assert_eq!(&boundary.split(&euro[1..2])[..], b"");
        assert_eq!(&boundary.split(&[euro[2], b'b'])[..], "€b".as_bytes());
        assert_eq!(&boundary.split(&[0xff, 0xfe])[..], &[0xff, 0xfe]);
        assert_eq!(&boundary.split(&[0xF0])[..], b"");
        assert_eq!(&boundary.finish()[..], &[0xF0]);
    }
}
