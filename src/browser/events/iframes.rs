//! Out-of-process iframes: frames Chromium runs in another renderer process (site isolation),
//! attached as sessions of their own, remembered per tab (bounded) and forgotten with the frame or tab
//! they are in.

use std::collections::HashMap;

use serde_json::Value;

use super::Events;

/// Out-of-process frames remembered at most (across tabs); more are left unattached to snapshots.
pub const MAX_CHILD_FRAMES: usize = 256;

/// The `Target.setAutoAttach` parameters of every tab session and every frame session: frames
/// Chromium runs in another renderer process (site isolation) are attached as sessions of their own,
/// running at once (nothing waits for a debugger).
pub fn auto_attach() -> Value {
    serde_json::json!({"autoAttach": true, "waitForDebuggerOnStart": false, "flatten": true,
                       "filter": [{"type": "iframe"}]})
}

/// A frame Chromium runs in another renderer process (an out-of-process iframe), attached as its own
/// session: its frame id (its target id), the session of its parent frame's renderer and the session
/// of the tab it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildFrame {
    pub frame: String,
    pub parent: String,
    pub tab: String,
}

impl Events {
    pub(super) fn children(&self) -> std::sync::MutexGuard<'_, HashMap<String, ChildFrame>> {
        self.children
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The out-of-process frames of the tab attached as `tab`, by their session.
    pub fn child_frames(&self, tab: &str) -> Vec<(String, ChildFrame)> {
        let mut frames: Vec<(String, ChildFrame)> = self
            .children()
            .iter()
            .filter(|(_, child)| child.tab == tab)
            .map(|(session, child)| (session.clone(), child.clone()))
            .collect();
        // A stable order (the map's is not), so a page's frames are walked alike every time.
        frames.sort_by(|a, b| a.1.frame.cmp(&b.1.frame));
        frames
    }

    /// Remembers a frame session attached under `session` (a tab's or another frame's); the new
    /// session when it is one, to be set up by the caller.
    pub(super) fn attached(&self, session: &str, params: &Value) -> Option<String> {
        if params.pointer("/targetInfo/type").and_then(Value::as_str) != Some("iframe") {
            return None;
        }
        let child = params.get("sessionId").and_then(Value::as_str)?;
        let frame = params
            .pointer("/targetInfo/targetId")
            .and_then(Value::as_str)?;
        let mut children = self.children();
        if children.len() >= MAX_CHILD_FRAMES {
            return None;
        }
        let tab = children
            .get(session)
            .map_or_else(|| session.to_owned(), |parent| parent.tab.clone());
        children.insert(
            child.to_owned(),
            ChildFrame {
                frame: frame.to_owned(),
                parent: session.to_owned(),
                tab,
            },
        );
        Some(child.to_owned())
    }

    /// Forgets a frame session that went away, and the frames attached under it.
    pub(super) fn detached(&self, params: &Value) {
        let Some(gone) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let mut children = self.children();
        let mut gone = vec![gone.to_owned()];
        while let Some(session) = gone.pop() {
            children.remove(&session);
            gone.extend(
                children
                    .iter()
                    .filter(|(_, child)| child.parent == session)
                    .map(|(session, _)| session.clone()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frame_sessions_are_tracked_per_tab_and_their_events_are_not_the_tabs() {
        let events = Events::default();
        let iframe = |session: &str, frame: &str| json!({"sessionId": session, "targetInfo": {"type": "iframe", "targetId": frame}});
        assert_eq!(
            events.handle(Some("T"), "Target.attachedToTarget", &iframe("C", "F1")),
            Some("C".into())
        );
        // A frame in the frame: attached under the frame's session, still the tab's.
        assert_eq!(
            events.handle(Some("C"), "Target.attachedToTarget", &iframe("D", "F2")),
            Some("D".into())
        );
        // Workers and other targets are not frames.
        let worker = json!({"sessionId": "W", "targetInfo": {"type": "worker", "targetId": "W1"}});
        assert_eq!(
            events.handle(Some("T"), "Target.attachedToTarget", &worker),
            None
        );
        let frames = events.child_frames("T");
        let sessions: Vec<&str> = frames.iter().map(|(session, _)| session.as_str()).collect();
        assert_eq!(sessions, ["C", "D"]);
        assert_eq!(
            frames[1].1,
            ChildFrame {
                frame: "F2".into(),
                parent: "C".into(),
                tab: "T".into()
            }
        );
        // The frame's own document and load do not move the tab's counters, nor make a tab of it.
        events.handle(Some("T"), "Page.loadEventFired", &json!({}));
        events.handle(
            Some("C"),
            "Page.frameNavigated",
            &json!({"frame": {"id": "F1"}}),
        );
        events.handle(Some("C"), "Page.loadEventFired", &json!({}));
        events.handle(
            Some("C"),
            "Runtime.consoleAPICalled",
            &json!({"type": "log"}),
        );
        events.with("T", |tab| {
            assert_eq!((tab.documents, tab.loads), (0, 1));
            assert_eq!(tab.console.len(), 0);
        });
        assert!(!events.tabs.lock().unwrap().contains_key("C"));
        // Its file chooser is the tab's modal state, naming the frame's session.
        events.handle(
            Some("D"),
            "Page.fileChooserOpened",
            &json!({"backendNodeId": 7}),
        );
        assert_eq!(
            events.with("T", |tab| tab.file_chooser.clone()),
            Some(("D".into(), 7))
        );
        // A frame that goes away takes the frames in it along.
        events.handle(
            Some("T"),
            "Target.detachedFromTarget",
            &json!({"sessionId": "C"}),
        );
        assert!(events.child_frames("T").is_empty());
        events.handle(Some("T"), "Target.attachedToTarget", &iframe("E", "F3"));
        events.forget("T");
        assert!(events.child_frames("T").is_empty());
    }
}
