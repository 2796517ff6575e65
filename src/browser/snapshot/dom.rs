//! Chromium's DOM snapshot (`DOMSnapshot.captureSnapshot` taken with `computedStyles: ["cursor"]`),
//! read once into typed columns: the one reader of its string table, its node columns and its
//! layout boxes, for [`super::clickable`], [`super::boxes`] and [`super::candidates`]. Read straight
//! from the browser's text: on a page of 10 000 elements the answer is megabytes of numbers, and a
//! generic JSON value of it costs more than the browser's own work. Parts the reader does not use
//! are skipped; a missing part reads as empty, an answer that is not a DOM snapshot as none.

use serde::Deserialize;

/// A DOM snapshot as this module reads it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DomSnapshot {
    documents: Vec<Document>,
    strings: Vec<String>,
}

/// One document of the snapshot (the page's, then every same-process frame's).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Document {
    pub(super) nodes: Nodes,
    pub(super) layout: LayoutTree,
}

/// The document's nodes, one column per property, a node's index the same in each.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(super) struct Nodes {
    pub(super) parent_index: Vec<i64>,
    pub(super) node_type: Vec<i64>,
    pub(super) node_name: Vec<i64>,
    pub(super) backend_node_id: Vec<i64>,
    /// Each node's attributes as string indexes, name then value.
    pub(super) attributes: Vec<Vec<i64>>,
    pub(super) is_clickable: Rare,
}

/// A flag few nodes have: the indexes of those that do.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Rare {
    pub(super) index: Vec<i64>,
}

/// The document's layout boxes: the node each is of, its computed `cursor` and its bounds.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(super) struct LayoutTree {
    pub(super) node_index: Vec<i64>,
    pub(super) styles: Vec<First<i64>>,
    pub(super) bounds: Vec<Rect>,
}

/// The first item of a list (the one computed style asked for), the rest skipped.
#[derive(Debug, Default)]
pub(super) struct First<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = First<T>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a list")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<First<T>, A::Error> {
                let first = seq.next_element()?;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(First(first))
            }
        }
        deserializer.deserialize_seq(Visit(std::marker::PhantomData))
    }
}

/// A box's bounds, `[x, y, width, height]` (a side the list lacks reads as 0, one past them is
/// skipped), read without a list of its own.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Rect(pub(super) [f64; 4]);

impl<'de> Deserialize<'de> for Rect {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Rect;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a list of numbers")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Rect, A::Error> {
                let mut rect = [0.0; 4];
                for side in &mut rect {
                    match seq.next_element()? {
                        Some(value) => *side = value,
                        None => return Ok(Rect(rect)),
                    }
                }
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Rect(rect))
            }
        }
        deserializer.deserialize_seq(Visit)
    }
}

impl DomSnapshot {
    /// The snapshot in `text` (the browser's answer); `None` when it is not one.
    pub fn parse(text: &str) -> Option<DomSnapshot> {
        serde_json::from_str(text).ok()
    }

    pub(super) fn documents(&self) -> &[Document] {
        &self.documents
    }

    /// The string at `index` of the table; "" for an index it does not have.
    pub(super) fn string(&self, index: i64) -> &str {
        usize::try_from(index)
            .ok()
            .and_then(|index| self.strings.get(index))
            .map_or("", String::as_str)
    }

    /// The node's value of attribute `name` (matched as HTML matches names, without case).
    pub(super) fn attribute(&self, document: &Document, node: usize, name: &str) -> Option<&str> {
        document
            .nodes
            .attributes
            .get(node)?
            .chunks(2)
            .find(|pair| self.string(pair[0]).eq_ignore_ascii_case(name))
            .map(|pair| pair.get(1).map_or("", |value| self.string(*value)))
    }

    /// The number of documents (the page's and its same-process frames').
    pub fn document_count(&self) -> usize {
        self.documents.len()
    }
}

impl Nodes {
    /// The node's parent index, when it is an earlier node (as a parent always is).
    pub(super) fn parent(&self, node: usize) -> Option<usize> {
        self.parent_index
            .get(node)
            .and_then(|parent| usize::try_from(*parent).ok())
            .filter(|parent| *parent < node)
    }

    pub(super) fn is_element(&self, node: usize) -> bool {
        self.node_type.get(node) == Some(&1)
    }

    pub(super) fn backend(&self, node: usize) -> i64 {
        self.backend_node_id.get(node).copied().unwrap_or(-1)
    }
}

impl LayoutTree {
    /// The boxes in order: the box's own index (for [`LayoutTree::cursor`]), the index of the node
    /// it is of, and its bounds `[x, y, width, height]` (a side the snapshot lacks reads as 0).
    pub(super) fn boxes(&self) -> impl Iterator<Item = (usize, usize, [f64; 4])> + '_ {
        self.node_index.iter().enumerate().filter_map(|(at, node)| {
            let node = usize::try_from(*node).ok()?;
            let rect = self.bounds.get(at).copied().unwrap_or_default();
            Some((at, node, rect.0))
        })
    }

    /// The string index of the computed `cursor` of box `at`.
    pub(super) fn cursor(&self, at: usize) -> i64 {
        self.styles.get(at).and_then(|style| style.0).unwrap_or(-1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_its_columns_and_skips_what_it_does_not_use() {
        let text = r#"{"documents": [{"documentURL": 0, "nodes": {"parentIndex": [-1, 0],
            "nodeType": [1, 1], "nodeName": [1, 2], "backendNodeId": [5, 6],
            "attributes": [[], [3, 4]], "textValue": {"index": [], "value": []}},
            "layout": {"nodeIndex": [1, 0], "styles": [[0, 1], []], "bounds": [[1, 2, 3.5, 4, 9], [7]],
            "text": [-1]}, "textBoxes": {}}], "strings": ["pointer", "BODY", "A", "HREF", "/x"]}"#;
        let dom = DomSnapshot::parse(text).unwrap();
        let document = &dom.documents()[0];
        assert_eq!(dom.attribute(document, 1, "href"), Some("/x"));
        assert_eq!(dom.attribute(document, 0, "href"), None);
        assert_eq!(dom.string(-1), "");
        assert_eq!(dom.string(99), "");
        assert_eq!(document.nodes.parent(1), Some(0));
        assert_eq!(document.nodes.parent(0), None);
        assert_eq!(document.nodes.backend(7), -1);
        let boxes: Vec<_> = document.layout.boxes().collect();
        assert_eq!(
            boxes,
            [(0, 1, [1.0, 2.0, 3.5, 4.0]), (1, 0, [7.0, 0.0, 0.0, 0.0])]
        );
        assert_eq!(dom.string(document.layout.cursor(0)), "pointer");
        assert_eq!(document.layout.cursor(1), -1);
        assert!(DomSnapshot::parse("[1]").is_none());
    }
}
