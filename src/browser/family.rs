//! The `browser` family. Not in the default family list: only images with Chromium name it. Ready at
//! once: the browser is started by the first call that needs it (and again after it died), and closed
//! with boxd.

use std::sync::Arc;

use super::events::DownloadLimits;
use super::launch::{Finder, Isolation, Options};
use super::tools::Browser;
use crate::core::child::Identity;
use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::family::limits::{Limit, as_u64, bytes, count, seconds};
use crate::family::{BoxFuture, Family, Setup};
use crate::tools::Tool;

/// The viewport upstream's browser image configures.
pub const VIEWPORT: (u32, u32) = (1024, 768);

struct BrowserFamily {
    browser: Arc<Browser>,
    /// The program Chromium is started as (the headless shell, or `--browser-executable`).
    program: String,
    /// The user Chromium runs as (`--browser-user`, when boxd is root); `None`: boxd's own.
    user: Option<Identity>,
    /// How `program` is started when it is a script (see [`super::launch::interpreted_as`]), read
    /// when first asked for (by `GET /memory`), not at start.
    wrapper: std::sync::OnceLock<Option<(String, Vec<String>)>>,
}

impl Family for BrowserFamily {
    fn name(&self) -> &'static str {
        "browser"
    }

    fn tools(&self) -> Vec<Tool> {
        super::tools::tools(&self.browser)
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::GROUP, super::toolset::GROUP]
    }

    /// Chromium's renderers run web pages: when they run as their own user, that user may not reach
    /// boxd's listeners (a page's `fetch` to `127.0.0.1` included).
    fn confined_uids(&self) -> Vec<std::ops::RangeInclusive<u32>> {
        self.user.iter().map(|user| user.uid..=user.uid).collect()
    }

    /// Chromium (every process of it is below the one boxd started) and the nested X server headed
    /// Chromium draws on (`launch`'s Xephyr).
    fn held_processes(&self) -> Vec<Held> {
        let mut held = [self.program.as_str(), "Xephyr"]
            .map(|program| Held::Children {
                program: program.to_owned(),
                args: Vec::new(),
            })
            .to_vec();
        // A wrapper script (Debian's) is started as its interpreter, which runs Chromium below it.
        let wrapper = self
            .wrapper
            .get_or_init(|| super::launch::interpreted_as(&self.program));
        if let Some((interpreter, args)) = wrapper {
            held.push(Held::Children {
                program: interpreter.clone(),
                args: args.clone(),
            });
        }
        held
    }

    /// Decides who Chromium runs as and whether with its sandbox (a probe of user namespaces), and says
    /// it as the family's `/readyz` detail; ready either way (`--no-sandbox` is a fallback, not a fault).
    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let user = self.user.clone();
            let isolation = tokio::task::spawn_blocking(move || Isolation::decide(user))
                .await
                .unwrap_or_else(|err| Isolation {
                    user: self.user.clone(),
                    no_sandbox: Some(format!("the sandbox probe failed: {err}")),
                });
            let detail = isolation.describe();
            if isolation.no_sandbox.is_some() {
                tracing::warn!("{detail}");
            } else {
                tracing::info!("{detail}");
            }
            self.browser.set_isolation(isolation, health.clone()).await;
            health.ready_with(detail);
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.browser.close().await })
    }
}

// The `browser` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct BrowserArgs {
    /// The Chromium the `browser` family starts (a name on PATH or a path).
    #[arg(long, env = "BOXD_BROWSER_EXECUTABLE", default_value = "chromium")]
    pub browser_executable: String,
    /// The unprivileged user the `browser` family's Chromium runs as, with Chromium's own sandbox,
    /// when boxd runs as root (a name in /etc/passwd, or UID[:GID]); boxd unprivileged runs it as
    /// itself. Unset with boxd as root: Chromium runs as root with --no-sandbox, said in /readyz.
    #[arg(long, env = "BOXD_BROWSER_USER")]
    pub browser_user: Option<String>,
    /// Run the `browser` family's Chromium headless even when a display is set (it is headless
    /// anyway without `DISPLAY`).
    #[arg(long, env = "BOXD_BROWSER_HEADLESS")]
    pub browser_headless: bool,
    /// The bytes one download of the `browser` family may have; a larger one is stopped, its
    /// partial file deleted, and the next answer says so.
    #[arg(long, env = "BOXD_BROWSER_MAX_DOWNLOAD_BYTES", default_value_t = DownloadLimits::default().max_bytes)]
    pub browser_max_download_bytes: u64,
    /// The downloads one run of the `browser` family's Chromium may make (`browser_close` starts the
    /// count again); later ones are refused, and the answer says so.
    #[arg(long, env = "BOXD_BROWSER_MAX_DOWNLOADS", default_value_t = DownloadLimits::default().max_count)]
    pub browser_max_downloads: usize,
    /// How an interactive snapshot (`interactive: true`) finds the elements it lists: `page`, a walk
    /// of the page's elements in an isolated world (it hands over to `dom` where the page holds
    /// what scripts cannot see, such as a closed shadow root); `dom`, Chromium's DOM snapshot
    /// always (slower on large pages). Both list the same elements.
    #[arg(long, env = "BOXD_BROWSER_INTERACTIVE_FINDER", value_enum, default_value_t = Finder::Page)]
    pub browser_interactive_finder: Finder,
}

pub fn family(setup: &Setup, args: &BrowserArgs) -> Result<Arc<dyn Family>, String> {
    let display = std::env::var("DISPLAY").unwrap_or_default();
    let options = Options {
        executable: args.browser_executable.clone(),
        headless: args.browser_headless || display.trim().is_empty(),
        viewport: VIEWPORT,
        download_limits: download_limits(args),
        isolation: Isolation::undecided(),
        finder: args.browser_interactive_finder,
    };
    let user = Identity::for_child("browser", "--browser-user", args.browser_user.as_deref())
        .map_err(|err| format!("--browser-user: {err}"))?;
    // The browser starts with the first call that needs it; its files are read now, while nothing
    // waits for them.
    let program = super::launch::program(&options);
    super::warm::start(program.clone());
    // Uploads come from the workspace or a directory the filesystem tools may use (`--allow-dir`).
    let uploads = setup.allowed_dirs()?;
    Ok(Arc::new(BrowserFamily {
        browser: Arc::new(Browser::new(options, setup.workspace.clone(), uploads)),
        program,
        user,
        wrapper: std::sync::OnceLock::new(),
    }))
}

fn download_limits(args: &BrowserArgs) -> DownloadLimits {
    DownloadLimits {
        max_bytes: args.browser_max_download_bytes,
        max_count: args.browser_max_downloads,
    }
}

/// The bounds the `browser` family keeps, for `boxd limits`.
pub fn limits(args: &BrowserArgs) -> Vec<Limit> {
    let downloads = download_limits(args);
    vec![
        Limit::new(
            "browser",
            "one page snapshot",
            format!("{} characters", super::snapshot::MAX_SNAPSHOT_CHARS),
            "cut, with a notice of what was left out and how to narrow it",
        ),
        Limit::new(
            "browser",
            "iframes walked by one snapshot (same- and cross-origin)",
            count(super::session::MAX_FRAMES),
            "later frames' `iframe` lines stay empty, and the answer says so",
        ),
        Limit::new(
            "browser",
            "out-of-process frames attached at once (all tabs)",
            count(super::events::MAX_CHILD_FRAMES),
            "later ones are not walked",
        ),
        Limit::new(
            "browser",
            "the wait of one navigation for `load` and settling together",
            seconds(super::session::SETTLE_CAP),
            "the answer comes with the page as it is",
        ),
        Limit::new(
            "browser",
            "settling after an action (navigation committed, page quiet)",
            seconds(super::session::SETTLE_CAP),
            "the answer comes with the page as it is",
        ),
        Limit::new(
            "browser",
            "one call to Chromium; a navigation, screenshot or PDF",
            format!(
                "{}; {}",
                seconds(super::session::CALL),
                seconds(super::session::SLOW_CALL)
            ),
            "an error result naming the call",
        ),
        Limit::new(
            "browser",
            "console messages and network requests kept per tab",
            format!(
                "{} and {} per list",
                count(super::events::MAX_LOG_ENTRIES),
                bytes(as_u64(super::events::MAX_LOG_BYTES))
            ),
            "the oldest are dropped",
        ),
        Limit::new(
            "browser",
            "one console message, exception, request URL or dialog message kept",
            bytes(as_u64(super::events::MAX_ENTRY_BYTES)),
            "the rest is cut, with `… [cut: N bytes, kept M]`",
        ),
        Limit::new(
            "browser",
            "a page's accessibility tree taken by a snapshot; its DOM snapshot; its frames' together",
            format!(
                "{}; {}; {}",
                bytes(as_u64(super::session::MAX_TREE_BYTES)),
                bytes(as_u64(super::session::MAX_DOM_BYTES)),
                bytes(as_u64(super::session::MAX_FRAME_BYTES))
            ),
            "the answer says the page is too large to snapshot (browser and tabs unharmed); no \
             refs for elements that only look clickable; later frames empty, said",
        ),
        Limit::new(
            "browser",
            "one answer from Chromium",
            bytes(as_u64(super::cdp::MAX_MESSAGE)),
            "read past without being kept: the call fails saying so, the browser and tabs live on",
        ),
        Limit::new(
            "browser",
            "one download",
            format!(
                "{} (`--browser-max-download-bytes`)",
                bytes(downloads.max_bytes)
            ),
            "stopped, its partial file deleted, and the next answer says so",
        ),
        Limit::new(
            "browser",
            "downloads of one browser run (`browser_close` starts the count again)",
            format!("{} (`--browser-max-downloads`)", count(downloads.max_count)),
            "later ones are cancelled at once, and the answer says so",
        ),
        Limit::new(
            "browser",
            "sessions (browser contexts) open at once besides the default one",
            count(super::session::MAX_SESSIONS),
            "browser_session_new is refused (isError) until one is closed",
        ),
        Limit::new(
            "browser",
            "one `browser_toolset` read_page, find, get_page_text, read_console, read_network or \
             javascript_exec answer",
            format!("{} characters", super::toolset::MAX_READ_CHARS),
            "cut, with a line saying so (read_page: narrow with `ref` or a smaller `depth`)",
        ),
        Limit::new(
            "browser",
            "matches one `browser_toolset` find answers",
            count(super::toolset::MAX_MATCHES),
            "the best ones",
        ),
        Limit::new(
            "browser",
            "one `browser_toolset` wait or hold_key",
            format!("{} s", super::toolset::MAX_WAIT_SECONDS),
            "refused, an isError answer",
        ),
        Limit::new(
            "browser",
            "dismissed dialogs one `browser_toolset` browser_state lists",
            count(super::toolset::MAX_DIALOGS),
            "one more entry counts the rest",
        ),
        Limit::new(
            "browser",
            "the files of one `browser_file_upload` when Chromium runs as its own user (it is given \
             copies)",
            bytes(super::launch::MAX_STAGED_UPLOAD_BYTES),
            "refused, nothing chosen, and the answer says so",
        ),
    ]
}
