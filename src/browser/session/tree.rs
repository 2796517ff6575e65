//! A snapshot's fetching: the page's accessibility tree, the elements that look clickable and the
//! trees of its child frames (in its renderer or another), asked of the browser within bounds, then
//! rendered with the tab's refs; and the modal state lines an answer shows beside it.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::super::cdp::CdpError;
use super::super::snapshot::{self, MAX_SNAPSHOT_CHARS, NodeKey};
use super::{CALL, Running, SLOW_CALL};
use crate::tools::ToolError;

/// Child frames a snapshot walks at most (a page of endless nested iframes costs two calls per frame).
pub const MAX_FRAMES: usize = 16;
/// The largest accessibility tree of a tab's page a snapshot takes, in bytes of the browser's answer
/// (a page of about 10 MB of text). A larger one is read past, not kept, and the answer says the page
/// is too large to snapshot: the browser and its tabs are left as they are, and boxd holds at most
/// this much (with its parse) per snapshot.
pub const MAX_TREE_BYTES: usize = 32 * 1024 * 1024;
/// The largest DOM snapshot (read only to find the elements that look clickable) a snapshot takes;
/// past it those elements get no refs of their own.
pub const MAX_DOM_BYTES: usize = 16 * 1024 * 1024;
/// The bytes of the trees and DOM snapshots of all child frames of one snapshot together; frames past
/// it are left empty, and the answer says so.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

impl Running {
    /// The modal state lines (an open dialog, a file chooser), empty when there is none.
    /// A dialog another tab shows is listed too: its page is blocked until it is answered there.
    pub fn modal_lines(&self) -> Result<Vec<String>, ToolError> {
        let mut lines = self.events(|events| {
            let mut lines = Vec::new();
            if let Some(dialog) = &events.dialog {
                lines.push(format!(
                    "- [{}]: can be handled by the \"browser_handle_dialog\" tool",
                    dialog.label()
                ));
            }
            if events.file_chooser.is_some() {
                lines.push(
                    "- [File chooser]: can be handled by the \"browser_file_upload\" tool".into(),
                );
            }
            lines
        })?;
        for (index, tab) in self.tabs.iter().enumerate() {
            if index == self.current {
                continue;
            }
            if let Some(dialog) = self
                .cdp()
                .events
                .with(&tab.session, |events| events.dialog.clone())
            {
                lines.push(format!(
                    "- [{}] in tab {}: select it (browser_tab_select) to handle it with the \
                     \"browser_handle_dialog\" tool",
                    dialog.label(),
                    index + 1
                ));
            }
        }
        Ok(lines)
    }

    /// The current page's URL and title, and (when `with_snapshot`) its accessibility snapshot as
    /// YAML with refs. The browser's work for all of it is asked for at once.
    pub async fn location_and_snapshot(
        &mut self,
        with_snapshot: bool,
    ) -> Result<(String, String, Option<String>), ToolError> {
        if let Some(ahead) = self.ahead.take()
            && with_snapshot
            && ahead.session == self.tab()?.session
            && ahead.marks.same_events(&self.marks()?)
        {
            let (url, title) = ahead.location;
            let snapshot = self.render_snapshot(ahead.parts)?;
            return Ok((url, title, Some(snapshot)));
        }
        if !with_snapshot {
            let (url, title) = self.location().await?;
            return Ok((url, title, None));
        }
        let (location, parts) = self.location_and_snapshot_parts().await?;
        let snapshot = self.render_snapshot(parts)?;
        Ok((location.0, location.1, Some(snapshot)))
    }

    pub(super) async fn location_and_snapshot_parts(
        &self,
    ) -> Result<((String, String), SnapshotParts), ToolError> {
        let (location, parts) =
            futures_util::future::join(self.location(), self.snapshot_parts()).await;
        Ok((location?, parts?))
    }

    /// What a snapshot is made of: the page's accessibility tree, the elements that look clickable
    /// and the trees of its same-process child frames.
    async fn snapshot_parts(&self) -> Result<SnapshotParts, ToolError> {
        let document = self.events(|events| events.documents)?;
        let session = self.tab()?.session.clone();
        // Sent together: the renderer answers one after the other, without a round trip between.
        let (tree, dom, frames) = futures_util::future::join3(
            self.cdp().call_bounded(
                Some(&session),
                "Accessibility.getFullAXTree",
                json!({}),
                SLOW_CALL,
                MAX_TREE_BYTES,
            ),
            self.cdp().call_bounded(
                Some(&session),
                "DOMSnapshot.captureSnapshot",
                json!({"computedStyles": ["cursor"]}),
                SLOW_CALL,
                MAX_DOM_BYTES,
            ),
            self.child_frames(&session),
        )
        .await;
        let mut tree = match tree {
            Ok((tree, _)) => tree,
            // The page is too large to snapshot: said in place of the snapshot (the answer's other
            // parts stand), and nothing of it was kept.
            Err(CdpError::TooLarge { bytes, .. }) => {
                tracing::info!(bytes, "a page too large to snapshot");
                return Ok(SnapshotParts {
                    document,
                    nodes: Vec::new(),
                    scopes: vec![(session, None)],
                    clickable: HashMap::new(),
                    frames: HashMap::new(),
                    frames_cut: false,
                    frames_over_budget: false,
                    too_large: Some(bytes),
                });
            }
            Err(err) => return Err(err.into()),
        };
        let mut frames = frames?;
        // Without it the snapshot only lacks the refs of elements that merely look clickable.
        match dom {
            Ok((dom, _)) => frames.clickable.extend(
                snapshot::clickable(&dom)
                    .into_iter()
                    .map(|(node, looks)| ((0, node), looks)),
            ),
            Err(CdpError::Protocol(message)) => {
                tracing::debug!("no DOM snapshot for clickable elements: {message}");
            }
            Err(CdpError::TooLarge { bytes, .. }) => {
                tracing::debug!(bytes, "no DOM snapshot for clickable elements: too large");
            }
            Err(err) => return Err(err.into()),
        }
        let nodes = match tree["nodes"].take() {
            Value::Array(nodes) => nodes,
            _ => Vec::new(),
        };
        Ok(SnapshotParts {
            document,
            nodes,
            scopes: frames.scopes,
            clickable: frames.clickable,
            frames: frames.frames,
            frames_cut: frames.cut,
            frames_over_budget: frames.over_budget,
            too_large: None,
        })
    }

    fn render_snapshot(&mut self, parts: SnapshotParts) -> Result<String, ToolError> {
        if let Some(bytes) = parts.too_large {
            return Ok(format!(
                "- Page Snapshot: the page is too large to snapshot (its accessibility tree is {} \
                 MiB, over the {} MiB bound); no refs were given. The browser and its tabs are \
                 unharmed. See the page with browser_take_screenshot, or navigate to a narrower \
                 page (a section's own address, a search or filter with fewer results).",
                bytes.div_ceil(1024 * 1024),
                MAX_TREE_BYTES / (1024 * 1024)
            ));
        }
        let tab = self.tab_mut()?;
        tab.refs.sync(parts.document);
        // The snapshot's scopes as the tab's refs number them (a host's scope comes before the
        // scopes it hosts).
        let mut scopes: Vec<usize> = Vec::with_capacity(parts.scopes.len());
        for (session, host) in &parts.scopes {
            let host = host.and_then(|(parent, owner)| Some((*scopes.get(parent)?, owner)));
            scopes.push(tab.refs.scope(session, host));
        }
        let rendered = snapshot::render(
            &parts.nodes,
            &parts.frames,
            &parts.clickable,
            &mut |(scope, backend), frame| {
                // Every scope of the trees is in the list; an unknown one gets a ref that never
                // resolves rather than another renderer's node.
                let scope = scopes.get(scope).copied().unwrap_or(usize::MAX);
                tab.refs.assign((scope, backend), frame)
            },
        );
        let mut text = format!("- Page Snapshot\n```yaml\n{}\n```", rendered.yaml);
        if parts.frames_cut {
            text.push_str(&format!(
                "\n- Frames cut: the page has more than {MAX_FRAMES} frames; the contents of \
                 {MAX_FRAMES} are shown, the other iframe lines are empty. Navigate to a frame's own \
                 address to see its content."
            ));
        }
        if parts.frames_over_budget {
            text.push_str(&format!(
                "\n- Frames cut: the page's frames hold more than {} MiB of content together; the \
                 frames past it are shown empty. Navigate to a frame's own address to see its \
                 content.",
                MAX_FRAME_BYTES / (1024 * 1024)
            ));
        }
        if rendered.cut_lines > 0 {
            text.push_str(&format!(
                "\n- Snapshot cut: {} of {} lines shown (the first {MAX_SNAPSHOT_CHARS} characters, \
                 in document order; scrolling does not change which). Refs of the lines shown work. \
                 To reach the rest, navigate to a narrower page (a section's own address, a search \
                 or filter with fewer results), or see it with browser_take_screenshot.",
                rendered.total_lines - rendered.cut_lines,
                rendered.total_lines
            ));
        }
        Ok(text)
    }

    /// The accessibility trees of the page's child frames, by the node of the `<iframe>` hosting
    /// each: frames in the page's renderer are asked for through the tab's session, frames Chromium
    /// runs in another process (site isolation) through their own sessions (attached as they appear,
    /// see [`events::auto_attach`](super::super::events::auto_attach)), and so on down. At most
    /// [`MAX_FRAMES`]; a frame that goes away meanwhile is left empty.
    async fn child_frames(&self, session: &str) -> Result<ChildTrees, ToolError> {
        let cdp = self.cdp();
        let others = cdp.events.child_frames(session);
        let mut walk = ChildTrees {
            scopes: vec![(session.to_owned(), None)],
            frames: HashMap::new(),
            clickable: HashMap::new(),
            cut: false,
            over_budget: false,
        };
        // What is left of [`MAX_FRAME_BYTES`]: each frame's answers may take all of it at most.
        let mut budget = MAX_FRAME_BYTES;
        let mut trees = vec![
            cdp.call(Some(session), "Page.getFrameTree", json!({}), CALL)
                .await?,
        ];
        let mut visited = 0;
        let mut scope = 0;
        while scope < walk.scopes.len() && visited < MAX_FRAMES {
            let here = walk.scopes[scope].0.clone();
            // The frames of this renderer, below its own frame.
            let tree = trees.get_mut(scope).map(Value::take).unwrap_or_default();
            let mut pending: Vec<&Value> = tree
                .pointer("/frameTree/childFrames")
                .and_then(Value::as_array)
                .map(|children| children.iter().collect())
                .unwrap_or_default();
            while let Some(child) = pending.pop() {
                if visited >= MAX_FRAMES {
                    walk.cut = true;
                    break;
                }
                visited += 1;
                if let Some(grandchildren) = child.get("childFrames").and_then(Value::as_array) {
                    pending.extend(grandchildren);
                }
                let Some(id) = child.pointer("/frame/id").and_then(Value::as_str) else {
                    continue;
                };
                let Some(owner) = self.frame_owner(&here, id).await? else {
                    continue;
                };
                if walk.over_budget {
                    continue;
                }
                match cdp
                    .call_bounded(
                        Some(&here),
                        "Accessibility.getFullAXTree",
                        json!({"frameId": id}),
                        SLOW_CALL,
                        budget,
                    )
                    .await
                {
                    Ok((mut tree, length)) => {
                        budget = budget.saturating_sub(length);
                        if let Value::Array(nodes) = tree["nodes"].take() {
                            walk.frames
                                .insert((scope, owner), snapshot::Frame { scope, nodes });
                        }
                    }
                    Err(CdpError::Protocol(_)) => {}
                    Err(CdpError::TooLarge { .. }) => walk.over_budget = true,
                    Err(err) => return Err(err.into()),
                }
            }
            // The frames in other processes that this renderer hosts: each is a scope of its own.
            for (child, frame) in others.iter().filter(|(_, frame)| frame.parent == here) {
                if visited >= MAX_FRAMES {
                    walk.cut = true;
                    break;
                }
                visited += 1;
                if walk.over_budget {
                    continue;
                }
                let Some(owner) = self.frame_owner(&here, &frame.frame).await? else {
                    continue;
                };
                let (tree, dom, frames) = futures_util::future::join3(
                    cdp.call_bounded(
                        Some(child),
                        "Accessibility.getFullAXTree",
                        json!({}),
                        SLOW_CALL,
                        budget,
                    ),
                    cdp.call_bounded(
                        Some(child),
                        "DOMSnapshot.captureSnapshot",
                        json!({"computedStyles": ["cursor"]}),
                        SLOW_CALL,
                        budget,
                    ),
                    cdp.call_bounded(Some(child), "Page.getFrameTree", json!({}), CALL, budget),
                )
                .await;
                // A frame gone meanwhile answers with a protocol error: it is left empty. One over
                // what is left of the budget is left empty too, and ends the walk.
                let mut over = false;
                let mut kept = |answer: Result<(Value, usize), CdpError>| match answer {
                    Ok((answer, length)) => {
                        budget = budget.saturating_sub(length);
                        Ok(answer)
                    }
                    Err(CdpError::Protocol(_)) => Ok(Value::Null),
                    Err(CdpError::TooLarge { .. }) => {
                        over = true;
                        Ok(Value::Null)
                    }
                    Err(err) => Err(ToolError::from(err)),
                };
                let mut tree = kept(tree)?;
                let dom = kept(dom)?;
                let frames = kept(frames)?;
                walk.over_budget |= over;
                let Value::Array(nodes) = tree["nodes"].take() else {
                    continue;
                };
                let inner = walk.scopes.len();
                walk.scopes.push((child.clone(), Some((scope, owner))));
                walk.frames.insert(
                    (scope, owner),
                    snapshot::Frame {
                        scope: inner,
                        nodes,
                    },
                );
                walk.clickable.extend(
                    snapshot::clickable(&dom)
                        .into_iter()
                        .map(|(node, looks)| ((inner, node), looks)),
                );
                trees.push(frames);
            }
            scope += 1;
        }
        Ok(walk)
    }

    /// The backend node id of the `<iframe>` hosting frame `frame`, asked of the session of its
    /// parent's renderer; `None` when the frame is gone.
    async fn frame_owner(&self, session: &str, frame: &str) -> Result<Option<i64>, ToolError> {
        match self
            .cdp()
            .call(
                Some(session),
                "DOM.getFrameOwner",
                json!({"frameId": frame}),
                CALL,
            )
            .await
        {
            Ok(owner) => Ok(owner.get("backendNodeId").and_then(Value::as_i64)),
            Err(CdpError::Protocol(_)) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }
}

/// The renderer sessions of a snapshot's trees, by scope: the tab's first, then those of frames in
/// other processes, each with the `<iframe>` hosting it (its parent's scope and node id there).
type Scopes = Vec<(String, Option<NodeKey>)>;

/// The trees of a page's child frames, and what the walk met on the way.
struct ChildTrees {
    scopes: Scopes,
    frames: HashMap<NodeKey, snapshot::Frame>,
    clickable: HashMap<NodeKey, snapshot::Looks>,
    /// Frames were left unwalked past [`MAX_FRAMES`]: the answer says so.
    cut: bool,
    /// Frames were left empty past [`MAX_FRAME_BYTES`]: the answer says so.
    over_budget: bool,
}

pub(super) struct SnapshotParts {
    /// The document the node ids belong to.
    document: u64,
    nodes: Vec<Value>,
    scopes: Scopes,
    clickable: HashMap<NodeKey, snapshot::Looks>,
    frames: HashMap<NodeKey, snapshot::Frame>,
    /// More frames than [`MAX_FRAMES`]: the later ones' `iframe` lines are empty.
    frames_cut: bool,
    /// Frames past [`MAX_FRAME_BYTES`] were left empty.
    frames_over_budget: bool,
    /// The page's accessibility tree was larger than [`MAX_TREE_BYTES`] (its length): the answer
    /// says so in place of the snapshot.
    too_large: Option<usize>,
}
