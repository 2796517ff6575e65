//! The tab's ref table: which node each `eN`/`fMeN` of a snapshot names, and in which renderer.

use std::collections::HashMap;

use super::super::snapshot::{NodeKey, SnapshotOptions};

/// Refs kept per tab before the oldest document's are forgotten (a page that churns nodes forever
/// would otherwise grow the map without bound).
const MAX_REFS: usize = 200_000;
/// Views whose latest snapshot lines a tab keeps for a diff (the oldest is forgotten first).
const MAX_BASELINES: usize = 4;
/// Bytes of snapshot lines a tab keeps for diffs; a snapshot larger alone is not kept (a diff of its
/// view then shows the whole snapshot again).
const MAX_BASELINE_BYTES: usize = 8 * 1024 * 1024;
/// Renderer sessions refs are kept for before all of them are forgotten (a page whose frames keep
/// moving to new processes would otherwise grow the list without bound).
const MAX_SCOPES: usize = 1024;

/// A renderer refs were handed out in: the session reaching it and, for a frame in another process,
/// the `<iframe>` hosting it (the scope of its parent's renderer and the iframe's backend node id
/// there).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Scope {
    session: String,
    host: Option<NodeKey>,
}

/// The tab's refs: each number names a node by its scope (an index of `scopes`) and its backend node
/// id there, since backend node ids are per renderer process.
#[derive(Default)]
pub struct Refs {
    by_node: HashMap<NodeKey, u64>,
    by_ref: HashMap<u64, NodeKey>,
    scopes: Vec<Scope>,
    next: u64,
    document: u64,
    /// The lines of the latest snapshot of each view on this document, what a diff compares with,
    /// oldest first.
    baselines: Vec<(SnapshotOptions, Vec<String>)>,
    /// The session of the tab when it is not the default one: its refs are written with it
    /// (`s1_e7`), so a ref used in another session than its own is refused, never taken for
    /// another element there.
    session: Option<String>,
}

/// The session a written ref names (`s1` of `s1_e7` or `s1_ref_7`; `None`: the default session,
/// whose refs carry none) and the ref without it (and without the brackets a toolset line shows
/// it in).
pub fn session_of_ref(reference: &str) -> (Option<&str>, &str) {
    let trimmed = reference.trim();
    let trimmed = trimmed
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(trimmed);
    if let Some((session, rest)) = trimmed.split_once('_')
        && let Some(digits) = session.strip_prefix('s')
        && !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
    {
        return (Some(session), rest);
    }
    (None, trimmed)
}

/// A ref's DOM node, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The session of the renderer holding it: the tab's own for the page and its same-process
    /// frames, a frame's own for a frame in another process.
    pub(super) session: String,
    pub(super) backend: i64,
    /// The `<iframe>` elements hosting its frame when that runs in another process, innermost
    /// first, each as (the session of its renderer, its backend node id there).
    pub(super) hosts: Vec<(String, i64)>,
}

/// A ref's element, found live in its page: what tools act on, without the protocol's ids.
pub struct Element {
    pub(super) node: Located,
    /// The protocol's handle of the element in its renderer.
    pub(super) object: String,
}

impl Element {
    pub fn node(&self) -> &Located {
        &self.node
    }
}

impl Refs {
    /// The refs of a tab of session `name`.
    pub(super) fn for_session(name: &str) -> Refs {
        Refs {
            session: (name != super::DEFAULT).then(|| name.to_owned()),
            ..Refs::default()
        }
    }

    /// The session its refs are written with (`None`: the default session).
    pub(super) fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Refs name nodes of one document: a new document voids them (its node ids may repeat).
    /// Numbers keep growing, so an old ref can never name a node of the new document.
    pub(super) fn sync(&mut self, document: u64) {
        if self.document != document
            || self.by_node.len() > MAX_REFS
            || self.scopes.len() > MAX_SCOPES
        {
            self.by_node.clear();
            self.by_ref.clear();
            self.scopes.clear();
            self.baselines.clear();
            self.document = document;
        }
    }

    /// The lines of the latest snapshot of `view` on this document.
    pub(super) fn baseline(&self, view: &SnapshotOptions) -> Option<&[String]> {
        self.baselines
            .iter()
            .find(|(known, _)| known == view)
            .map(|(_, lines)| lines.as_slice())
    }

    /// Keeps `lines` as the latest snapshot of `view`, within [`MAX_BASELINES`] views and
    /// [`MAX_BASELINE_BYTES`]; a snapshot that is not `whole` (only a part of the view was asked
    /// for) leaves none.
    pub(super) fn remember(&mut self, view: SnapshotOptions, lines: Vec<String>, whole: bool) {
        self.baselines.retain(|(known, _)| *known != view);
        if !whole {
            return;
        }
        let bytes = |lines: &[String]| lines.iter().map(String::len).sum::<usize>();
        let size = bytes(&lines);
        if size > MAX_BASELINE_BYTES {
            return;
        }
        let mut held: usize = self.baselines.iter().map(|(_, kept)| bytes(kept)).sum();
        while !self.baselines.is_empty()
            && (self.baselines.len() >= MAX_BASELINES || held + size > MAX_BASELINE_BYTES)
        {
            let (_, dropped) = self.baselines.remove(0);
            held = held.saturating_sub(bytes(&dropped));
        }
        self.baselines.push((view, lines));
    }

    /// The scope of the renderer reached by `session`, added (hosted by `host`) if new. A session
    /// reaches one frame's renderer for its whole life, so its host never changes.
    pub(super) fn scope(&mut self, session: &str, host: Option<NodeKey>) -> usize {
        if let Some(known) = self
            .scopes
            .iter()
            .position(|scope| scope.session == session)
        {
            return known;
        }
        self.scopes.push(Scope {
            session: session.to_owned(),
            host,
        });
        self.scopes.len() - 1
    }

    /// Numbers are shared by all frames of the tab, so the `fN` prefix only tells the reader where a
    /// node is.
    pub(super) fn assign(&mut self, node: NodeKey, frame: usize) -> String {
        let number = match self.by_node.get(&node) {
            Some(number) => *number,
            None => {
                self.next += 1;
                self.by_node.insert(node, self.next);
                self.by_ref.insert(self.next, node);
                self.next
            }
        };
        let session = match &self.session {
            Some(session) => format!("{session}_"),
            None => String::new(),
        };
        match frame {
            0 => format!("{session}e{number}"),
            frame => format!("{session}f{frame}e{number}"),
        }
    }

    /// The node ref number `number` names, with the iframes hosting its renderer.
    pub(super) fn locate(&self, number: u64) -> Option<Located> {
        let (scope, backend) = *self.by_ref.get(&number)?;
        let own = self.scopes.get(scope)?;
        let mut hosts = Vec::new();
        let mut host = own.host;
        while let Some((parent, owner)) = host {
            // Hosts point to earlier scopes; the bound only guards against a malformed chain.
            if hosts.len() >= self.scopes.len() {
                return None;
            }
            let parent = self.scopes.get(parent)?;
            hosts.push((parent.session.clone(), owner));
            host = parent.host;
        }
        Some(Located {
            session: own.session.clone(),
            backend,
            hosts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_stable_within_a_document_and_never_reused_after() {
        let mut refs = Refs::default();
        refs.sync(1);
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 40), 0), "e1");
        assert_eq!(refs.assign((page, 41), 2), "f2e2");
        assert_eq!(refs.assign((page, 40), 0), "e1");
        refs.sync(2);
        assert!(refs.by_ref.is_empty());
        assert!(refs.scopes.is_empty());
        // The same node id in the new document gets a new number: e1 stays void.
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 40), 0), "e3");
        assert_eq!(refs.locate(1), None);
    }

    #[test]
    fn a_session_s_refs_carry_its_name() {
        let mut refs = Refs::for_session("s3");
        refs.sync(1);
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 40), 0), "s3_e1");
        assert_eq!(refs.assign((page, 41), 2), "s3_f2e2");
        assert_eq!(session_of_ref("s3_f2e2"), (Some("s3"), "f2e2"));
        assert_eq!(session_of_ref(" s12_ref_7"), (Some("s12"), "ref_7"));
        assert_eq!(session_of_ref("ref_7"), (None, "ref_7"));
        assert_eq!(session_of_ref("e7"), (None, "e7"));
        assert_eq!(session_of_ref("s_e7"), (None, "s_e7"));
        let mut default = Refs::for_session(super::super::DEFAULT);
        default.sync(1);
        let page = default.scope("TAB", None);
        assert_eq!(default.assign((page, 40), 0), "e1");
    }

    #[test]
    fn refs_of_frames_in_other_processes_name_their_session_and_hosting_iframes() {
        let mut refs = Refs::default();
        refs.sync(1);
        let page = refs.scope("TAB", None);
        // A frame in another process hosted by the page's <iframe> 12, and one in it hosted by 5.
        let frame = refs.scope("FRAME", Some((page, 12)));
        let nested = refs.scope("NESTED", Some((frame, 5)));
        assert_eq!(refs.scope("FRAME", Some((page, 99))), frame);
        // Backend node ids repeat across processes: the same id is three different nodes.
        assert_eq!(refs.assign((page, 7), 0), "e1");
        assert_eq!(refs.assign((frame, 7), 1), "f1e2");
        assert_eq!(refs.assign((nested, 7), 2), "f2e3");
        // Stable across snapshots of the same document.
        assert_eq!(refs.assign((frame, 7), 1), "f1e2");
        assert_eq!(
            refs.locate(1),
            Some(Located {
                session: "TAB".into(),
                backend: 7,
                hosts: vec![]
            })
        );
        assert_eq!(
            refs.locate(2),
            Some(Located {
                session: "FRAME".into(),
                backend: 7,
                hosts: vec![("TAB".into(), 12)]
            })
        );
        assert_eq!(
            refs.locate(3),
            Some(Located {
                session: "NESTED".into(),
                backend: 7,
                hosts: vec![("FRAME".into(), 5), ("TAB".into(), 12)]
            })
        );
        // A new document voids them all; numbers keep growing.
        refs.sync(2);
        assert_eq!(refs.locate(2), None);
        let page = refs.scope("TAB", None);
        assert_eq!(refs.assign((page, 7), 0), "e4");
    }
}
