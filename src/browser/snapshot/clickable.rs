//! Which elements look clickable although their role may not say so, read from Chromium's DOM
//! snapshot ([`super::DomSnapshot`]): the snapshot shows them with a ref whatever their role; and
//! the page's boxes, for a view of what the viewport shows.

use std::collections::{HashMap, HashSet};

use super::DomSnapshot;

/// How an element shows it can be clicked although its role may not say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Looks {
    /// `cursor: pointer` starts on it (not only inherited from a clickable ancestor).
    Pointer,
    /// A click handler (`onclick` or a listener) or a `tabindex`.
    Handler,
    /// Laid out, but neither it nor anything in it has any size: nothing of it shows, and it is
    /// left out of the snapshot (a 0x0 input behind a styled label, a tracking iframe).
    Invisible,
}

/// The elements that look clickable, from the DOM snapshot (every same-origin frame's document is
/// in it): rendered, of non-zero size, and either the origin of a `cursor: pointer` (not one
/// inherited from its parent), or responding to clicks (Chromium's own `isClickable`: an `onclick`
/// or a click listener), or given a non-negative `tabindex`. `<html>` and `<body>` are left out: a
/// page that delegates its clicks to them would otherwise wrap the whole snapshot.
pub fn clickable(dom: &DomSnapshot) -> HashMap<i64, Looks> {
    let mut found = HashMap::new();
    for document in dom.documents() {
        let nodes = &document.nodes;
        let count = nodes.backend_node_id.len();
        let clicks: HashSet<i64> = nodes.is_clickable.index.iter().copied().collect();
        // By node index: (cursor, has size) of its boxes.
        let mut boxes: Vec<Option<(&str, bool)>> = vec![None; count];
        for (at, node, [_, _, width, height]) in document.layout.boxes() {
            let Some(entry) = boxes.get_mut(node) else {
                continue;
            };
            let cursor = dom.string(document.layout.cursor(at));
            // A node may have several layout boxes (a split inline); any sized one counts.
            let entry = entry.get_or_insert((cursor, false));
            entry.1 |= width > 0.0 && height > 0.0;
        }
        // Nodes with something of size in them: the sized boxes and their ancestors. Each node is
        // marked once, so the walk is linear in the document's size.
        let mut showing = vec![false; count];
        for (node, sized) in boxes.iter().enumerate() {
            let mut at = node;
            while matches!(sized, Some((_, true))) && showing.get(at) == Some(&false) {
                showing[at] = true;
                match nodes
                    .parent_index
                    .get(at)
                    .and_then(|parent| usize::try_from(*parent).ok())
                {
                    Some(parent) => at = parent,
                    None => break,
                }
            }
        }
        for (index, backend) in nodes.backend_node_id.iter().enumerate() {
            if !nodes.is_element(index) {
                continue;
            }
            let own = boxes.get(index).copied().flatten();
            if own.is_some() && showing.get(index) != Some(&true) {
                found.insert(*backend, Looks::Invisible);
                continue;
            }
            let Some((cursor, true)) = own else {
                continue;
            };
            let name = nodes
                .node_name
                .get(index)
                .map_or("", |name| dom.string(*name));
            if name.eq_ignore_ascii_case("html") || name.eq_ignore_ascii_case("body") {
                continue;
            }
            let parent_cursor = nodes
                .parent_index
                .get(index)
                .and_then(|parent| usize::try_from(*parent).ok())
                .and_then(|parent| boxes.get(parent).copied().flatten())
                .map_or("", |(cursor, _)| cursor);
            let tabbable = dom
                .attribute(document, index, "tabindex")
                .and_then(|value| value.trim().parse::<i64>().ok())
                .is_some_and(|value| value >= 0);
            let clicked = i64::try_from(index).is_ok_and(|index| clicks.contains(&index));
            let looks = if cursor == "pointer" && parent_cursor != "pointer" {
                Looks::Pointer
            } else if clicked || tabbable {
                Looks::Handler
            } else {
                continue;
            };
            found.insert(*backend, looks);
        }
    }
    found
}

/// The boxes of the elements and text of the snapshot's own document (its first; a frame's are its
/// own), by backend node id, as `[x, y, width, height]` in CSS pixels of the document; a node with
/// several boxes (a split inline) gets the box around them all.
pub fn boxes(dom: &DomSnapshot) -> HashMap<i64, [f64; 4]> {
    let Some(document) = dom.documents().first() else {
        return HashMap::new();
    };
    let mut found: HashMap<i64, [f64; 4]> = HashMap::new();
    for (_, node, [x, y, width, height]) in document.layout.boxes() {
        let Some(backend) = document.nodes.backend_node_id.get(node).copied() else {
            continue;
        };
        found
            .entry(backend)
            .and_modify(|known| {
                let right = (known[0] + known[2]).max(x + width);
                let bottom = (known[1] + known[3]).max(y + height);
                known[0] = known[0].min(x);
                known[1] = known[1].min(y);
                known[2] = right - known[0];
                known[3] = bottom - known[1];
            })
            .or_insert([x, y, width, height]);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clickable_looks_come_from_the_dom_snapshot() {
        // strings: 0 "", 1 "pointer", 2 "auto", 3 "DIV", 4 "SPAN", 5 "tabindex", 6 "0", 7 "BODY", 8 "-1"
        let dom = json!({
            "strings": ["", "pointer", "auto", "DIV", "SPAN", "tabindex", "0", "BODY", "-1"],
            "documents": [{
                "nodes": {
                    "parentIndex": [-1, 0, 1, 0, 0, 0, 0, 6, 0],
                    "nodeType": [1, 1, 1, 1, 1, 1, 1, 3, 1],
                    "nodeName": [7, 3, 4, 3, 3, 3, 3, 0, 3],
                    "backendNodeId": [10, 11, 12, 13, 14, 15, 16, 17, 18],
                    "attributes": [[], [], [], [5, 6], [], [5, 8], [], [], []],
                    "isClickable": {"index": [0, 4]}
                },
                "layout": {
                    "nodeIndex": [0, 1, 2, 3, 4, 5, 6, 7],
                    "styles": [[2], [1], [1], [2], [2], [2], [2], [2]],
                    "bounds": [[0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 0, 9],
                               [0, 0, 9, 9], [0, 0, 0, 0], [0, 0, 5, 5]]
                }
            }]
        });
        let found = clickable(&DomSnapshot::parse(&dom.to_string()).unwrap());
        // The body is left out; the span only inherits its pointer; the tabindex=-1 one does not
        // count. The zero-width clickable one shows nothing; the zero-size one holding sized text
        // shows it, and the one without a box (an option of a closed select) is not judged.
        assert_eq!(
            found,
            HashMap::from([
                (11, Looks::Pointer),
                (13, Looks::Handler),
                (14, Looks::Invisible)
            ])
        );
    }
}
