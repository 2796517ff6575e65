//! A snapshot's fetching: the page's accessibility tree, the elements that look clickable and the
//! trees of its child frames (in its renderer or another), asked of the browser within bounds, then
//! rendered with the tab's refs; and the modal state lines an answer shows beside it.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::super::cdp::{Cdp, CdpError};
use super::super::launch::Finder;
use super::super::snapshot::{self, Layout, MAX_SNAPSHOT_CHARS, NodeKey, SnapshotOptions, View};
use super::finder::{Declined, Found};
use super::{CALL, Running, SLOW_CALL};
use crate::tools::ToolError;

/// Candidates of an interactive view asked of the accessibility tree at once (five times as many
/// at most).
const BATCH: usize = 100;
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
        for (index, tab) in self.here.tabs.iter().enumerate() {
            if index == self.here.current {
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

    /// The current page's URL and title, and (when asked, with these options) its accessibility
    /// snapshot as the answer shows it. The browser's work for all of it is asked for at once.
    pub async fn location_and_snapshot(
        &mut self,
        snapshot: Option<&SnapshotOptions>,
    ) -> Result<(String, String, Option<String>), ToolError> {
        let Some(options) = snapshot else {
            self.ahead = None;
            let (url, title) = self.location().await?;
            return Ok((url, title, None));
        };
        let (location, parts) = self.fetch_parts(options).await?;
        let snapshot = self.snapshot_of(parts, options).await?;
        Ok((location.0, location.1, Some(snapshot.answer())))
    }

    /// The current page's snapshot with these options, as [`PageSnapshot`] (for a tool that writes
    /// its answer otherwise than `browser_snapshot`).
    #[allow(
        dead_code,
        reason = "the agent toolset's read_page (branch browser-toolset) calls it"
    )]
    pub async fn page_snapshot(
        &mut self,
        options: &SnapshotOptions,
    ) -> Result<PageSnapshot, ToolError> {
        let (_, parts) = self.fetch_parts(options).await?;
        self.snapshot_of(parts, options).await
    }

    /// The location and snapshot parts: for an interactive view, those of its candidates alone (see
    /// [`Running::interactive_parts`]); otherwise those asked for ahead in this call when they are
    /// still the page's, or asked for now.
    async fn fetch_parts(
        &mut self,
        options: &SnapshotOptions,
    ) -> Result<((String, String), SnapshotParts), ToolError> {
        if options.interactive_only {
            self.ahead = None;
            if let Some(parts) = self.interactive_parts(options).await? {
                return Ok(parts);
            }
        }
        if let Some(ahead) = self.ahead.take()
            && ahead.session == self.tab()?.session
            && ahead.marks.same_events(&self.marks()?)
        {
            return Ok((ahead.location, ahead.parts));
        }
        self.location_and_snapshot_parts().await
    }

    /// Renders `parts` as `options` ask, reading the viewport first when only what it shows is asked
    /// for.
    async fn snapshot_of(
        &mut self,
        mut parts: SnapshotParts,
        options: &SnapshotOptions,
    ) -> Result<PageSnapshot, ToolError> {
        let viewport = if options.viewport_only && parts.too_large.is_none() && !parts.narrowed {
            Some(self.viewport_rect().await?)
        } else {
            None
        };
        let layout = viewport.map(|viewport| Layout {
            viewport,
            boxes: std::mem::take(&mut parts.boxes),
        });
        self.render_snapshot(parts, options, layout)
    }

    /// The viewport in the document's CSS pixels: `[x, y, width, height]`.
    async fn viewport_rect(&self) -> Result<[f64; 4], ToolError> {
        let session = self.tab()?.session.clone();
        let metrics = self
            .cdp()
            .call(Some(&session), "Page.getLayoutMetrics", json!({}), CALL)
            .await?;
        let viewport = metrics
            .get("cssVisualViewport")
            .or_else(|| metrics.get("cssLayoutViewport"))
            .cloned()
            .unwrap_or_default();
        let number = |key: &str| viewport.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        Ok([
            number("pageX"),
            number("pageY"),
            number("clientWidth"),
            number("clientHeight"),
        ])
    }

    /// An interactive view's parts without the page's whole accessibility tree: the candidates
    /// (found by the page, [`Running::find_candidates`], or read from the DOM snapshot,
    /// [`snapshot::candidates`]; already narrowed to the root and the viewport) are asked of the
    /// accessibility tree one by one, all at once in batches, and only until the size asked for is
    /// filled (all of them for a diff, which compares whole views). The nodes are given as the
    /// children of one root, so they render as the whole tree's interactive view does. `None` when
    /// the page has child frames (the whole tree's walk shows them), no DOM snapshot, or the root is
    /// in a frame.
    async fn interactive_parts(
        &mut self,
        options: &SnapshotOptions,
    ) -> Result<Option<((String, String), SnapshotParts)>, ToolError> {
        let session = self.tab()?.session.clone();
        if !self.cdp().events.child_frames(&session).is_empty() {
            return Ok(None);
        }
        let document = self.events(|events| events.documents)?;
        let root = match &options.root_ref {
            Some(reference) => {
                let node = self.node_of(reference)?;
                if node.session != session || !node.hosts.is_empty() {
                    return Ok(None);
                }
                Some(node.backend)
            }
            None => None,
        };
        let viewport = if options.viewport_only {
            Some(self.viewport_rect().await?)
        } else {
            None
        };
        let world = match self.process.finder {
            Finder::Page => self.finder_world(&session).await?,
            Finder::Dom => None,
        };
        let cap = options
            .max_chars
            .unwrap_or(MAX_SNAPSHOT_CHARS)
            .min(MAX_SNAPSHOT_CHARS);
        // The walk finds first what the first round asks of the accessibility tree.
        let first = Fill::new(cap, usize::MAX, options.diff)
            .next_round(0)
            .unwrap_or(BATCH);
        let found = async {
            match world {
                Some(world) => {
                    self.find_candidates(&session, world, first, root, viewport)
                        .await
                }
                None => Ok(Err(Declined::Page)),
            }
        };
        let (location, found) = futures_util::future::join(self.location(), found).await;
        let location = location?;
        let mut declined = match found? {
            Ok(found) => {
                let mut candidates = Candidates::Page(found);
                let filled = self
                    .fill_view(&session, &mut candidates, cap, options.diff)
                    .await;
                if let Candidates::Page(found) = &candidates {
                    self.release_found(&session, found);
                }
                match filled? {
                    Ok(filled) => return Ok(Some((location, filled.parts(document, session)))),
                    Err(declined) => declined,
                }
            }
            Err(declined) => declined,
        };
        if matches!(declined, Declined::World) {
            self.tab_mut()?.finder_world = None;
            declined = Declined::Page;
        }
        tracing::debug!(?declined, "an interactive view read from the DOM snapshot");
        let Some(mut candidates) = self.dom_candidates(&session, root, viewport).await? else {
            return Ok(None);
        };
        match self
            .fill_view(&session, &mut candidates, cap, options.diff)
            .await?
        {
            Ok(filled) => Ok(Some((location, filled.parts(document, session)))),
            // The DOM snapshot's candidates are all known: it never declines.
            Err(_) => Ok(None),
        }
    }

    /// Asks `candidates` of the accessibility tree, round by round (see [`Fill`]), until the view's
    /// size `cap` is filled; the candidates found by the page are walked for as the rounds need
    /// them (the finder may decline then).
    async fn fill_view(
        &self,
        session: &str,
        candidates: &mut Candidates,
        cap: usize,
        diff: bool,
    ) -> Result<Result<Filled, Declined>, ToolError> {
        let mut fill = Fill::new(cap, usize::MAX, diff);
        let mut nodes: Vec<Value> = Vec::new();
        let mut clickable = HashMap::new();
        let mut asked = 0;
        while let Some(size) = fill.next_round(asked) {
            let want = asked.saturating_add(size);
            if let Err(declined) = self.walk_to(session, candidates, want).await? {
                return Ok(Err(declined));
            }
            if candidates.all_found() {
                fill.total = candidates.count();
            }
            let to = candidates.count().min(want);
            if to <= asked {
                break;
            }
            let batch = self.ax_queries(session, candidates, asked, to).await?;
            let answers = futures_util::future::join_all(batch.iter().map(|(query, _)| {
                self.cdp().call(
                    Some(session),
                    "Accessibility.getPartialAXTree",
                    query.clone(),
                    CALL,
                )
            }))
            .await;
            let mut answers = answers.into_iter();
            let from = asked;
            for index in from..to {
                let backend = batch.get(index - from).and_then(|(_, backend)| *backend);
                let answer = answers.next();
                asked += 1;
                let mut answer = match answer {
                    Some(Ok(answer)) => answer,
                    // Gone meanwhile.
                    None | Some(Err(CdpError::Protocol(_))) => {
                        fill.gone(asked);
                        continue;
                    }
                    Some(Err(err)) => return Err(err.into()),
                };
                let found = match answer["nodes"].take() {
                    Value::Array(found) => found.into_iter().find(|node| {
                        let own = node.get("backendDOMNodeId").and_then(Value::as_i64);
                        own.is_some() && (backend.is_none() || own == backend)
                    }),
                    _ => None,
                };
                let Some(mut node) = found else {
                    fill.gone(asked);
                    continue;
                };
                let looks = candidates.looks(index, backend);
                if let (Some(looks), Some(own)) = (looks, node["backendDOMNodeId"].as_i64()) {
                    clickable.insert((0, own), looks);
                }
                node["nodeId"] = json!(format!("c{}", nodes.len()));
                node["parentId"] = json!("root");
                node["childIds"] = json!([]);
                fill.found(asked, &node, looks);
                nodes.push(node);
            }
        }
        // Past what the size holds: left out as the cut's own lines are.
        let (asked, kept) = fill.asked(asked);
        nodes.truncate(kept);
        // The first candidates past it, to be named in the cut note when the nodes cut there leave
        // it room; at least one, to know whether any follows.
        let named = snapshot::MAX_NAMED_REFS.saturating_sub(fill.past);
        if let Err(declined) = self
            .walk_to(session, candidates, asked.saturating_add(named.max(1)))
            .await?
        {
            return Ok(Err(declined));
        }
        let to = candidates.count().min(asked.saturating_add(named));
        let unlisted = match &*candidates {
            Candidates::Dom { backends, .. } => {
                backends.get(asked..to).unwrap_or_default().to_vec()
            }
            Candidates::Page(found) if to > asked => {
                let objects = self.candidate_objects(session, found, asked, to).await?;
                self.backend_ids(session, &objects).await?
            }
            Candidates::Page(_) => Vec::new(),
        };
        Ok(Ok(Filled {
            nodes,
            clickable,
            unlisted: Unlisted {
                first: unlisted,
                count: candidates.count().saturating_sub(asked),
                more: !candidates.all_found(),
            },
        }))
    }

    /// Has the page's finder walk on until `want` candidates are found (the DOM snapshot's are all
    /// known).
    async fn walk_to(
        &self,
        session: &str,
        candidates: &mut Candidates,
        want: usize,
    ) -> Result<Result<(), Declined>, ToolError> {
        match candidates {
            Candidates::Page(found) => self.find_more(session, found, want).await,
            Candidates::Dom { .. } => Ok(Ok(())),
        }
    }

    /// An interactive view's candidates read from the page's DOM snapshot (which the finder
    /// declined); `None` without one, or when it holds a same-process frame's document.
    async fn dom_candidates(
        &self,
        session: &str,
        root: Option<i64>,
        viewport: Option<[f64; 4]>,
    ) -> Result<Option<Candidates>, ToolError> {
        let dom = match capture_dom(self.cdp(), session, MAX_DOM_BYTES).await {
            Ok((dom, _)) => snapshot::DomSnapshot::parse(dom.get()),
            Err(CdpError::Protocol(_) | CdpError::TooLarge { .. }) => None,
            Err(err) => return Err(err.into()),
        };
        // A same-process frame's document is in the DOM snapshot: the whole tree's walk shows it.
        let Some(dom) = dom.filter(|dom| dom.document_count() == 1) else {
            return Ok(None);
        };
        let looks = snapshot::clickable(&dom);
        let backends = snapshot::candidates(&dom, &looks, root, viewport);
        Ok(Some(Candidates::Dom { backends, looks }))
    }

    /// The accessibility queries of candidates `from..to`, each with the backend node id it asks
    /// for when known (fewer when the page's candidates went away meanwhile).
    async fn ax_queries(
        &self,
        session: &str,
        candidates: &Candidates,
        from: usize,
        to: usize,
    ) -> Result<Vec<(Value, Option<i64>)>, ToolError> {
        Ok(match candidates {
            Candidates::Dom { backends, .. } => backends
                .get(from..to)
                .unwrap_or_default()
                .iter()
                .map(|backend| {
                    (
                        json!({"backendNodeId": backend, "fetchRelatives": false}),
                        Some(*backend),
                    )
                })
                .collect(),
            Candidates::Page(found) => self
                .candidate_objects(session, found, from, to)
                .await?
                .into_iter()
                .map(|object| (json!({"objectId": object, "fetchRelatives": false}), None))
                .collect(),
        })
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
            capture_dom(self.cdp(), &session, MAX_DOM_BYTES),
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
                    boxes: HashMap::new(),
                    narrowed: false,
                    unlisted: Unlisted::default(),
                });
            }
            Err(err) => return Err(err.into()),
        };
        let mut frames = frames?;
        let mut boxes = HashMap::new();
        // Without it the snapshot only lacks the refs of elements that merely look clickable (and a
        // view of the viewport shows the whole page).
        match dom {
            Ok((dom, _)) => {
                let dom = snapshot::DomSnapshot::parse(dom.get()).unwrap_or_default();
                frames.clickable.extend(
                    snapshot::clickable(&dom)
                        .into_iter()
                        .map(|(node, looks)| ((0, node), looks)),
                );
                boxes = snapshot::boxes(&dom);
            }
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
            boxes,
            narrowed: false,
            unlisted: Unlisted::default(),
        })
    }

    fn render_snapshot(
        &mut self,
        parts: SnapshotParts,
        options: &SnapshotOptions,
        layout: Option<Layout>,
    ) -> Result<PageSnapshot, ToolError> {
        if let Some(bytes) = parts.too_large {
            return Ok(PageSnapshot {
                heading: format!(
                    "- Page Snapshot: the page is too large to snapshot (its accessibility tree is \
                     {} MiB, over the {} MiB bound); no refs were given. The browser and its tabs \
                     are unharmed. See the page with browser_take_screenshot, or navigate to a \
                     narrower page (a section's own address, a search or filter with fewer \
                     results).",
                    bytes.div_ceil(1024 * 1024),
                    MAX_TREE_BYTES / (1024 * 1024)
                ),
                ..PageSnapshot::default()
            });
        }
        self.tab_mut()?.refs.sync(parts.document);
        // The root as the snapshot's trees name it: a ref the tab never gave fails here, loudly.
        let root = match options.root_ref.as_ref().filter(|_| !parts.narrowed) {
            Some(reference) => {
                let node = self.node_of(reference)?;
                let scope = parts
                    .scopes
                    .iter()
                    .position(|(session, _)| *session == node.session)
                    .ok_or_else(|| gone(reference))?;
                Some((scope, node.backend))
            }
            None => None,
        };
        let view = View {
            interactive_only: options.interactive_only,
            layout,
            max_depth: options.max_depth,
            root,
            max_chars: options.max_chars,
        };
        let tab = self.tab_mut()?;
        // The snapshot's scopes as the tab's refs number them (a host's scope comes before the
        // scopes it hosts).
        let mut scopes: Vec<usize> = Vec::with_capacity(parts.scopes.len());
        for (session, host) in &parts.scopes {
            let host = host.and_then(|(parent, owner)| Some((*scopes.get(parent)?, owner)));
            scopes.push(tab.refs.scope(session, host));
        }
        let mut rendered = snapshot::render_view(
            &parts.nodes,
            &parts.frames,
            &parts.clickable,
            &view,
            &mut |(scope, backend), frame| {
                // Every scope of the trees is in the list; an unknown one gets a ref that never
                // resolves rather than another renderer's node.
                let scope = scopes.get(scope).copied().unwrap_or(usize::MAX);
                tab.refs.assign((scope, backend), frame)
            },
        );
        if rendered.root_missing
            && let Some(reference) = &options.root_ref
        {
            return Err(gone(reference));
        }
        // Candidates past the size: left out as the cut's own lines are, the first named.
        let mut unnamed = 0;
        if parts.unlisted.count > 0 {
            let scope = scopes.first().copied().unwrap_or(usize::MAX);
            let count = parts.unlisted.count;
            rendered.cut_lines += count;
            rendered.total_lines += count;
            rendered.rest_elements += count;
            let room = snapshot::MAX_NAMED_REFS.saturating_sub(rendered.rest.len());
            let named = parts.unlisted.first.iter().take(room);
            let named_count = named.len();
            for backend in named {
                rendered.rest.push(tab.refs.assign((scope, *backend), 0));
            }
            unnamed = count.saturating_sub(named_count);
        }
        let key = options.view_key();
        let baseline = if options.diff {
            Some(
                tab.refs
                    .baseline(&key)
                    .map(|lines| snapshot::diff(lines, &rendered.lines)),
            )
        } else {
            None
        };
        let mut answer = PageSnapshot {
            heading: "- Page Snapshot".to_owned(),
            yaml: Some(rendered.yaml),
            ..PageSnapshot::default()
        };
        if parts.frames_cut {
            answer.notes.push(format!(
                "- Frames cut: the page has more than {MAX_FRAMES} frames; the contents of \
                 {MAX_FRAMES} are shown, the other iframe lines are empty. Navigate to a frame's own \
                 address to see its content."
            ));
        }
        if parts.frames_over_budget {
            answer.notes.push(format!(
                "- Frames cut: the page's frames hold more than {} MiB of content together; the \
                 frames past it are shown empty. Navigate to a frame's own address to see its \
                 content.",
                MAX_FRAME_BYTES / (1024 * 1024)
            ));
        }
        let total_lines = rendered.total_lines;
        match baseline {
            Some(Some(diff)) => {
                diff_answer(&mut answer, &diff, total_lines, options.max_chars);
                tab.refs.remember(key, rendered.lines, true);
                return Ok(answer);
            }
            Some(None) => answer.notes.push(
                "- Diff: there is no earlier snapshot of this view on this page (a navigation \
                 starts anew): the whole snapshot is shown, and the next diff compares with it."
                    .to_owned(),
            ),
            None => {}
        }
        // A view whose candidates were not all asked for is no whole view to compare with.
        tab.refs
            .remember(key, rendered.lines, parts.unlisted.count == 0);
        if !rendered.deeper.is_empty() {
            answer.notes.push(format!(
                "- Depth cut: {} elements nested deeper than {} levels are not shown; they are \
                 under {} (pass one as root to read its part).",
                rendered.deeper_elements,
                options.max_depth.unwrap_or(0),
                named(&rendered.deeper, 0)
            ));
        }
        if rendered.cut_lines > 0 {
            let shown = total_lines - rendered.cut_lines;
            answer.notes.push(if options.is_upstream() {
                format!(
                    "- Snapshot cut: {shown} of {total_lines} lines shown (the first \
                     {MAX_SNAPSHOT_CHARS} characters, in document order; scrolling does not \
                     change which). Refs of the lines shown work. To reach the rest, navigate to \
                     a narrower page (a section's own address, a search or filter with fewer \
                     results), or see it with browser_take_screenshot."
                )
            } else {
                let cap = options
                    .max_chars
                    .unwrap_or(MAX_SNAPSHOT_CHARS)
                    .min(MAX_SNAPSHOT_CHARS);
                if parts.unlisted.more {
                    // The page was read only as far as the view needed.
                    let first = rendered.rest.len().min(snapshot::MAX_NAMED_REFS);
                    format!(
                        "- Snapshot cut: {shown} lines shown (the first {cap} characters); more are \
                         not shown (at least {} lines with {} elements: the page was read only as \
                         far as this view needed). They are under {} and more (pass one as root \
                         to read its part; interactive, depth and a larger size narrow or widen \
                         it). Refs of the lines shown work.",
                        rendered.cut_lines,
                        rendered.rest_elements,
                        rendered.rest.get(..first).unwrap_or_default().join(", ")
                    )
                } else {
                    format!(
                        "- Snapshot cut: {shown} of {total_lines} lines shown (the first {cap} \
                         characters); {} lines with {} elements are not shown. They are under \
                         {} (pass one as root to read its part; interactive, depth and a \
                         larger size narrow or widen it). Refs of the lines shown work.",
                        rendered.cut_lines,
                        rendered.rest_elements,
                        named(&rendered.rest, unnamed)
                    )
                }
            });
        }
        answer.rest = rendered.rest;
        answer.rest_elements = rendered.rest_elements;
        answer.rest_more = parts.unlisted.more;
        answer.deeper = rendered.deeper;
        answer.deeper_elements = rendered.deeper_elements;
        Ok(answer)
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
                    capture_dom(cdp, child, budget),
                    cdp.call_bounded(Some(child), "Page.getFrameTree", json!({}), CALL, budget),
                )
                .await;
                // A frame gone meanwhile answers with a protocol error: it is left empty. One over
                // what is left of the budget is left empty too, and ends the walk.
                let mut over = false;
                let mut tree = kept(tree, &mut budget, &mut over)?;
                let dom = kept(dom, &mut budget, &mut over)?;
                let frames = kept(frames, &mut budget, &mut over)?;
                walk.over_budget |= over;
                let dom = snapshot::DomSnapshot::parse(dom.get()).unwrap_or_default();
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

/// How many of an interactive view's candidates (in document order) are asked of the accessibility
/// tree, round by round: until the lines of those found fill the size (counted at least as they will
/// be written: a line shown never depends on a later candidate) and the cut note has the elements it
/// names past them, and never past where the earlier rule stopped (a first batch of `cap / 32`
/// candidates, 100 to 500, then batches of 100, while an estimate of 32 characters plus the name and
/// value a node stays within the size), so a view shows the lines and names the refs it did. All of
/// them for a diff, which compares whole views.
struct Fill {
    cap: usize,
    total: usize,
    diff: bool,
    /// The earlier rule's first batch.
    first: usize,
    /// Characters the lines of the nodes found take at least, how many were found, and how many of
    /// them show past the size (counted so, at least).
    chars: usize,
    found: usize,
    past: usize,
    /// The nodes found among the first `n + 1` candidates asked, by `n`.
    found_by: Vec<usize>,
    /// The earlier rule's estimate, and the number of candidates it asked once known.
    estimate: usize,
    limit: Option<usize>,
}

impl Fill {
    fn new(cap: usize, total: usize, diff: bool) -> Fill {
        Fill {
            cap,
            total,
            diff,
            first: (cap / 32).clamp(BATCH, 5 * BATCH),
            chars: 0,
            found: 0,
            past: 0,
            found_by: Vec::new(),
            estimate: 0,
            limit: None,
        }
    }

    /// How many candidates the next round asks for, `asked` asked so far; `None` when done.
    fn next_round(&self, asked: usize) -> Option<usize> {
        if asked >= self.total || self.limit.is_some_and(|limit| asked >= limit) {
            return None;
        }
        if self.diff {
            return Some(5 * BATCH);
        }
        let named = snapshot::MAX_NAMED_REFS.saturating_sub(self.past);
        if self.chars > self.cap && named == 0 {
            return None;
        }
        // As many as the rest of the size likely holds, at the lines' average so far (a first
        // guess of 48 characters), a few more, and those the note names: a budget is mostly filled
        // in one round.
        let average = self
            .chars
            .checked_div(self.found)
            .filter(|average| *average > 0)
            .unwrap_or(48);
        let rest = (self.cap + 1).saturating_sub(self.chars).div_ceil(average);
        Some((rest + rest / 4 + 4 + named).clamp(8, 5 * BATCH))
    }

    /// Candidate number `asked` (from 1) found: its node and how it looks.
    fn found(&mut self, asked: usize, node: &Value, looks: Option<snapshot::Looks>) {
        let text = |pointer: &str| {
            node.pointer(pointer)
                .and_then(Value::as_str)
                .map_or(0, str::len)
        };
        self.estimate += 32 + text("/name/value") + text("/value/value");
        let chars = snapshot::candidate_chars(node, looks);
        self.chars += chars;
        if chars > 0 && self.chars > self.cap {
            self.past += 1;
        }
        self.found += 1;
        self.advance(asked);
    }

    /// Candidate number `asked` (from 1) is gone from the page.
    fn gone(&mut self, asked: usize) {
        self.advance(asked);
    }

    fn advance(&mut self, asked: usize) {
        self.found_by.push(self.found);
        let boundary = asked == self.total
            || asked
                .checked_sub(self.first)
                .is_some_and(|past| past % BATCH == 0);
        if self.limit.is_none() && !self.diff && boundary && self.estimate > self.cap {
            self.limit = Some(asked);
        }
    }

    /// The candidates asked (of `asked`) that count, and the nodes found among them.
    fn asked(&self, asked: usize) -> (usize, usize) {
        match self.limit {
            Some(limit) if limit < asked => (
                limit,
                limit
                    .checked_sub(1)
                    .and_then(|at| self.found_by.get(at))
                    .copied()
                    .unwrap_or(0),
            ),
            _ => (asked, self.found),
        }
    }
}

/// A child frame's answer as its walk keeps it: what is left of the frames' byte budget pays for it;
/// one gone meanwhile (a protocol error) reads as empty, and so does one over the budget, which sets
/// `over`.
fn kept<T: Default>(
    answer: Result<(T, usize), CdpError>,
    budget: &mut usize,
    over: &mut bool,
) -> Result<T, ToolError> {
    match answer {
        Ok((answer, length)) => {
            *budget = budget.saturating_sub(length);
            Ok(answer)
        }
        Err(CdpError::Protocol(_)) => Ok(T::default()),
        Err(CdpError::TooLarge { .. }) => {
            *over = true;
            Ok(T::default())
        }
        Err(err) => Err(ToolError::from(err)),
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
    /// The boxes of the page's own document, for a view of what the viewport shows.
    boxes: HashMap<i64, [f64; 4]>,
    /// The nodes are an interactive view's candidates, already narrowed to its root and viewport.
    narrowed: bool,
    /// Candidates of such a view not asked for: past the size asked for.
    unlisted: Unlisted,
}

/// An interactive view's candidates past what its size holds.
#[derive(Default)]
struct Unlisted {
    /// The backend node ids of the first of them (those the cut note may name).
    first: Vec<i64>,
    /// How many (those found, when the finder's walk stopped before the page's end).
    count: usize,
    /// The finder's walk stopped before the page's end: more may follow those counted.
    more: bool,
}

/// A snapshot as an answer shows it: its heading line, its YAML (none when there is nothing to show:
/// a page too large, a diff without changes) and the notes after it (what was cut, and how to read
/// it), with what was cut as data for a tool that words it otherwise.
#[derive(Debug, Default)]
pub struct PageSnapshot {
    pub heading: String,
    pub yaml: Option<String>,
    /// The YAML is a diff against the tab's previous snapshot (its block is fenced as one).
    pub diff: bool,
    pub notes: Vec<String>,
    /// Refs of the subtrees the size cap left out (the first [`snapshot::MAX_NAMED_REFS`]), and
    /// the elements it left out in all.
    pub rest: Vec<String>,
    pub rest_elements: usize,
    /// More elements than `rest_elements` may be left out: the page was read only as far as the
    /// view needed.
    pub rest_more: bool,
    /// Refs of the elements whose children the depth left out, and the elements left out.
    pub deeper: Vec<String>,
    pub deeper_elements: usize,
}

impl PageSnapshot {
    /// As `browser_snapshot` answers: the heading, the YAML in a fenced block, the notes.
    pub fn answer(&self) -> String {
        let mut text = self.heading.clone();
        if let Some(yaml) = &self.yaml {
            let fence = if self.diff { "diff" } else { "yaml" };
            text.push_str(&format!("\n```{fence}\n{yaml}\n```"));
        }
        for note in &self.notes {
            text.push('\n');
            text.push_str(note);
        }
        text
    }
}

/// A list of refs as a note names them: the first ones, and how many more (`unnamed` more past the
/// list).
fn named(refs: &[String], unnamed: usize) -> String {
    let shown = refs.len().min(snapshot::MAX_NAMED_REFS);
    let mut text = refs.get(..shown).unwrap_or_default().join(", ");
    let more = refs.len() - shown + unnamed;
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

/// A root ref whose element is not in the page any more.
fn gone(reference: &str) -> ToolError {
    ToolError::Reported(format!(
        "The element of ref {reference} is no longer in the page (it was removed or replaced). \
         Take a new snapshot (browser_snapshot) and use a ref from it."
    ))
}

/// A diff as the answer shows it: the changed lines under a heading that counts them, cut at the
/// size asked for; or a heading saying nothing changed.
fn diff_answer(
    answer: &mut PageSnapshot,
    diff: &snapshot::Diff,
    total_lines: usize,
    max_chars: Option<usize>,
) {
    if diff.is_empty() {
        answer.heading = format!(
            "- Page Snapshot: unchanged since this tab's previous snapshot of this view ({total_lines} \
             lines); its refs stand."
        );
        answer.yaml = None;
        return;
    }
    answer.heading = format!(
        "- Page Snapshot: changes since this tab's previous snapshot of this view ({} added, {} \
         removed, {} changed; `+ ` added lines, `- ` removed ones, the others unchanged lines \
         holding them; refs not shown stand)",
        diff.added, diff.removed, diff.changed
    );
    let cap = max_chars
        .unwrap_or(MAX_SNAPSHOT_CHARS)
        .min(MAX_SNAPSHOT_CHARS);
    let mut yaml = String::new();
    let mut kept = 0;
    for line in &diff.lines {
        if yaml.len() + line.len() + 1 > cap {
            break;
        }
        yaml.push_str(line);
        yaml.push('\n');
        kept += 1;
    }
    answer.yaml = Some(yaml.trim_end().to_owned());
    answer.diff = true;
    if kept < diff.lines.len() {
        answer.notes.push(format!(
            "- Diff cut: {kept} of {} lines shown (the first {cap} characters); take the snapshot \
             without diff, or of a part (root), to see the rest.",
            diff.lines.len()
        ));
    }
}

/// An interactive view's accessibility nodes (those its size holds) and what is left of it.
struct Filled {
    nodes: Vec<Value>,
    clickable: HashMap<NodeKey, snapshot::Looks>,
    unlisted: Unlisted,
}

impl Filled {
    /// The nodes as the children of one root, so they render as the whole tree's interactive view
    /// does.
    fn parts(self, document: u64, session: String) -> SnapshotParts {
        let children: Vec<Value> = self
            .nodes
            .iter()
            .map(|node| node["nodeId"].clone())
            .collect();
        let mut all = Vec::with_capacity(self.nodes.len() + 1);
        all.push(
            json!({"nodeId": "root", "ignored": false, "role": {"value": "RootWebArea"},
                        "childIds": children}),
        );
        all.extend(self.nodes);
        SnapshotParts {
            document,
            nodes: all,
            scopes: vec![(session, None)],
            clickable: self.clickable,
            frames: HashMap::new(),
            frames_cut: false,
            frames_over_budget: false,
            too_large: None,
            boxes: HashMap::new(),
            narrowed: true,
            unlisted: self.unlisted,
        }
    }
}

/// An interactive view's candidates, in document order: found by the page, or read from its DOM
/// snapshot (their backend node ids, and how the elements of the snapshot look).
enum Candidates {
    Page(Found),
    Dom {
        backends: Vec<i64>,
        looks: HashMap<i64, snapshot::Looks>,
    },
}

impl Candidates {
    /// The candidates known so far.
    fn count(&self) -> usize {
        match self {
            Candidates::Page(found) => found.count(),
            Candidates::Dom { backends, .. } => backends.len(),
        }
    }

    /// Every candidate is known.
    fn all_found(&self) -> bool {
        match self {
            Candidates::Page(found) => found.done,
            Candidates::Dom { .. } => true,
        }
    }

    /// How candidate `index` (of backend node id `backend` when known) looks.
    fn looks(&self, index: usize, backend: Option<i64>) -> Option<snapshot::Looks> {
        match self {
            Candidates::Page(found) => found.looks(index),
            Candidates::Dom { looks, .. } => {
                backend.and_then(|backend| looks.get(&backend).copied())
            }
        }
    }
}

/// Chromium's DOM snapshot of `session`'s page as [`snapshot::DomSnapshot`] reads it (with the one
/// computed style it expects, `cursor`), left unparsed; at most `max` bytes.
async fn capture_dom(
    cdp: &Cdp,
    session: &str,
    max: usize,
) -> Result<(Box<serde_json::value::RawValue>, usize), CdpError> {
    cdp.call_raw_bounded(
        Some(session),
        "DOMSnapshot.captureSnapshot",
        json!({"computedStyles": ["cursor"]}),
        SLOW_CALL,
        max,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asks `total` candidates, each answering `node`, as the rounds of a [`Fill`] say: the
    /// candidates that count and the nodes kept, and how many were asked in all.
    fn fill_with(cap: usize, total: usize, node: &Value, diff: bool) -> ((usize, usize), usize) {
        let mut fill = Fill::new(cap, total, diff);
        let mut asked = 0;
        while let Some(size) = fill.next_round(asked) {
            for _ in 0..size.min(total - asked) {
                asked += 1;
                fill.found(asked, node, None);
            }
        }
        (fill.asked(asked), asked)
    }

    fn button(name: &str) -> Value {
        json!({"nodeId": "c", "ignored": false, "role": {"value": "button"},
               "name": {"value": name}, "backendDOMNodeId": 7})
    }

    #[test]
    fn the_rounds_fill_the_size_and_the_named_refs_past_it() {
        // `- button "a long enough name" [ref=e0]`: 38 characters and its line end.
        let node = button("a long enough name");
        let ((counted, kept), asked) = fill_with(8000, 3000, &node, false);
        assert_eq!((counted, kept), (asked, asked));
        // 8 000 characters take 206 such lines (the last one cut); the note names 12 past them.
        assert!((212..250).contains(&counted), "{counted}");
    }

    #[test]
    fn the_rounds_stop_where_the_earlier_batches_stopped() {
        // The earlier estimate (32 + 8 characters a node) passed 4 000 characters at its first
        // batch of 125, where the 29-character lines did not fill it yet: those 125 count.
        let node = button("abcdefgh");
        let ((counted, kept), asked) = fill_with(4000, 3000, &node, false);
        assert_eq!((counted, kept), (125, 125));
        assert!(asked >= 125);
        // A diff asks for them all.
        assert_eq!(fill_with(4000, 3000, &node, true).0, (3000, 3000));
    }
}
