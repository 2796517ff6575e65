//! An interactive view's candidates found by the page itself ([`FINDER`], in an isolated world of
//! boxd's): the same elements, in the same order and with the same looks, as `snapshot::candidates`
//! reads from Chromium's DOM snapshot, for a fraction of the renderer's time (the DOM snapshot of a
//! page of 10 000 elements takes it 110–215 ms; this walk about a third of that). Only the
//! candidates the size holds are then handed over, as remote objects, to be asked of the
//! accessibility tree.
//!
//! Where the page's scripts cannot see all the snapshot sees, the finder declines and the DOM
//! snapshot is read: a closed shadow root (checked of each element that may host one), more click
//! listeners than are worth resolving, a dialog that holds the page's scripts, a tree too deep for a
//! script's stack.

use serde_json::{Value, json};

use super::super::cdp::CdpError;
use super::super::snapshot::{INTERACTIVE, Looks};
use super::{CALL, Running, SLOW_CALL};

use crate::tools::ToolError;

/// The walk the page does (see its opening comment).
const FINDER: &str = include_str!("finder.js");
/// The isolated world the finder runs in: one per document, created on the first snapshot that
/// needs it.
const WORLD: &str = "boxd-finder";
/// The finding a snapshot's finder makes is numbered (its objects' group, its state in the world),
/// so that letting go of one never touches the next.
static FINDINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The finder's state in its world, `globalThis.__boxdFinder` (`{id, found, suspects, walk}`), read
/// by a function of the finding's id and arguments: `state` names it, nothing when it is another
/// finding's.
fn in_finding(body: &str) -> String {
    format!(
        "function(id, ...args) {{ const state = globalThis.__boxdFinder; \
         if (!state || state.id !== id) return undefined; return ({body})(state, ...args); }}"
    )
}
/// Events whose listeners make Chromium's `isClickable` of the DOM snapshot (`Node::
/// WillRespondToMouseClickEvents`).
const CLICK_EVENTS: [&str; 4] = ["click", "mousedown", "mouseup", "DOMActivate"];
/// Elements with click listeners resolved for the finder at most; past it, the DOM snapshot is read.
const MAX_CLICKED: usize = 2000;
/// Elements that may host a closed shadow root (a custom element without an open one) checked one
/// by one at most; past it, the DOM snapshot is read.
const MAX_SUSPECTS: usize = 32;

/// Why the finder declined.
#[derive(Debug)]
pub(super) enum Declined {
    /// The page holds what its scripts cannot see (see the module's comment).
    Page,
    /// The world is gone (its document was replaced without a navigation boxd saw).
    World,
}

/// What the finder found so far: the candidates wait in its world, in document order, and so does
/// the walk, to go on when more are wanted.
pub(super) struct Found {
    world: i64,
    id: u64,
    /// How each candidate found looks (`None`: by its markup or role alone).
    looks: Vec<Option<Looks>>,
    /// The walk reached the end of the page (or the root's part): every candidate is found.
    pub done: bool,
    /// Elements walked that may host a closed shadow root, checked so far.
    suspects: u64,
}

impl Found {
    /// The candidates found so far.
    pub fn count(&self) -> usize {
        self.looks.len()
    }

    /// How candidate `index` looks (`None`: by its markup or role alone).
    pub fn looks(&self, index: usize) -> Option<Looks> {
        self.looks.get(index).copied().flatten()
    }

    /// Takes in a step of the walk: the looks of the candidates it found, whether it is done, and
    /// how many suspects there are in all; `None` when the answer is not the walk's.
    fn step(&mut self, value: &Value) -> Option<u64> {
        let looks = value["looks"].as_str()?;
        self.looks.extend(looks.chars().map(|look| match look {
            'p' => Some(Looks::Pointer),
            'h' => Some(Looks::Handler),
            _ => None,
        }));
        self.done = value["done"].as_bool()?;
        value["suspects"].as_u64()
    }
}

/// The group of finding `id`'s remote objects, released together when its snapshot is written.
fn group(id: u64) -> String {
    format!("boxd-finder-{id}")
}

impl Running {
    /// The first `want` candidates (all there are, if fewer) of the current page's interactive view
    /// within `root` (a backend node id) and `viewport`, found in `world`; or why the finder
    /// declines (see the module's comment).
    pub(super) async fn find_candidates(
        &self,
        session: &str,
        world: i64,
        want: usize,
        root: Option<i64>,
        viewport: Option<[f64; 4]>,
    ) -> Result<Result<Found, Declined>, ToolError> {
        let blocked = self.events(|events| events.dialog.is_some() || events.crashed)?;
        if blocked {
            return Ok(Err(Declined::Page));
        }
        let cdp = self.cdp();
        let id = FINDINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let objects_group = group(id);
        // The document as the page's own world holds it: its listeners are asked of it there (asked
        // through the finder's world's wrapper, the walk's traversal left Chromium's renderer to
        // crash on a later call, on some pages). Whether the finder's world is still there, the
        // walk's call says.
        let document = cdp
            .call(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": "document", "objectGroup": objects_group}),
                CALL,
            )
            .await;
        let document = match document {
            Ok(answer) => match answer.pointer("/result/objectId").and_then(Value::as_str) {
                Some(document) => document.to_owned(),
                None => return Ok(Err(Declined::Page)),
            },
            Err(CdpError::Protocol(_)) => return Ok(Err(Declined::Page)),
            Err(err) => return Err(err.into()),
        };
        let listeners = match cdp
            .call(
                Some(session),
                "DOMDebugger.getEventListeners",
                json!({"objectId": document, "depth": -1, "pierce": true}),
                CALL,
            )
            .await
        {
            Ok(answer) => answer,
            Err(CdpError::Protocol(_)) => return Ok(Err(Declined::Page)),
            Err(err) => return Err(err.into()),
        };
        let mut clicked: Vec<i64> = listeners["listeners"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|listener| {
                listener["type"]
                    .as_str()
                    .is_some_and(|kind| CLICK_EVENTS.contains(&kind))
            })
            .filter_map(|listener| listener["backendNodeId"].as_i64())
            .collect();
        clicked.sort_unstable();
        clicked.dedup();
        if clicked.len() > MAX_CLICKED {
            return Ok(Err(Declined::Page));
        }
        let resolving = clicked.iter().copied().chain(root);
        let resolved = futures_util::future::join_all(resolving.map(|backend| {
            cdp.call(
                Some(session),
                "DOM.resolveNode",
                json!({"backendNodeId": backend, "executionContextId": world,
                       "objectGroup": objects_group}),
                CALL,
            )
        }))
        .await;
        let mut objects = Vec::with_capacity(resolved.len());
        for answer in resolved {
            match answer {
                Ok(answer) => objects.push(answer.pointer("/object/objectId").cloned()),
                // Gone meanwhile: a listener's element is no candidate then, a root is gone.
                Err(CdpError::Protocol(_)) => objects.push(None),
                Err(err) => return Err(err.into()),
            }
        }
        let root_object = match root {
            Some(_) => match objects.pop().flatten() {
                Some(object) => json!({"objectId": object}),
                None => return Ok(Err(Declined::Page)),
            },
            None => json!({"value": null}),
        };
        let mut arguments = vec![
            json!({"value": id}),
            json!({"value": want}),
            root_object,
            json!({"value": viewport}),
            json!({"value": INTERACTIVE}),
        ];
        arguments.extend(
            objects
                .into_iter()
                .flatten()
                .map(|object| json!({"objectId": object})),
        );
        let answer = match cdp
            .call(
                Some(session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": FINDER, "executionContextId": world,
                       "arguments": arguments, "returnByValue": true}),
                SLOW_CALL,
            )
            .await
        {
            Ok(answer) => answer,
            // The world went with its document ("Cannot find context").
            Err(CdpError::Protocol(_)) => return Ok(Err(Declined::World)),
            Err(err) => return Err(err.into()),
        };
        let mut found = Found {
            world,
            id,
            looks: Vec::new(),
            done: false,
            suspects: 0,
        };
        Ok(match self.took_step(session, &mut found, &answer).await? {
            Ok(()) => Ok(found),
            Err(declined) => Err(declined),
        })
    }

    /// Walks on until `want` candidates are found (or the walk is done).
    pub(super) async fn find_more(
        &self,
        session: &str,
        found: &mut Found,
        want: usize,
    ) -> Result<Result<(), Declined>, ToolError> {
        if found.done || found.count() >= want {
            return Ok(Ok(()));
        }
        let answer = match self
            .cdp()
            .call(
                Some(session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": in_finding("(state, want) => state.walk(want)"),
                       "executionContextId": found.world,
                       "arguments": [{"value": found.id}, {"value": want}],
                       "returnByValue": true}),
                SLOW_CALL,
            )
            .await
        {
            Ok(answer) => answer,
            Err(CdpError::Protocol(_)) => return Ok(Err(Declined::Page)),
            Err(err) => return Err(err.into()),
        };
        self.took_step(session, found, &answer).await
    }

    /// Takes in a step of the walk (its call's answer), and checks the suspects it met.
    async fn took_step(
        &self,
        session: &str,
        found: &mut Found,
        answer: &Value,
    ) -> Result<Result<(), Declined>, ToolError> {
        if let Some(details) = answer.get("exceptionDetails") {
            // A page that broke what the walk calls.
            tracing::debug!(?details, "the candidate finder declined");
            return Ok(Err(Declined::Page));
        }
        let Some(suspects) = found.step(&answer["result"]["value"]) else {
            return Ok(Err(Declined::Page));
        };
        if suspects > found.suspects {
            if !self.no_closed_roots(session, found, suspects).await? {
                return Ok(Err(Declined::Page));
            }
            found.suspects = suspects;
        }
        Ok(Ok(()))
    }

    /// The remote objects of candidates `from..to` (fewer when the page changed meanwhile).
    pub(super) async fn candidate_objects(
        &self,
        session: &str,
        found: &Found,
        from: usize,
        to: usize,
    ) -> Result<Vec<String>, ToolError> {
        self.listed_objects(
            session,
            found.world,
            found.id,
            "(state, from, to) => state.found.slice(from, to)",
            json!([{"value": from}, {"value": to}]),
        )
        .await
    }

    /// The backend node ids of `objects` (one gone meanwhile is left out).
    pub(super) async fn backend_ids(
        &self,
        session: &str,
        objects: &[String],
    ) -> Result<Vec<i64>, ToolError> {
        Ok(self
            .described(session, objects)
            .await?
            .iter()
            .filter_map(|node| node["backendNodeId"].as_i64())
            .collect())
    }

    /// The nodes `objects` are (`DOM.describeNode`), asked at once; one gone meanwhile is left out.
    async fn described(&self, session: &str, objects: &[String]) -> Result<Vec<Value>, ToolError> {
        let answers = futures_util::future::join_all(objects.iter().map(|object| {
            self.cdp().call(
                Some(session),
                "DOM.describeNode",
                json!({"objectId": object}),
                CALL,
            )
        }))
        .await;
        let mut nodes = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer {
                Ok(mut answer) => nodes.push(answer["node"].take()),
                Err(CdpError::Protocol(_)) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(nodes)
    }

    /// Lets go of a finding's objects: the list in the page's world and their remote handles. Not
    /// waited for (nothing answers with it).
    pub(super) fn release_found(&self, session: &str, found: &Found) {
        let cdp = self.cdp().clone();
        let session = session.to_owned();
        let (world, id) = (found.world, found.id);
        tokio::spawn(async move {
            let calls = [
                (
                    "Runtime.callFunctionOn",
                    json!({"functionDeclaration":
                               in_finding("() => { delete globalThis.__boxdFinder; }"),
                           "executionContextId": world, "arguments": [{"value": id}]}),
                ),
                (
                    "Runtime.releaseObjectGroup",
                    json!({"objectGroup": group(id)}),
                ),
            ];
            for (method, params) in calls {
                // A page gone meanwhile took them along.
                let _ = cdp.call(Some(&session), method, params, CALL).await;
            }
        });
    }

    /// Whether none of the suspects `from..to` the finder kept hosts a closed shadow root (which its
    /// walk cannot enter and the DOM snapshot does).
    async fn no_closed_roots(
        &self,
        session: &str,
        found: &Found,
        to: u64,
    ) -> Result<bool, ToolError> {
        if to > MAX_SUSPECTS as u64 {
            return Ok(false);
        }
        let suspects = self
            .listed_objects(
                session,
                found.world,
                found.id,
                "(state, from, to) => state.suspects.slice(from, to)",
                json!([{"value": found.suspects}, {"value": to}]),
            )
            .await?;
        Ok(!self
            .described(session, &suspects)
            .await?
            .iter()
            .any(|node| {
                node["shadowRoots"]
                    .as_array()
                    .is_some_and(|roots| !roots.is_empty())
            }))
    }

    /// The remote objects of the array `function` (see [`in_finding`]) returns in the finder's
    /// world from finding `id`'s state and `arguments` (call arguments), in order.
    async fn listed_objects(
        &self,
        session: &str,
        world: i64,
        id: u64,
        function: &str,
        arguments: Value,
    ) -> Result<Vec<String>, ToolError> {
        let cdp = self.cdp();
        let mut all = vec![json!({"value": id})];
        all.extend(arguments.as_array().cloned().unwrap_or_default());
        let list = cdp
            .call(
                Some(session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": in_finding(function), "executionContextId": world,
                       "arguments": all, "objectGroup": group(id)}),
                CALL,
            )
            .await?;
        let Some(list) = list.pointer("/result/objectId").and_then(Value::as_str) else {
            return Ok(Vec::new());
        };
        let properties = cdp
            .call(
                Some(session),
                "Runtime.getProperties",
                json!({"objectId": list, "ownProperties": true}),
                CALL,
            )
            .await?;
        let mut items: Vec<(usize, String)> = properties["result"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|property| {
                let index = property["name"].as_str()?.parse().ok()?;
                let object = property.pointer("/value/objectId")?.as_str()?;
                Some((index, object.to_owned()))
            })
            .collect();
        items.sort_unstable_by_key(|(index, _)| *index);
        Ok(items.into_iter().map(|(_, object)| object).collect())
    }

    /// The finder's isolated world in the tab's current document: created once per document (a
    /// world lives as long as its document), `None` when the tab has no main frame yet.
    pub(super) async fn finder_world(&mut self, session: &str) -> Result<Option<i64>, ToolError> {
        let (document, frame) =
            self.events(|events| (events.documents, events.main_frame.clone()))?;
        if let Some((of, world)) = self.tab()?.finder_world
            && of == document
        {
            return Ok(Some(world));
        }
        let Some(frame) = frame else {
            return Ok(None);
        };
        let world = match self
            .cdp()
            .call(
                Some(session),
                "Page.createIsolatedWorld",
                json!({"frameId": frame, "worldName": WORLD}),
                CALL,
            )
            .await
        {
            Ok(answer) => answer["executionContextId"].as_i64(),
            Err(CdpError::Protocol(_)) => None,
            Err(err) => return Err(err.into()),
        };
        if let Some(world) = world {
            self.tab_mut()?.finder_world = Some((document, world));
        }
        Ok(world)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_of_the_walk_adds_its_candidates_looks_and_says_whether_it_is_done() {
        let mut found = Found {
            world: 1,
            id: 0,
            looks: Vec::new(),
            done: false,
            suspects: 0,
        };
        assert_eq!(
            found.step(&json!({"looks": "p-h", "done": false, "suspects": 0})),
            Some(0)
        );
        assert_eq!(
            found.step(&json!({"looks": "-", "done": true, "suspects": 2})),
            Some(2)
        );
        assert_eq!(found.count(), 4);
        assert!(found.done);
        assert_eq!(found.looks(0), Some(Looks::Pointer));
        assert_eq!(found.looks(1), None);
        assert_eq!(found.looks(2), Some(Looks::Handler));
        assert_eq!(found.looks(9), None);
        // What is not the walk's answer (a finding gone meanwhile answers nothing).
        assert_eq!(found.step(&Value::Null), None);
    }

    #[test]
    fn a_function_of_the_finding_reads_only_its_own_state() {
        let function = in_finding("(state, from, to) => state.found.slice(from, to)");
        assert!(function.starts_with("function(id, ...args)"));
        assert!(function.contains("state.id !== id) return undefined"));
        assert_eq!(group(7), "boxd-finder-7");
    }
}
