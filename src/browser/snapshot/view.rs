//! What part of the page a snapshot shows: the options a tool passes ([`SnapshotOptions`]), the view
//! they resolve to for the renderer ([`View`]), and the passes that narrow the rendered tree to it
//! (interactive elements only, a depth).

use std::collections::HashMap;

use super::{Item, NodeKey};

/// What a snapshot shows and how much of it; the default is the whole page as upstream shows it
/// (and answers byte for byte as it does).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SnapshotOptions {
    /// Only elements that can be acted on (interactive roles, elements that look clickable) and the
    /// iframes holding them, without text or structure (links keep their `/url`).
    pub interactive_only: bool,
    /// Only what is within the viewport (and the containers of it).
    pub viewport_only: bool,
    /// Levels of nesting shown (1: the top level only); the children of the deepest shown are left
    /// out, and the answer names their refs.
    pub max_depth: Option<usize>,
    /// The ref of the element whose subtree alone is shown (`e12`, `f1e7`).
    pub root_ref: Option<String>,
    /// Characters of YAML at most (never more than [`super::MAX_SNAPSHOT_CHARS`]); what is cut is
    /// named in the answer, with the refs to pass as the root to read it.
    pub max_chars: Option<usize>,
    /// Answer with the changes since this tab's previous snapshot of the same view (its options
    /// but `max_chars` and `diff`) on the same page.
    pub diff: bool,
}

impl SnapshotOptions {
    /// Upstream's snapshot: the whole page, no option given.
    pub fn is_upstream(&self) -> bool {
        *self == SnapshotOptions::default()
    }

    /// What a diff compares: the same view (its options but the size and the diff itself).
    pub fn view_key(&self) -> SnapshotOptions {
        SnapshotOptions {
            max_chars: None,
            diff: false,
            ..self.clone()
        }
    }
}

/// [`SnapshotOptions`] resolved for the renderer: the root as the node it names, the viewport as
/// the page's boxes.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub interactive_only: bool,
    pub layout: Option<Layout>,
    pub max_depth: Option<usize>,
    pub root: Option<NodeKey>,
    pub max_chars: Option<usize>,
}

/// The page's boxes (by backend node id, of its own document: scope 0, frame 0) and its viewport, in
/// the same coordinates (CSS pixels of the document), as `[x, y, width, height]`.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    pub viewport: [f64; 4],
    pub boxes: HashMap<i64, [f64; 4]>,
}

impl Layout {
    /// Whether a node is off the viewport; `None` when its box is not known (no box of its own, or
    /// in a frame: frames are judged by their iframe).
    pub(super) fn outside(&self, frame: usize, scope: usize, backend: Option<i64>) -> Option<bool> {
        if frame != 0 || scope != 0 {
            return None;
        }
        let [x, y, width, height] = *self.boxes.get(&backend?)?;
        let [left, top, view_width, view_height] = self.viewport;
        Some(x > left + view_width || y > top + view_height || x + width < left || y + height < top)
    }
}

/// Keeps the elements that can be acted on (with their inline value and link target) and the iframes
/// holding some; everything else gives way to what it holds.
pub(super) fn interactive(items: Vec<Item>) -> Vec<Item> {
    let mut kept = Vec::new();
    for item in items {
        match item {
            Item::Element {
                head,
                inline,
                children,
                role,
                acts,
                actionable,
                reference,
            } if actionable || role == "iframe" => {
                let mut inner = Vec::new();
                for child in children {
                    match child {
                        Item::Text(text) if text.starts_with('\u{0}') => {
                            inner.push(Item::Text(text))
                        }
                        child => inner.extend(interactive(vec![child])),
                    }
                }
                if !actionable && inner.is_empty() {
                    continue;
                }
                kept.push(Item::Element {
                    head,
                    inline,
                    children: inner,
                    role,
                    acts,
                    actionable,
                    reference,
                });
            }
            Item::Element { children, .. } => kept.extend(interactive(children)),
            Item::Text(_) | Item::Collapsed { .. } => {}
        }
    }
    kept
}

/// Leaves out what is nested deeper than `levels` (1: the top level only), keeping a link's target
/// with its link; the refs of the elements whose children went go to `named`, the number of
/// elements that went to `elements`.
pub(super) fn cut_below(
    items: &mut [Item],
    levels: usize,
    named: &mut Vec<String>,
    elements: &mut usize,
) {
    for item in items {
        let Item::Element {
            children,
            reference,
            ..
        } = item
        else {
            continue;
        };
        if levels > 1 {
            cut_below(children, levels - 1, named, elements);
            continue;
        }
        let before = children.len();
        let mut gone = 0;
        children.retain(|child| match child {
            Item::Text(text) if text.starts_with('\u{0}') => true,
            child => {
                gone += count_elements(std::slice::from_ref(child));
                false
            }
        });
        *elements += gone;
        if children.len() < before
            && gone > 0
            && let Some(reference) = reference
        {
            named.push(reference.clone());
        }
    }
}

/// The elements (lines with a ref) in `items`, nested ones too.
fn count_elements(items: &[Item]) -> usize {
    items
        .iter()
        .map(|item| match item {
            Item::Element {
                children,
                reference,
                ..
            } => usize::from(reference.is_some()) + count_elements(children),
            _ => 0,
        })
        .sum()
}
