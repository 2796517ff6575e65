//! Which elements look clickable although their role may not say so, read from Chromium's DOM
//! snapshot: the snapshot shows them with a ref whatever their role.

use std::collections::HashMap;

use serde_json::Value;

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

/// A list of the DOM snapshot; a missing or malformed one reads as empty, so nothing is marked.
fn list(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// The elements that look clickable, from a `DOMSnapshot.captureSnapshot` answer taken with
/// `computedStyles: ["cursor"]` (every same-origin frame's document is in it): rendered, of non-zero
/// size, and either the origin of a `cursor: pointer` (not one inherited from its parent), or
/// responding to clicks (Chromium's own `isClickable`: an `onclick` or a click listener), or given a
/// non-negative `tabindex`. `<html>` and `<body>` are left out: a page that delegates its clicks to
/// them would otherwise wrap the whole snapshot.
pub fn clickable(dom: &Value) -> HashMap<i64, Looks> {
    let strings: Vec<&str> = dom["strings"]
        .as_array()
        .map(|list| list.iter().map(|s| s.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    let string = |index: &Value| {
        index
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| strings.get(i))
            .copied()
            .unwrap_or("")
    };
    let ints = |value: &Value| -> Vec<i64> {
        value
            .as_array()
            .map(|list| list.iter().map(|n| n.as_i64().unwrap_or(-1)).collect())
            .unwrap_or_default()
    };
    let mut found = HashMap::new();
    for document in list(&dom["documents"]) {
        let nodes = &document["nodes"];
        let parents = ints(&nodes["parentIndex"]);
        let types = ints(&nodes["nodeType"]);
        let backends = ints(&nodes["backendNodeId"]);
        let names = list(&nodes["nodeName"]);
        let attributes = list(&nodes["attributes"]);
        let clicks: std::collections::HashSet<i64> =
            ints(&nodes["isClickable"]["index"]).into_iter().collect();
        let layout = &document["layout"];
        let styles = list(&layout["styles"]);
        let bounds = list(&layout["bounds"]);
        // node index -> (cursor, has size)
        let mut boxes: HashMap<i64, (&str, bool)> = HashMap::new();
        for (at, node) in ints(&layout["nodeIndex"]).into_iter().enumerate() {
            let cursor = styles
                .get(at)
                .and_then(|style| style.get(0))
                .map(string)
                .unwrap_or("");
            let sized = bounds
                .get(at)
                .and_then(Value::as_array)
                .is_some_and(|rect| {
                    rect.get(2).and_then(Value::as_f64).unwrap_or(0.0) > 0.0
                        && rect.get(3).and_then(Value::as_f64).unwrap_or(0.0) > 0.0
                });
            // A node may have several layout boxes (a split inline); any sized one counts.
            let entry = boxes.entry(node).or_insert((cursor, false));
            entry.1 |= sized;
        }
        // Node indexes with something of size in them: the sized boxes and their ancestors. Each
        // node is marked once, so the walk is linear in the document's size.
        let mut showing: std::collections::HashSet<i64> = std::collections::HashSet::new();
        for (&node, &(_, sized)) in &boxes {
            let mut at = node;
            while sized && showing.insert(at) {
                match usize::try_from(at).ok().and_then(|i| parents.get(i)) {
                    Some(&parent) if parent >= 0 => at = parent,
                    _ => break,
                }
            }
        }
        for (index, backend) in backends.iter().enumerate() {
            let Ok(node) = i64::try_from(index) else {
                break;
            };
            if types.get(index) != Some(&1) {
                continue;
            }
            if boxes.contains_key(&node) && !showing.contains(&node) {
                found.insert(*backend, Looks::Invisible);
                continue;
            }
            let Some((cursor, true)) = boxes.get(&node).copied() else {
                continue;
            };
            let name = names.get(index).map(string).unwrap_or("");
            if name.eq_ignore_ascii_case("html") || name.eq_ignore_ascii_case("body") {
                continue;
            }
            let parent_cursor = parents
                .get(index)
                .and_then(|parent| boxes.get(parent))
                .map(|(cursor, _)| *cursor)
                .unwrap_or("");
            let tabbable = attributes
                .get(index)
                .and_then(Value::as_array)
                .is_some_and(|pairs| {
                    pairs.chunks(2).any(|pair| {
                        string(&pair[0]).eq_ignore_ascii_case("tabindex")
                            && pair
                                .get(1)
                                .map(string)
                                .and_then(|value| value.trim().parse::<i64>().ok())
                                .is_some_and(|value| value >= 0)
                    })
                });
            let looks = if cursor == "pointer" && parent_cursor != "pointer" {
                Looks::Pointer
            } else if clicks.contains(&node) || tabbable {
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
pub fn boxes(dom: &Value) -> HashMap<i64, [f64; 4]> {
    let Some(document) = list(&dom["documents"]).first() else {
        return HashMap::new();
    };
    let backends = list(&document["nodes"]["backendNodeId"]);
    let layout = &document["layout"];
    let bounds = list(&layout["bounds"]);
    let mut found: HashMap<i64, [f64; 4]> = HashMap::new();
    for (at, node) in list(&layout["nodeIndex"]).iter().enumerate() {
        let Some(backend) = node
            .as_u64()
            .and_then(|index| usize::try_from(index).ok())
            .and_then(|index| backends.get(index))
            .and_then(Value::as_i64)
        else {
            continue;
        };
        let Some(rect) = bounds.get(at).and_then(Value::as_array) else {
            continue;
        };
        let side = |index: usize| rect.get(index).and_then(Value::as_f64).unwrap_or(0.0);
        let (x, y, width, height) = (side(0), side(1), side(2), side(3));
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
        let found = clickable(&dom);
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
