//! The browser's downloads: their bounds (in bytes and count), the policy that stops one past them and
//! has the reader cancel it, and the state of each as the browser reports it.

use std::collections::VecDeque;

use serde_json::Value;

use super::Events;
use super::log::cut;

/// Downloads remembered (and listed in answers) at most, oldest dropped first.
pub const MAX_DOWNLOADS: usize = 50;

/// The bounds of the downloads of one browser (`--browser-max-download-bytes`,
/// `--browser-max-downloads`): past them a download is cancelled, its partial file deleted, and the
/// next answer says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadLimits {
    /// The bytes of one download.
    pub max_bytes: u64,
    /// The downloads one browser takes (from its start; `browser_close` starts counting again).
    pub max_count: usize,
}

impl Default for DownloadLimits {
    fn default() -> Self {
        DownloadLimits {
            max_bytes: 100 * 1024 * 1024,
            max_count: 100,
        }
    }
}

/// What the downloads of one browser may still do, and what the reader must tell the browser.
#[derive(Debug, Default)]
pub(super) struct DownloadPolicy {
    limits: DownloadLimits,
    /// Downloads let through so far.
    taken: usize,
    /// Downloads to cancel (their guids), sent by the reader as it gets to them.
    cancels: Vec<String>,
}

/// A download the browser started (`Browser.downloadWillBegin`), saved under its guid in the downloads
/// directory until boxd gives it its name.
#[derive(Debug, Clone)]
pub struct Download {
    pub guid: String,
    /// Where it is served from, as the browser reported it (cut like every page text).
    pub url: String,
    pub suggested: String,
    /// Bytes received so far, as the browser last reported.
    pub received: u64,
    pub state: DownloadState,
    /// Its final name in the downloads directory, once boxd gave it one.
    pub saved: Option<String>,
    /// The browser context of the session whose tab started it (`None`: the default session, or
    /// a frame that is no tab's main frame).
    pub context: Option<String>,
    /// Said in an answer while still running: later answers do not wait for it again.
    pub announced: bool,
    /// Its outcome was said in an answer: later answers leave it out.
    pub reported: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownloadState {
    InProgress,
    Completed,
    Canceled,
    /// Stopped by boxd past [`DownloadLimits::max_bytes`], after `received` bytes.
    TooLarge {
        received: u64,
    },
    /// Refused by boxd past [`DownloadLimits::max_count`].
    OverCount,
}

impl DownloadState {
    /// Stopped by boxd: its partial file is to be deleted, and what the browser says of it later
    /// (cancelled, or even completed) changes nothing.
    pub fn stopped(&self) -> bool {
        matches!(
            self,
            DownloadState::TooLarge { .. } | DownloadState::OverCount
        )
    }
}

impl Events {
    /// Reads (or changes) the browser's downloads.
    pub fn downloads<T>(&self, read: impl FnOnce(&mut VecDeque<Download>) -> T) -> T {
        let mut downloads = self
            .downloads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        read(&mut downloads)
    }

    /// Sets the bounds of this browser's downloads.
    pub fn set_download_limits(&self, limits: DownloadLimits) {
        self.policy().limits = limits;
    }

    /// The downloads boxd stopped since the last call (their guids): the browser is to cancel them.
    pub fn take_cancels(&self) -> Vec<String> {
        std::mem::take(&mut self.policy().cancels)
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, DownloadPolicy> {
        self.download_policy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Forgets the downloads of the session of browser context `context` (closed with it).
    pub fn forget_downloads_of(&self, context: &str) {
        self.downloads(|downloads| {
            downloads.retain(|download| download.context.as_deref() != Some(context))
        });
    }

    pub(super) fn browser_event(&self, method: &str, params: &Value) -> bool {
        let field = |name: &str| cut(params[name].as_str().unwrap_or_default());
        // Looked up before the downloads are locked: the tabs' lock is never taken inside theirs.
        let context = match method {
            "Browser.downloadWillBegin" => {
                self.context_of_frame(params["frameId"].as_str().unwrap_or_default())
            }
            _ => None,
        };
        let mut policy = self.policy();
        self.downloads(|downloads| match method {
            "Browser.downloadWillBegin" => {
                if downloads.len() >= MAX_DOWNLOADS {
                    downloads.pop_front();
                }
                let guid = field("guid");
                let state = if policy.taken >= policy.limits.max_count {
                    policy.cancels.push(guid.clone());
                    DownloadState::OverCount
                } else {
                    policy.taken = policy.taken.saturating_add(1);
                    DownloadState::InProgress
                };
                downloads.push_back(Download {
                    guid,
                    url: field("url"),
                    suggested: field("suggestedFilename"),
                    received: 0,
                    state,
                    saved: None,
                    context: context.clone(),
                    announced: false,
                    reported: false,
                });
                true
            }
            "Browser.downloadProgress" => {
                let guid = params["guid"].as_str().unwrap_or_default();
                let Some(download) = downloads.iter_mut().find(|download| download.guid == guid)
                else {
                    return false;
                };
                if download.state.stopped() {
                    return false;
                }
                // The larger of what came and what the server announced: a download announced
                // over the bound is stopped at once.
                let received = params["receivedBytes"].as_f64().unwrap_or(0.0);
                let total = params["totalBytes"].as_f64().unwrap_or(0.0);
                let max = policy.limits.max_bytes;
                // Byte counts are whole numbers well within f64's exact range.
                if received > max as f64 || total > max as f64 {
                    download.state = DownloadState::TooLarge {
                        received: received.max(0.0) as u64,
                    };
                    policy.cancels.push(download.guid.clone());
                    return true;
                }
                // A byte count is a whole number well within f64's exact range.
                download.received = received.max(0.0) as u64;
                download.state = match params["state"].as_str() {
                    Some("completed") => DownloadState::Completed,
                    Some("canceled") => DownloadState::Canceled,
                    _ => return false,
                };
                true
            }
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn downloads_past_their_bounds_are_stopped_and_cancelled() {
        let events = Events::default();
        events.set_download_limits(DownloadLimits {
            max_bytes: 1000,
            max_count: 2,
        });
        let begin = |guid: &str| {
            events.handle(
                None,
                "Browser.downloadWillBegin",
                &json!({"guid": guid, "suggestedFilename": "f.bin"}),
            );
        };
        let progress = |guid: &str, received: u64, total: u64, state: &str| {
            events.handle(
                None,
                "Browser.downloadProgress",
                &json!({"guid": guid, "receivedBytes": received, "totalBytes": total, "state": state}),
            );
        };
        begin("a");
        begin("b");
        begin("c");
        progress("a", 500, 500, "completed");
        // Announced over the bound: stopped before a byte came.
        progress("b", 0, 5000, "inProgress");
        // The browser's later word on a stopped download changes nothing.
        progress("b", 0, 5000, "canceled");
        let states: Vec<DownloadState> =
            events.downloads(|list| list.iter().map(|d| d.state.clone()).collect());
        assert_eq!(
            states,
            [
                DownloadState::Completed,
                DownloadState::TooLarge { received: 0 },
                DownloadState::OverCount
            ]
        );
        assert_eq!(events.take_cancels(), ["c", "b"]);
        assert!(events.take_cancels().is_empty());
    }
}
