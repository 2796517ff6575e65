//! The elements an interactive view may show, read from Chromium's DOM snapshot alone: what the page
//! shows (a box, not under `aria-hidden` or `inert`) and can be acted on by its markup (a link, a
//! button, a field, an interactive role, `contenteditable`) or its looks ([`super::clickable`]). Only
//! these are then asked of the accessibility tree, one by one, instead of the whole page's tree: on a
//! page of 10 000 elements that is the difference between seconds and milliseconds.

use std::collections::HashMap;

use serde_json::Value;

use super::{INTERACTIVE, Looks};

/// A list of the DOM snapshot; a missing or malformed one reads as empty.
fn list(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// The candidates of the snapshot's own document (its first), in document order: their backend
/// node ids. With `root`, only that node and what is in it; with `viewport` (`[x, y, width,
/// height]` in the document's CSS pixels), only those whose box meets it.
pub fn candidates(
    dom: &Value,
    looks: &HashMap<i64, Looks>,
    root: Option<i64>,
    viewport: Option<[f64; 4]>,
) -> Vec<i64> {
    let Some(document) = list(&dom["documents"]).first() else {
        return Vec::new();
    };
    let strings: Vec<&str> = list(&dom["strings"])
        .iter()
        .map(|s| s.as_str().unwrap_or(""))
        .collect();
    let string = |index: &Value| {
        index
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| strings.get(i))
            .copied()
            .unwrap_or("")
    };
    let nodes = &document["nodes"];
    let parents = list(&nodes["parentIndex"]);
    let types = list(&nodes["nodeType"]);
    let names = list(&nodes["nodeName"]);
    let backends = list(&nodes["backendNodeId"]);
    let attributes = list(&nodes["attributes"]);
    let layout = &document["layout"];
    let bounds = list(&layout["bounds"]);
    // node index -> its box (several boxes of one node: any meeting the viewport counts).
    let mut boxes: HashMap<usize, Vec<[f64; 4]>> = HashMap::new();
    for (at, node) in list(&layout["nodeIndex"]).iter().enumerate() {
        let Some(node) = node.as_u64().and_then(|n| usize::try_from(n).ok()) else {
            continue;
        };
        let rect = bounds.get(at).map(list).unwrap_or_default();
        let side = |i: usize| rect.get(i).and_then(Value::as_f64).unwrap_or(0.0);
        boxes
            .entry(node)
            .or_default()
            .push([side(0), side(1), side(2), side(3)]);
    }
    let count = backends.len();
    // Hidden from the accessibility tree with everything in it; in the root's subtree.
    let mut hidden = vec![false; count];
    let mut inside = vec![root.is_none(); count];
    let mut found = Vec::new();
    for index in 0..count {
        let parent = parents
            .get(index)
            .and_then(Value::as_i64)
            .and_then(|p| usize::try_from(p).ok())
            .filter(|p| *p < index);
        let backend = backends.get(index).and_then(Value::as_i64).unwrap_or(-1);
        let pairs: Vec<(&str, &str)> = attributes
            .get(index)
            .map(list)
            .unwrap_or_default()
            .chunks(2)
            .map(|pair| (string(&pair[0]), pair.get(1).map(string).unwrap_or("")))
            .collect();
        let attribute = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| *value)
        };
        hidden[index] = parent.is_some_and(|p| hidden[p])
            || attribute("aria-hidden").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || attribute("inert").is_some();
        inside[index] = inside[index] || parent.is_some_and(|p| inside[p]) || Some(backend) == root;
        if hidden[index] || !inside[index] || types.get(index).and_then(Value::as_i64) != Some(1) {
            continue;
        }
        let Some(own) = boxes.get(&index) else {
            continue;
        };
        let look = looks.get(&backend).copied();
        if look == Some(Looks::Invisible) {
            continue;
        }
        if let Some([left, top, width, height]) = viewport
            && !own.iter().any(|[x, y, w, h]| {
                *x <= left + width && *y <= top + height && x + w >= left && y + h >= top
            })
        {
            continue;
        }
        let name = names.get(index).map(string).unwrap_or("");
        let by_markup = match name.to_ascii_uppercase().as_str() {
            "A" | "AREA" => attribute("href").is_some(),
            "BUTTON" | "SELECT" | "TEXTAREA" | "SUMMARY" => true,
            "INPUT" => !attribute("type").is_some_and(|t| t.eq_ignore_ascii_case("hidden")),
            _ => false,
        };
        let by_role = attribute("role").is_some_and(|role| {
            role.split_whitespace()
                .next()
                .is_some_and(|first| INTERACTIVE.contains(&first))
        });
        let editable =
            attribute("contenteditable").is_some_and(|v| !v.eq_ignore_ascii_case("false"));
        if by_markup || by_role || editable || look.is_some() {
            found.push(backend);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn candidates_are_shown_elements_acted_on_by_markup_or_looks() {
        // strings: 0 "", 1 "BODY", 2 "A", 3 "href", 4 "#", 5 "DIV", 6 "BUTTON", 7 "aria-hidden",
        // 8 "true", 9 "INPUT", 10 "type", 11 "hidden", 12 "role", 13 "tab", 14 "SPAN"
        let dom = json!({
            "strings": ["", "BODY", "A", "href", "#", "DIV", "BUTTON", "aria-hidden", "true", "INPUT",
                        "type", "hidden", "role", "tab", "SPAN"],
            "documents": [{
                "nodes": {
                    "parentIndex": [-1, 0, 0, 0, 3, 0, 0, 0, 0, 0],
                    "nodeType": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                    "nodeName": [1, 2, 2, 5, 6, 9, 5, 14, 6, 6],
                    "backendNodeId": [10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
                    "attributes": [[], [3, 4], [], [7, 8], [], [10, 11], [12, 13], [], [], []]
                },
                "layout": {
                    "nodeIndex": [0, 1, 2, 3, 4, 5, 6, 7, 8],
                    "bounds": [[0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 9, 9],
                               [0, 0, 9, 9], [0, 0, 9, 9], [0, 0, 9, 9], [0, 900, 9, 9]]
                }
            }]
        });
        let looks = HashMap::from([(17, Looks::Pointer)]);
        // A link without href, a button under aria-hidden, a hidden input and a button without a
        // box (index 9) are not candidates.
        assert_eq!(candidates(&dom, &looks, None, None), [11, 16, 17, 18]);
        assert_eq!(
            candidates(&dom, &looks, None, Some([0.0, 0.0, 100.0, 100.0])),
            [11, 16, 17]
        );
        assert_eq!(candidates(&dom, &looks, Some(16), None), [16]);
    }
}
