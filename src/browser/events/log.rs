//! Bounded logs and text cutting: a tab's console messages and network requests, each list bounded in
//! entries and bytes (oldest dropped first), and every text a page controls cut to [`MAX_ENTRY_BYTES`]
//! as it arrives, without ever copying more than the kept part.

use std::collections::VecDeque;

use serde_json::Value;

/// Console messages and network requests kept per tab, at most.
pub const MAX_LOG_ENTRIES: usize = 1000;
/// The bytes of one kept text a page controls (a console message, an exception, a request's URL, a
/// dialog's message), at most; the rest is cut, and the text says how much.
pub const MAX_ENTRY_BYTES: usize = 4096;
/// The bytes of a tab's console messages, and of its network requests, at most (each list on its
/// own): past it the oldest entries are dropped, as past [`MAX_LOG_ENTRIES`].
pub const MAX_LOG_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub method: String,
    pub url: String,
    pub status: Option<(i64, String)>,
    /// The answer's MIME type (cut), once answered.
    pub mime: Option<String>,
    /// The browser's clock (seconds) when it was sent, and when it finished or failed.
    pub sent_at: Option<f64>,
    pub done_at: Option<f64>,
}

impl Request {
    /// What it holds, for [`MAX_LOG_BYTES`] (its fields are cut as they arrive).
    pub(super) fn size(&self) -> usize {
        let reason = self.status.as_ref().map_or(0, |(_, reason)| reason.len());
        let mime = self.mime.as_ref().map_or(0, String::len);
        self.id
            .len()
            .saturating_add(self.method.len())
            .saturating_add(self.url.len())
            .saturating_add(reason)
            .saturating_add(mime)
    }
}

/// A per-tab list bounded in entries ([`MAX_LOG_ENTRIES`]) and bytes ([`MAX_LOG_BYTES`]), the oldest
/// dropped first.
#[derive(Debug)]
pub struct Log<T> {
    entries: VecDeque<(T, usize)>,
    bytes: usize,
    /// Entries ever kept (dropped and cleared ones too): where a reader that reads each entry once
    /// stands (see [`Log::since`]).
    pushed: u64,
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log {
            entries: VecDeque::new(),
            bytes: 0,
            pushed: 0,
        }
    }
}

impl<T> Log<T> {
    /// Keeps `item` of `size` bytes, dropping the oldest entries it has no room beside.
    pub(super) fn push(&mut self, item: T, size: usize) {
        while !self.entries.is_empty()
            && (self.entries.len() >= MAX_LOG_ENTRIES
                || self.bytes.saturating_add(size) > MAX_LOG_BYTES)
        {
            if let Some((_, dropped)) = self.entries.pop_front() {
                self.bytes = self.bytes.saturating_sub(dropped);
            }
        }
        self.bytes = self.bytes.saturating_add(size);
        self.entries.push_back((item, size));
        self.pushed = self.pushed.wrapping_add(1);
    }

    /// The entries kept after the first `seen` ever pushed (those dropped meanwhile are gone), and
    /// the count to pass next time.
    pub fn since(&self, seen: u64) -> (Vec<&T>, u64) {
        let new = usize::try_from(self.pushed.saturating_sub(seen)).unwrap_or(usize::MAX);
        let skip = self.entries.len().saturating_sub(new);
        (self.iter().skip(skip).collect(), self.pushed)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.entries.iter().map(|(item, _)| item)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The bytes its entries hold.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Log<Request> {
    /// Changes the newest request with id `id`, its size accounted anew.
    pub(super) fn update_last(&mut self, id: &str, change: impl FnOnce(&mut Request)) {
        let Some((request, size)) = self
            .entries
            .iter_mut()
            .rev()
            .find(|(request, _)| request.id == id)
        else {
            return;
        };
        change(request);
        let grown = request.size();
        self.bytes = self.bytes.saturating_sub(*size).saturating_add(grown);
        *size = grown;
    }
}

/// `text` cut to [`MAX_ENTRY_BYTES`] (at a character boundary), saying how much it was and how much is
/// kept: `xxxx… [cut: 8388608 bytes, kept 4096]`. Only the kept part is copied.
pub fn cut(text: &str) -> String {
    let mut kept = String::new();
    push_cut(&mut kept, text);
    end_cut(kept, text.len())
}

/// Appends to `kept` as much of `part` as leaves it at most one byte over [`MAX_ENTRY_BYTES`] (so that
/// [`end_cut`] can tell a text that had more), at a character boundary.
fn push_cut(kept: &mut String, part: &str) {
    let room = MAX_ENTRY_BYTES.saturating_add(1).saturating_sub(kept.len());
    let mut end = part.len().min(room);
    while !part.is_char_boundary(end) {
        end -= 1;
    }
    kept.push_str(&part[..end]);
}

/// `kept`, the start of a text of `total` bytes, as [`cut`] answers it.
fn end_cut(mut kept: String, total: usize) -> String {
    if total <= MAX_ENTRY_BYTES {
        return kept;
    }
    let mut length = MAX_ENTRY_BYTES.min(kept.len());
    while !kept.is_char_boundary(length) {
        length -= 1;
    }
    kept.truncate(length);
    kept.push_str(&format!("… [cut: {total} bytes, kept {length}]"));
    kept
}

/// A console message's text: its arguments' texts joined by spaces, cut as [`cut`] cuts, without
/// ever keeping more than the kept part.
pub(super) fn console_text(args: &[Value]) -> String {
    let mut kept = String::new();
    let mut total: usize = 0;
    for (index, arg) in args.iter().enumerate() {
        let part = text_of(arg);
        if index > 0 {
            total = total.saturating_add(1);
            push_cut(&mut kept, " ");
        }
        total = total.saturating_add(part.len());
        push_cut(&mut kept, &part);
    }
    end_cut(kept, total)
}

fn text_of(value: &Value) -> String {
    if let Some(text) = value.get("value") {
        return match text {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
    }
    value
        .get("description")
        .or_else(|| value.get("unserializableValue"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| value.get("type").and_then(Value::as_str).unwrap_or(""))
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::super::Events;
    use super::*;
    use serde_json::json;

    #[test]
    fn page_texts_are_cut_and_each_tabs_logs_are_bounded_in_bytes() {
        let events = Events::default();
        let big = "x".repeat(8 * 1024 * 1024);
        let string = |text: &str| json!({"type": "string", "value": text});
        events.handle(
            Some("T"),
            "Runtime.consoleAPICalled",
            &json!({"type": "log", "args": [string("a"), string(&big)]}),
        );
        events.handle(
            Some("T"),
            "Runtime.exceptionThrown",
            &json!({"exceptionDetails": {"exception": {"description": big}}}),
        );
        events.handle(
            Some("T"),
            "Network.requestWillBeSent",
            &json!({"requestId": "1", "request": {"method": "GET", "url": big}}),
        );
        events.handle(
            Some("T"),
            "Network.responseReceived",
            &json!({"requestId": "1", "response": {"status": 200, "statusText": big}}),
        );
        events.handle(
            Some("T"),
            "Page.javascriptDialogOpening",
            &json!({"type": "alert", "message": big}),
        );
        let total = big.len();
        events.with("T", |tab| {
            let console: Vec<&String> = tab.console.iter().collect();
            let log = format!(
                "[LOG] a {}… [cut: {} bytes, kept 4096]",
                &big[..4094],
                total + 2
            );
            assert_eq!(console[0], &log);
            let error = format!("[ERROR] {}… [cut: {total} bytes, kept 4096]", &big[..4096]);
            assert_eq!(console[1], &error);
            let request = tab.requests.iter().next().unwrap();
            assert!(
                request
                    .url
                    .ends_with(&format!("… [cut: {total} bytes, kept 4096]"))
            );
            assert!(request.url.len() < MAX_ENTRY_BYTES + 64);
            let reason = &request.status.as_ref().unwrap().1;
            assert!(reason.len() < MAX_ENTRY_BYTES + 64);
            assert_eq!(tab.requests.bytes(), request.size());
            let dialog = tab.dialog.as_ref().unwrap();
            assert!(dialog.message.len() < MAX_ENTRY_BYTES + 64);
        });
        // A character is never split.
        assert_eq!(
            cut(&"é".repeat(3000)),
            format!("{}… [cut: 6000 bytes, kept 4096]", "é".repeat(2048))
        );
        assert_eq!(cut("short"), "short");
        // 1000 lines of 4 KiB are 4 MiB: the tab keeps the newest within 1 MiB.
        let line = "y".repeat(MAX_ENTRY_BYTES);
        for n in 0..MAX_LOG_ENTRIES {
            events.handle(
                Some("U"),
                "Runtime.consoleAPICalled",
                &json!({"type": "log", "args": [{"type": "number", "value": n}, string(&line)]}),
            );
        }
        events.with("U", |tab| {
            assert!(tab.console.bytes() <= MAX_LOG_BYTES);
            let kept: usize = tab.console.iter().map(String::len).sum();
            assert_eq!(kept, tab.console.bytes());
            assert!(tab.console.len() > 200, "{}", tab.console.len());
            assert!(tab.console.iter().last().unwrap().starts_with("[LOG] 999 "));
        });
    }
}
