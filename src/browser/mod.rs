//! The `browser` family: the 23 browser tools of @playwright/mcp 0.0.25 (group `playwright`, same names,
//! arguments and descriptions) driving Debian's Chromium over the DevTools protocol, natively: no Node,
//! no Playwright. Chromium starts on the first call. Actions answer with the page's URL, title and
//! accessibility snapshot, as upstream does; bad arguments and impossible actions are `isError`
//! answers that say what to do (the Python client would drop an HTTP error's reason). Anthropic's
//! browser toolset is served on the same browser as one more tool (group `anthropic-browser`, see
//! [`toolset`]).

mod cdp;
mod events;
mod family;
mod keys;
mod launch;
mod pacing;
mod session;
mod snapshot;
mod tools;
mod toolset;
mod warm;

pub use family::{BrowserArgs, family, limits};

pub const GROUP: &str = "playwright";
