//! The `browser` family: the 23 browser tools of @playwright/mcp 0.0.25 (group `playwright`, same names,
//! arguments and descriptions) driving Debian's Chromium over the DevTools protocol, natively: no Node,
//! no Playwright. Chromium starts on the first call. Actions answer with the page's URL, title and
//! accessibility snapshot, as upstream does; bad arguments and impossible actions are `isError`
//! answers that say what to do (the Python client would drop an HTTP error's reason).

mod cdp;
mod events;
mod family;
mod frames;
mod keys;
mod launch;
mod session;
mod snapshot;
mod tools;
mod warm;

pub use events::{MAX_CHILD_FRAMES, MAX_LOG_ENTRIES};
pub use family::family;
pub use session::{
    CALL as CDP_CALL_TIMEOUT, MAX_FRAMES, SETTLE_CAP, SLOW_CALL as CDP_SLOW_CALL_TIMEOUT,
};
pub use snapshot::MAX_SNAPSHOT_CHARS;

pub const GROUP: &str = "playwright";
