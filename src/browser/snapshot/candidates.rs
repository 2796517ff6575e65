//! The elements an interactive view may show, read from Chromium's DOM snapshot alone: what the page
//! shows (a box, not under `aria-hidden` or `inert`) and can be acted on by its markup (a link, a
//! button, a field, an interactive role, `contenteditable`) or its looks ([`super::clickable`]). Only
//! these are then asked of the accessibility tree, one by one, instead of the whole page's tree: on a
//! page of 10 000 elements that is the difference between seconds and milliseconds.

use std::collections::HashMap;

use super::{DomSnapshot, INTERACTIVE, Looks};

/// The candidates of the snapshot's own document (its first), in document order: their backend
/// node ids. With `root`, only that node and what is in it; with `viewport` (`[x, y, width,
/// height]` in the document's CSS pixels), only those whose box meets it.
pub fn candidates(
    dom: &DomSnapshot,
    looks: &HashMap<i64, Looks>,
    root: Option<i64>,
    viewport: Option<[f64; 4]>,
) -> Vec<i64> {
    let Some(document) = dom.documents().first() else {
        return Vec::new();
    };
    let nodes = &document.nodes;
    let count = nodes.backend_node_id.len();
    // By node index, its boxes (several boxes of one node: any meeting the viewport counts).
    let mut boxes: Vec<Vec<[f64; 4]>> = vec![Vec::new(); count];
    for (_, node, rect) in document.layout.boxes() {
        if let Some(own) = boxes.get_mut(node) {
            own.push(rect);
        }
    }
    // Hidden from the accessibility tree with everything in it; in the root's subtree.
    let mut hidden = vec![false; count];
    let mut inside = vec![root.is_none(); count];
    let mut found = Vec::new();
    for index in 0..count {
        let parent = nodes.parent(index);
        let backend = nodes.backend(index);
        let attribute = |name: &str| dom.attribute(document, index, name);
        hidden[index] = parent.is_some_and(|p| hidden[p])
            || attribute("aria-hidden").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || attribute("inert").is_some();
        inside[index] = inside[index] || parent.is_some_and(|p| inside[p]) || Some(backend) == root;
        if hidden[index] || !inside[index] || !nodes.is_element(index) {
            continue;
        }
        let Some(own) = boxes.get(index).filter(|own| !own.is_empty()) else {
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
        let name = nodes
            .node_name
            .get(index)
            .map_or("", |name| dom.string(*name));
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
        let dom = DomSnapshot::parse(&dom.to_string()).unwrap();
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
