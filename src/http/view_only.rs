//! The view-only desktop stream: the RFB protocol a viewer speaks, read message by message on its way
//! to the VNC server, with every input message (keys, pointer, clipboard, and the extensions that act
//! on the machine) dropped and anything this reader cannot size closing the stream. So a view-only
//! client's key and pointer events never reach the display, whatever client it runs.
//!
//! What the client sends (RFC 6143): its protocol version (12 bytes; 3.7 or 3.8 only, so the bytes that
//! follow are known), the security type it picks (1 byte; only None, what the images' x11vnc offers:
//! a server that wants another refuses it and closes), `ClientInit` (1 byte; always sent as shared, so a
//! viewer never disconnects the others), then messages, each led by its type byte.

/// The protocol versions whose client handshake is version, one security byte, `ClientInit`.
const VERSIONS: [&[u8; 12]; 2] = [b"RFB 003.008\n", b"RFB 003.007\n"];
/// RFB's "None" security type.
const SECURITY_NONE: u8 = 1;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ViewOnlyError {
    #[error("the viewer speaks an RFB version the view-only stream does not relay ({0:?})")]
    Version(String),
    #[error("the viewer asked for security type {0}; the view-only stream relays only None (1)")]
    Security(u8),
    #[error("the viewer sent RFB message type {0}, which the view-only stream does not relay")]
    Unknown(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Version,
    Security,
    ClientInit,
    Messages,
}

/// The client-to-server half of a view-only stream.
#[derive(Debug)]
pub struct InputFilter {
    phase: Phase,
    /// Bytes of a message not yet whole.
    pending: Vec<u8>,
    /// Bytes still to drop of an input message being skipped (a clipboard text may be long).
    skipping: u64,
    /// Input messages dropped so far.
    pub dropped: u64,
}

impl Default for InputFilter {
    fn default() -> InputFilter {
        InputFilter {
            phase: Phase::Version,
            pending: Vec::new(),
            skipping: 0,
            dropped: 0,
        }
    }
}

/// What a whole message at the start of the pending bytes is: forwarded (kept whole until complete: at
/// most `SetEncodings` with 65535 encodings, 256 KiB) or dropped (skipped as it comes), and its length.
enum Sized {
    Forward(usize),
    Drop(u64),
}

impl InputFilter {
    /// Takes what the client sent next and answers what of it goes to the server.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<u8>, ViewOnlyError> {
        let mut forward = Vec::new();
        while !bytes.is_empty() {
            if self.skipping > 0 {
                let skipped = usize::try_from(self.skipping)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                bytes = &bytes[skipped..];
                self.skipping = self
                    .skipping
                    .saturating_sub(u64::try_from(skipped).unwrap_or(u64::MAX));
                continue;
            }
            self.pending.extend_from_slice(bytes);
            bytes = &[];
            let mut consumed = 0;
            loop {
                let rest = &self.pending[consumed..];
                match self.next(rest)? {
                    None => break,
                    Some(Sized::Forward(length)) => {
                        forward.extend_from_slice(&rest[..length]);
                        if self.phase == Phase::ClientInit {
                            // Shared, whatever the viewer asked: a viewer never pushes others out.
                            if let Some(flag) = forward.last_mut() {
                                *flag = 1;
                            }
                            self.phase = Phase::Messages;
                        } else {
                            self.advance();
                        }
                        consumed += length;
                    }
                    Some(Sized::Drop(length)) => {
                        self.dropped = self.dropped.saturating_add(1);
                        match usize::try_from(length) {
                            Ok(length) if length <= rest.len() => consumed += length,
                            _ => {
                                let available = u64::try_from(rest.len()).unwrap_or(u64::MAX);
                                consumed += rest.len();
                                self.skipping = length.saturating_sub(available);
                                break;
                            }
                        }
                    }
                }
            }
            self.pending.drain(..consumed);
        }
        Ok(forward)
    }

    fn advance(&mut self) {
        self.phase = match self.phase {
            Phase::Version => Phase::Security,
            Phase::Security => Phase::ClientInit,
            Phase::ClientInit | Phase::Messages => Phase::Messages,
        };
    }

    /// Sizes the message at the start of `rest` in the current phase.
    fn next(&self, rest: &[u8]) -> Result<Option<Sized>, ViewOnlyError> {
        let need = |length: usize| (rest.len() >= length).then_some(length);
        Ok(match self.phase {
            Phase::Version => match need(12) {
                None => None,
                Some(length) => {
                    if !VERSIONS.iter().any(|version| rest[..12] == version[..]) {
                        return Err(ViewOnlyError::Version(
                            String::from_utf8_lossy(&rest[..12]).into_owned(),
                        ));
                    }
                    Some(Sized::Forward(length))
                }
            },
            Phase::Security => match rest.first() {
                None => None,
                Some(&SECURITY_NONE) => Some(Sized::Forward(1)),
                Some(&other) => return Err(ViewOnlyError::Security(other)),
            },
            Phase::ClientInit => need(1).map(Sized::Forward),
            Phase::Messages => {
                let Some(&kind) = rest.first() else {
                    return Ok(None);
                };
                let u16_at = |at: usize| {
                    rest.get(at..at + 2)
                        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
                };
                let u32_at = |at: usize| {
                    rest.get(at..at + 4)
                        .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
                };
                match kind {
                    // SetPixelFormat, FramebufferUpdateRequest, EnableContinuousUpdates.
                    0 => need(20).map(Sized::Forward),
                    3 | 150 => need(10).map(Sized::Forward),
                    // SetEncodings: a count, then 4 bytes each.
                    2 => u16_at(2)
                        .and_then(|count| need(4 + 4 * count))
                        .map(Sized::Forward),
                    // ClientFence: flags, then a payload of its own length (at most 64).
                    248 => rest
                        .get(8)
                        .and_then(|&length| need(9 + usize::from(length)))
                        .map(Sized::Forward),
                    // KeyEvent and PointerEvent: input.
                    4 => Some(Sized::Drop(8)),
                    5 => Some(Sized::Drop(6)),
                    // ClientCutText: the viewer's clipboard into the desktop's.
                    6 => u32_at(4).map(|length| Sized::Drop(8 + length)),
                    // xvp (shutdown, reboot, reset of the machine).
                    250 => Some(Sized::Drop(4)),
                    // SetDesktopSize: a resize of the display.
                    251 => rest
                        .get(6)
                        .map(|&screens| Sized::Drop(8 + 16 * u64::from(screens))),
                    other => return Err(ViewOnlyError::Unknown(other)),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> Vec<u8> {
        let mut bytes = b"RFB 003.008\n".to_vec();
        bytes.extend([SECURITY_NONE, 0]);
        bytes
    }

    fn key(down: bool) -> Vec<u8> {
        vec![4, u8::from(down), 0, 0, 0, 0, 0xff, 0x0d]
    }

    fn pointer() -> Vec<u8> {
        vec![5, 1, 0, 10, 0, 20]
    }

    fn update_request() -> Vec<u8> {
        vec![3, 1, 0, 0, 0, 0, 4, 0, 3, 0]
    }

    fn encodings() -> Vec<u8> {
        vec![2, 0, 0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x21]
    }

    #[test]
    fn input_is_dropped_and_the_rest_passes_byte_for_byte_in_any_chunking() {
        let mut cut_text = vec![6, 0, 0, 0, 0, 0, 0, 5];
        cut_text.extend(b"hello");
        let stream: Vec<u8> = [
            handshake(),
            encodings(),
            key(true),
            update_request(),
            pointer(),
            cut_text,
            vec![250, 0, 1, 2],
            vec![251, 0, 0, 0, 0, 0, 1, 0],
            vec![0; 16],
            key(false),
            update_request(),
        ]
        .concat();
        let mut expected = handshake();
        *expected.last_mut().expect("ClientInit") = 1;
        expected.extend([encodings(), update_request(), update_request()].concat());
        for chunk in [1, 2, 3, 7, 13, stream.len()] {
            let mut filter = InputFilter::default();
            let forwarded: Vec<u8> = stream
                .chunks(chunk)
                .map(|part| filter.feed(part).expect("relayed"))
                .collect::<Vec<_>>()
                .concat();
            assert_eq!(forwarded, expected, "chunks of {chunk}");
            assert_eq!(filter.dropped, 6);
        }
    }

    #[test]
    fn what_cannot_be_sized_or_checked_ends_the_stream() {
        let mut filter = InputFilter::default();
        assert!(matches!(
            filter.feed(b"RFB 003.003\n"),
            Err(ViewOnlyError::Version(_))
        ));
        let mut filter = InputFilter::default();
        let mut vnc_auth = b"RFB 003.008\n".to_vec();
        vnc_auth.push(2);
        assert_eq!(filter.feed(&vnc_auth), Err(ViewOnlyError::Security(2)));
        let mut filter = InputFilter::default();
        let mut unknown = handshake();
        unknown.push(255);
        assert_eq!(filter.feed(&unknown), Err(ViewOnlyError::Unknown(255)));
    }

    #[test]
    fn a_long_clipboard_text_is_skipped_without_being_kept() {
        let mut filter = InputFilter::default();
        filter.feed(&handshake()).expect("handshake");
        let length: u32 = 10_000_000;
        let mut header = vec![6, 0, 0, 0];
        header.extend(length.to_be_bytes());
        assert!(filter.feed(&header).expect("header").is_empty());
        let block = vec![b'x'; 1 << 20];
        for _ in 0..9 {
            assert!(filter.feed(&block).expect("skipped").is_empty());
        }
        let tail = usize::try_from(length).expect("fits") - 9 * block.len();
        let mut last = vec![b'x'; tail];
        last.extend(update_request());
        assert_eq!(filter.feed(&last).expect("after"), update_request());
        assert!(filter.pending.capacity() < 2 << 20, "the text was not kept");
    }
}
