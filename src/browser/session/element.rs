//! A ref's element found live in its page, and where it is on screen: its node, its JS object (and
//! calls on it), the centre of its box, and the offset of the out-of-process frames hosting it.

use serde_json::{Value, json};

use super::super::cdp::CdpError;
use super::contexts::DEFAULT;
use super::refs::{Element, Located, session_of_ref};
use super::{CALL, Running};
use crate::tools::ToolError;

/// A ref's frame (in another process) went away between the snapshot and the action.
pub const FRAME_GONE: &str = "The frame of that element is no longer in the page (it was removed or \
    navigated). Take a new snapshot (browser_snapshot) and use a ref from it.";

/// How a family of tools writes refs and tells the model to get a current one: the snapshot's
/// `e7` (the playwright tools) or the toolset's `ref_7`, both naming the tab's ref number 7.
pub struct RefStyle {
    /// The ref number a written ref names, if it is one of this style.
    pub number: fn(&str) -> Option<u64>,
    /// Where refs come from and what one looks like, for the refusal of one that is not.
    pub from: &'static str,
    pub example: &'static str,
    /// The sentence saying how to get refs.
    pub take: &'static str,
    /// The clause (lower case, ending with its full stop) saying how to get a current ref.
    pub renew: &'static str,
}

/// The playwright tools' refs: `e7`, and `f2e7` for a node of a child frame (the same number).
pub const SNAPSHOT_REFS: RefStyle = RefStyle {
    number: snapshot_ref_number,
    from: "a page snapshot",
    example: "e12",
    take: "Take a snapshot (browser_snapshot) and use a ref from it.",
    renew: "take a new snapshot (browser_snapshot) and use a ref from it.",
};

fn snapshot_ref_number(reference: &str) -> Option<u64> {
    let trimmed = reference.trim();
    // `f2e7` (a node of a child frame) and `e7` name the same node: numbers are per tab.
    let unframed = match trimmed.strip_prefix('f') {
        Some(rest) => {
            let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
            // `fe7` is no ref: an `f` carries the frame's number.
            if after.len() == rest.len() { "" } else { after }
        }
        None => trimmed,
    };
    unframed.strip_prefix('e')?.parse::<u64>().ok()
}

impl Running {
    /// The node a ref names, or an error saying to take a new snapshot.
    pub fn node_of(&mut self, reference: &str) -> Result<Located, ToolError> {
        self.node_in_style(reference, &SNAPSHOT_REFS)
    }

    /// The node a ref of `style` names, or an error saying how to get a current one.
    pub fn node_in_style(
        &mut self,
        reference: &str,
        style: &RefStyle,
    ) -> Result<Located, ToolError> {
        let document = self.events(|events| events.documents)?;
        let tab = self.tab_mut()?;
        tab.refs.sync(document);
        let renew = style.renew;
        let (from, bare) = session_of_ref(reference);
        let here = tab.refs.session();
        if from != here {
            let (from, here) = (from.unwrap_or(DEFAULT), here.unwrap_or(DEFAULT));
            return Err(ToolError::Reported(format!(
                "Ref {reference} is from session {from}, and this call acts in session {here}: \
                 pass \"session\": \"{from}\" to act on that element, or use a ref of session \
                 {here}; {renew}"
            )));
        }
        let number = (style.number)(bare).ok_or_else(|| {
            ToolError::Reported(format!(
                "{reference:?} is not a ref from {} (refs look like {}). {}",
                style.from, style.example, style.take
            ))
        })?;
        tab.refs.locate(number).ok_or_else(|| {
            ToolError::Reported(format!(
                "Ref {reference} not found in the current page. It is from an earlier page or was \
                 never handed out; {renew}"
            ))
        })
    }

    /// The JS object of a ref's element (in its renderer's session), checked to be still in the
    /// document.
    pub async fn element(&mut self, reference: &str) -> Result<Element, ToolError> {
        self.element_in_style(reference, &SNAPSHOT_REFS).await
    }

    /// [`Running::element`] for a ref of `style`.
    pub async fn element_in_style(
        &mut self,
        reference: &str,
        style: &RefStyle,
    ) -> Result<Element, ToolError> {
        let node = self.node_in_style(reference, style)?;
        let session = node.session.clone();
        let mut renew = style.renew.chars();
        let renew: String = renew
            .next()
            .map(|first| first.to_uppercase().chain(renew).collect())
            .unwrap_or_default();
        let gone = || {
            ToolError::Reported(format!(
                "The element of ref {reference} is no longer in the page (it was removed or \
                 replaced). {renew}"
            ))
        };
        let resolved = match self
            .cdp()
            .call(
                Some(&session),
                "DOM.resolveNode",
                json!({"backendNodeId": node.backend}),
                CALL,
            )
            .await
        {
            Ok(resolved) => resolved,
            Err(CdpError::Protocol(_)) => return Err(gone()),
            Err(err) => return Err(err.into()),
        };
        let object = resolved
            .pointer("/object/objectId")
            .and_then(Value::as_str)
            .ok_or_else(gone)?
            .to_owned();
        let element = Element { node, object };
        let connected = self
            .call_on(
                &element,
                "function() { return this.isConnected; }",
                json!([]),
            )
            .await?;
        if connected != json!(true) {
            return Err(gone());
        }
        Ok(element)
    }

    /// Gives the file input `element` the files at `files` (paths the browser reads).
    pub async fn set_input_files(
        &self,
        element: &Element,
        files: &[String],
    ) -> Result<(), ToolError> {
        self.choose_files(&element.node.session, element.node.backend, files)
            .await
    }

    /// Calls `function` with `this` = the object (of the renderer of `session`) and `arguments`
    /// (JSON values); its value.
    pub async fn call_on(
        &self,
        element: &Element,
        function: &str,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        let (session, object) = (element.node.session.as_str(), element.object.as_str());
        let arguments: Vec<Value> = arguments
            .as_array()
            .map(|list| list.iter().map(|value| json!({"value": value})).collect())
            .unwrap_or_default();
        let answer = self
            .cdp()
            .call(
                Some(session),
                "Runtime.callFunctionOn",
                json!({"objectId": object, "functionDeclaration": function, "arguments": arguments,
                       "returnByValue": true, "awaitPromise": true}),
                CALL,
            )
            .await
            .map_err(|err| self.in_frame(session, err))?;
        if let Some(details) = answer.get("exceptionDetails") {
            return Err(ToolError::Reported(format!(
                "The page threw: {}",
                details
                    .pointer("/exception/description")
                    .and_then(Value::as_str)
                    .unwrap_or("an exception")
            )));
        }
        Ok(answer
            .pointer("/result/value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// A failed call to a frame's renderer: a protocol error there means the frame went away (its
    /// session with it), which a new snapshot shows.
    pub(super) fn in_frame(&self, session: &str, err: CdpError) -> ToolError {
        let tab = self
            .tab()
            .map(|tab| tab.session.as_str())
            .unwrap_or_default();
        match err {
            CdpError::Protocol(_) if session != tab => ToolError::Reported(FRAME_GONE.into()),
            err => err.into(),
        }
    }

    /// The centre of a node's first box on screen (after scrolling it into view), in CSS pixels of
    /// the page's viewport.
    pub async fn center(&self, node: &Located, reference: &str) -> Result<(f64, f64), ToolError> {
        let cdp = self.cdp();
        // Best effort: the iframes hosting it first (outermost first), then the node in its frame; a
        // node without a layout box cannot be scrolled to, and is refused just below.
        let hosts = node
            .hosts
            .iter()
            .rev()
            .map(|(session, owner)| (session, *owner));
        for (session, backend) in hosts.chain([(&node.session, node.backend)]) {
            let _ = cdp
                .call(
                    Some(session),
                    "DOM.scrollIntoViewIfNeeded",
                    json!({"backendNodeId": backend}),
                    CALL,
                )
                .await;
        }
        let invisible = || {
            ToolError::Reported(format!(
                "The element of ref {reference} is not visible (it has no box on the page). Take a \
                 new snapshot and choose a visible element."
            ))
        };
        let quads = match cdp
            .call(
                Some(&node.session),
                "DOM.getContentQuads",
                json!({"backendNodeId": node.backend}),
                CALL,
            )
            .await
        {
            Ok(answer) => answer,
            Err(CdpError::Protocol(_)) => return Err(invisible()),
            Err(err) => return Err(err.into()),
        };
        let quads = quads["quads"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for quad in quads {
            let Some((left, top, right, bottom)) = bounds(quad) else {
                continue;
            };
            if right - left >= 1.0 && bottom - top >= 1.0 {
                let (x, y) = self.frame_offset(node).await?;
                if !node.hosts.is_empty() {
                    self.frame_drawn().await?;
                }
                return Ok((x + (left + right) / 2.0, y + (top + bottom) / 2.0));
            }
        }
        Err(invisible())
    }

    /// Waits (boundedly) for the page to draw a frame. Input for a frame in another process is sent
    /// to it by where the page last drew it: after a relayout (an element's screenshot resizes the
    /// page for its capture and back), a click sent at once can land on the page's `<iframe>`
    /// element instead.
    async fn frame_drawn(&self) -> Result<(), ToolError> {
        let session = self.tab()?.session.clone();
        self.evaluate_promise(
            &session,
            "new Promise(resolve => { requestAnimationFrame(() => requestAnimationFrame(resolve)); \
             setTimeout(resolve, 200); })",
            CALL,
        )
        .await?;
        Ok(())
    }

    /// Where the frame of a node in another process sits in the page's viewport: the corners of the
    /// content boxes of the iframes hosting it, added up ((0, 0) for a node of the tab's renderer).
    /// Box coordinates of a frame's renderer are relative to that frame's viewport.
    pub(super) async fn frame_offset(&self, node: &Located) -> Result<(f64, f64), ToolError> {
        let mut offset = (0.0, 0.0);
        for (session, owner) in &node.hosts {
            let model = self
                .cdp()
                .call(
                    Some(session),
                    "DOM.getBoxModel",
                    json!({"backendNodeId": owner}),
                    CALL,
                )
                .await
                .map_err(|err| match err {
                    CdpError::Protocol(_) => ToolError::Reported(FRAME_GONE.into()),
                    err => err.into(),
                })?;
            let (left, top, ..) = model
                .pointer("/model/content")
                .and_then(bounds)
                .ok_or_else(|| ToolError::Reported(FRAME_GONE.into()))?;
            offset = (offset.0 + left, offset.1 + top);
        }
        Ok(offset)
    }
}

/// A quad's (or box's) bounds: left, top, right, bottom; `None` unless it has its 8 numbers.
pub fn bounds(quad: &Value) -> Option<(f64, f64, f64, f64)> {
    let points: Vec<f64> = quad.as_array()?.iter().filter_map(Value::as_f64).collect();
    if points.len() != 8 {
        return None;
    }
    let xs = [points[0], points[2], points[4], points[6]];
    let ys = [points[1], points[3], points[5], points[7]];
    Some((
        xs.iter().copied().fold(f64::MAX, f64::min),
        ys.iter().copied().fold(f64::MAX, f64::min),
        xs.iter().copied().fold(f64::MIN, f64::max),
        ys.iter().copied().fold(f64::MIN, f64::max),
    ))
}
