//! The `browser` family. Not in the default family list: only images with Chromium name it. Ready at
//! once: the browser is started by the first call that needs it (and again after it died), and closed
//! with boxd.

use std::sync::Arc;

use super::launch::Options;
use super::tools::Browser;
use crate::core::confine::AllowedDirs;
use crate::family::{BoxFuture, Family, Setup};
use crate::tools::Tool;

/// The workspace directory downloads are saved in.
pub const DOWNLOADS: &str = "downloads";

/// The viewport upstream's browser image configures.
pub const VIEWPORT: (u32, u32) = (1024, 768);

struct BrowserFamily {
    browser: Arc<Browser>,
}

impl Family for BrowserFamily {
    fn name(&self) -> &'static str {
        "browser"
    }

    fn tools(&self) -> Vec<Tool> {
        super::tools::tools(&self.browser)
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::GROUP]
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.browser.close().await })
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let args = setup.args;
    let display = std::env::var("DISPLAY").unwrap_or_default();
    let downloads = match setup.workspace.resolve(DOWNLOADS) {
        Ok(resolved) => Some(resolved.real),
        Err(err) => {
            tracing::warn!("browser downloads are refused: {DOWNLOADS:?} of the workspace: {err}");
            None
        }
    };
    let options = Options {
        executable: args.browser_executable.clone(),
        headless: args.browser_headless || display.trim().is_empty(),
        viewport: VIEWPORT,
        downloads,
    };
    // The browser starts with the first call that needs it; its files are read now, while nothing
    // waits for them.
    super::warm::start(super::launch::program(&options));
    // Uploads come from the workspace or a directory the filesystem tools may use (`--allow-dir`).
    let mut dirs = vec![setup.workspace.root().to_path_buf()];
    dirs.extend(args.allow_dirs.iter().cloned());
    let uploads = AllowedDirs::new(&dirs).map_err(|err| format!("--allow-dir: {err}"))?;
    Ok(Arc::new(BrowserFamily {
        browser: Arc::new(Browser::new(options, setup.workspace.clone(), uploads)),
    }))
}
