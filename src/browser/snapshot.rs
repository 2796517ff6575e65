//! The page snapshot: Chromium's own accessibility tree (`Accessibility.getFullAXTree`, roles and names
//! as Chromium computes them) written as the YAML outline @playwright/mcp answers with, one line per
//! node: `- role "name" [states] [ref=eN]`, children nested under it, text as `- text: ...`, a link's
//! target as `- /url: ...`. Ignored (hidden, presentational) nodes are dropped and their visible
//! children lifted; the output is capped at [`MAX_SNAPSHOT_CHARS`] with a notice of what was cut.
//! An iframe's own tree (fetched per frame, as Chromium keeps it apart) is nested under its `iframe`
//! line, its refs prefixed with the frame's number in document order (`f1e3`) as @playwright/mcp
//! writes them. Backend node ids are per renderer process: a node is named by the scope (the
//! renderer's session, numbered by the caller) and its backend node id there, a [`NodeKey`].

mod candidates;
mod clickable;
mod diff;
mod dom;
mod view;
pub use candidates::candidates;
pub use clickable::{Looks, boxes, clickable};
pub use diff::{Diff, diff};
pub use dom::DomSnapshot;
pub use view::{Layout, SnapshotOptions, View};

use std::collections::HashMap;

use serde_json::Value;

/// Characters of YAML a snapshot keeps at most (the toolset contracts' `read_page` cap).
pub const MAX_SNAPSHOT_CHARS: usize = 50_000;
/// Nesting deeper than this is not descended (a hostile page cannot exhaust boxd's stack).
const MAX_DEPTH: usize = 200;
/// The states a line shows, in the order Playwright writes them.
const STATE_ORDER: [&str; 6] = [
    "checked", "disabled", "expanded", "level", "pressed", "selected",
];
/// Siblings of one role in a row shown before the rest of the run is collapsed (those holding
/// something to act on are kept).
pub const MAX_REPEATED: usize = 10;

/// Roles a model acts on: a sibling run never hides these (nor elements holding them).
pub const INTERACTIVE: &[&str] = &[
    "button",
    "checkbox",
    "combobox",
    "link",
    "listbox",
    "menuitem",
    "menuitemcheckbox",
    "menuitemradio",
    "option",
    "radio",
    "searchbox",
    "slider",
    "spinbutton",
    "switch",
    "tab",
    "textbox",
    "treeitem",
];

/// Why the accessibility tree's ignored reasons still allow showing an element that looks clickable:
/// only "nothing of interest" is overruled, never hidden, inert or aria-hidden.
fn only_uninteresting(node: &Value) -> bool {
    node.get("ignoredReasons")
        .and_then(Value::as_array)
        .is_none_or(|reasons| {
            reasons
                .iter()
                .all(|reason| reason["name"].as_str() == Some("uninteresting"))
        })
}

struct Node<'a> {
    ignored: bool,
    /// Ignored only for being uninteresting (not hidden): may be shown when it looks clickable.
    liftable: bool,
    role: &'a str,
    name: &'a str,
    value: Option<String>,
    properties: Vec<(&'a str, &'a Value)>,
    children: Vec<&'a str>,
    backend: Option<i64>,
}

fn parse(node: &Value) -> Option<(&str, Node<'_>)> {
    let id = node.get("nodeId")?.as_str()?;
    let string = |pointer: &str| node.pointer(pointer).and_then(Value::as_str);
    let value = node.pointer("/value/value").and_then(|value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    });
    let properties = node
        .get("properties")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|property| {
                    Some((
                        property.get("name")?.as_str()?,
                        property.pointer("/value/value")?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    Some((
        id,
        Node {
            ignored: node.get("ignored").and_then(Value::as_bool) == Some(true),
            liftable: only_uninteresting(node),
            role: string("/role/value").unwrap_or("generic"),
            name: string("/name/value").unwrap_or(""),
            value,
            properties,
            children: node
                .get("childIds")
                .and_then(Value::as_array)
                .map(|ids| ids.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default(),
            backend: node.get("backendDOMNodeId").and_then(Value::as_i64),
        },
    ))
}

/// One rendered node before indentation: its head (`- role "name" ...`) and children; `role` and
/// `acts` (it or something in it can be acted on) decide what a long sibling run may hide; `actionable`
/// (it itself can be acted on) and its ref are what a view keeps of it.
#[derive(Clone)]
enum Item {
    Text(String),
    Element {
        head: String,
        inline: Option<String>,
        children: Vec<Item>,
        role: String,
        acts: bool,
        actionable: bool,
        reference: Option<String>,
    },
    /// A plain notice of siblings left out (written as a YAML comment, no page content).
    Collapsed {
        count: usize,
        role: String,
    },
}

pub struct Snapshot {
    pub yaml: String,
    /// Lines left out by the cap (0 when it is whole).
    pub cut_lines: usize,
    pub total_lines: usize,
    /// Every line of the view, uncut (what a later diff compares with).
    pub lines: Vec<String>,
    /// The refs of the subtrees the cap left out whole, in document order, then how many elements
    /// (lines with a ref) it left out in all.
    pub rest: Vec<String>,
    pub rest_elements: usize,
    /// The refs of the elements whose children the depth left out, and how many elements were left
    /// out below them.
    pub deeper: Vec<String>,
    pub deeper_elements: usize,
    /// The view's root was not met in the page (its element is gone): the snapshot is empty.
    pub root_missing: bool,
}

/// Refs a cut's notice names at most (the rest are counted).
pub const MAX_NAMED_REFS: usize = 12;

/// A written line: its text (indented), its depth, and the ref it shows.
struct Line {
    text: String,
    indent: usize,
    reference: Option<String>,
}

/// One document's accessibility tree, by node id.
struct Tree<'a> {
    nodes: HashMap<&'a str, Node<'a>>,
    root: Option<&'a str>,
}

fn tree(nodes: &[Value]) -> Tree<'_> {
    Tree {
        nodes: nodes.iter().filter_map(parse).collect(),
        root: nodes
            .iter()
            .find(|node| node.get("parentId").is_none())
            .and_then(|node| node.get("nodeId")?.as_str()),
    }
}

/// A DOM node of the snapshot: the scope (renderer session; 0 the tab's own) it lives in and its
/// backend node id there.
pub type NodeKey = (usize, i64);

/// A child frame's accessibility tree and the scope its node ids belong to (its parent's for a frame
/// in the same process, its own for one in another process).
#[derive(Debug, Clone)]
pub struct Frame {
    pub scope: usize,
    pub nodes: Vec<Value>,
}

/// Where `build` is: the frame's number (0: the page) and the scope of its node ids, and whether the
/// node is off the viewport (only when the view asks for what the viewport shows).
#[derive(Debug, Clone, Copy)]
struct Place {
    frame: usize,
    scope: usize,
    outside: bool,
}

/// What `build` carries down: the child frames' trees (with their scope) by the node of their
/// `<iframe>`, the number the next frame met gets, the elements that look clickable, and the ref
/// maker (node, frame number -> ref).
struct Context<'a, 'r> {
    frames: HashMap<NodeKey, (usize, Tree<'a>)>,
    next_frame: usize,
    clickable: &'r HashMap<NodeKey, Looks>,
    reference: &'r mut dyn FnMut(NodeKey, usize) -> String,
    /// The page's boxes and viewport, when only what is in the viewport is shown.
    layout: Option<&'r Layout>,
    /// The node whose subtree alone is shown, and its items once built.
    root: Option<NodeKey>,
    found: Option<Vec<Item>>,
}

/// Renders the tree of `nodes` (the answer of `Accessibility.getFullAXTree`, scope 0), with the trees
/// of child frames (by the node of the element that hosts each) nested where they are hosted;
/// `clickable` names the elements that look clickable, which are shown with a ref whatever their
/// role; `reference` gives the ref of a DOM node in a frame (0: the page itself). The whole page,
/// as upstream shows it (see [`render_view`] for a part of it).
#[cfg(test)]
pub fn render(
    nodes: &[Value],
    frames: &HashMap<NodeKey, Frame>,
    clickable: &HashMap<NodeKey, Looks>,
    reference: &mut dyn FnMut(NodeKey, usize) -> String,
) -> Snapshot {
    render_view(nodes, frames, clickable, &View::default(), reference)
}

/// [`render`] of what `view` asks for: a subtree, the interactive elements, those in the viewport,
/// down to a depth, within a number of characters. Every node gets its ref whatever the view shows,
/// so the refs of a node are the same in every view of the page.
pub fn render_view(
    nodes: &[Value],
    frames: &HashMap<NodeKey, Frame>,
    clickable: &HashMap<NodeKey, Looks>,
    view: &View,
    reference: &mut dyn FnMut(NodeKey, usize) -> String,
) -> Snapshot {
    let main = tree(nodes);
    let mut context = Context {
        frames: frames
            .iter()
            .map(|(owner, frame)| (*owner, (frame.scope, tree(&frame.nodes))))
            .collect(),
        next_frame: 1,
        clickable,
        reference,
        layout: view.layout.as_ref(),
        root: view.root,
        found: None,
    };
    let mut items = match main.root {
        Some(root) => build(
            &main,
            &mut context,
            Place {
                frame: 0,
                scope: 0,
                outside: false,
            },
            root,
            0,
        ),
        None => Vec::new(),
    };
    let mut root_missing = false;
    if view.root.is_some() {
        match context.found.take() {
            Some(found) => items = found,
            None => {
                items = Vec::new();
                root_missing = true;
            }
        }
    }
    if view.interactive_only {
        items = view::interactive(items);
    }
    let (mut deeper, mut deeper_elements) = (Vec::new(), 0);
    if let Some(depth) = view.max_depth {
        view::cut_below(&mut items, depth, &mut deeper, &mut deeper_elements);
    }
    let mut lines = Vec::new();
    write(&items, 0, &mut lines);
    let total_lines = lines.len();
    let cap = view
        .max_chars
        .unwrap_or(MAX_SNAPSHOT_CHARS)
        .min(MAX_SNAPSHOT_CHARS);
    let mut yaml = String::new();
    let mut kept = 0;
    for line in &lines {
        if yaml.len() + line.text.len() + 1 > cap {
            break;
        }
        yaml.push_str(&line.text);
        yaml.push('\n');
        kept += 1;
    }
    let (rest, rest_elements) = rest_of(&lines, kept);
    Snapshot {
        yaml: yaml.trim_end().to_owned(),
        cut_lines: total_lines - kept,
        total_lines,
        lines: lines.into_iter().map(|line| line.text).collect(),
        rest,
        rest_elements,
        deeper,
        deeper_elements,
        root_missing,
    }
}

/// The characters (line ends included) one node of an interactive view's candidates takes at least
/// in the view: as [`render_view`] writes it alone (its lines do not depend on the other candidates),
/// with the shortest ref. `node` is the answer of `Accessibility.getPartialAXTree` for it; `looks`
/// how the DOM snapshot says it looks.
pub fn candidate_chars(node: &Value, looks: Option<Looks>) -> usize {
    let mut node = node.clone();
    node["nodeId"] = Value::from("c");
    node["parentId"] = Value::from("root");
    node["childIds"] = Value::Array(Vec::new());
    let backend = node.get("backendDOMNodeId").and_then(Value::as_i64);
    let root = serde_json::json!({"nodeId": "root", "ignored": false,
        "role": {"value": "RootWebArea"}, "childIds": ["c"]});
    let clickable: HashMap<NodeKey, Looks> = backend
        .zip(looks)
        .map(|(backend, looks)| ((0, backend), looks))
        .into_iter()
        .collect();
    let view = View {
        interactive_only: true,
        ..View::default()
    };
    let nodes = [root, node];
    render_view(&nodes, &HashMap::new(), &clickable, &view, &mut |_, _| {
        "e0".to_owned()
    })
    .lines
    .iter()
    .map(|line| line.len() + 1)
    .sum()
}

/// What the cap left out, from line `kept` on: the refs of the subtrees it left out whole (those of
/// lines not nested in another left-out line; a left-out line without a ref of its own, such as text,
/// is named by the nearest shown line holding it), and how many lines with a ref it left out.
fn rest_of(lines: &[Line], kept: usize) -> (Vec<String>, usize) {
    let mut named: Vec<String> = Vec::new();
    let mut elements = 0;
    let mut outer = usize::MAX;
    // The lines holding the current one (indent, ref), outermost first.
    let mut holders: Vec<(usize, Option<&String>)> = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        while holders
            .last()
            .is_some_and(|(indent, _)| *indent >= line.indent)
        {
            holders.pop();
        }
        let holder = holders.iter().rev().find_map(|(_, reference)| *reference);
        holders.push((line.indent, line.reference.as_ref()));
        if at < kept {
            continue;
        }
        if line.reference.is_some() {
            elements += 1;
        }
        if line.indent > outer {
            continue;
        }
        outer = line.indent;
        // Lines of one owner follow each other.
        if let Some(owner) = line.reference.as_ref().or(holder)
            && named.last() != Some(owner)
        {
            named.push(owner.clone());
        }
    }
    (named, elements)
}

/// The items of node `id` (none, its own, or its children's when it is only nesting); those of the
/// view's root are kept aside as they are built.
fn build(tree: &Tree, context: &mut Context, place: Place, id: &str, depth: usize) -> Vec<Item> {
    let items = build_node(tree, context, place, id, depth);
    if let Some(root) = context.root
        && context.found.is_none()
        && tree
            .nodes
            .get(id)
            .and_then(|node| node.backend)
            .is_some_and(|backend| (place.scope, backend) == root)
    {
        context.found = Some(items.clone());
    }
    items
}

fn build_node(
    tree: &Tree,
    context: &mut Context,
    mut place: Place,
    id: &str,
    depth: usize,
) -> Vec<Item> {
    let Some(node) = tree.nodes.get(id) else {
        return Vec::new();
    };
    if depth > MAX_DEPTH {
        return Vec::new();
    }
    let looks = node
        .backend
        .and_then(|backend| context.clickable.get(&(place.scope, backend)))
        .copied();
    if looks == Some(Looks::Invisible) {
        return Vec::new();
    }
    // Outside the viewport (when only what it shows is asked for): a node without a box of its own
    // is where its parent is.
    if let Some(layout) = context.layout
        && let Some(outside) = layout.outside(place.frame, place.scope, node.backend)
    {
        place.outside = outside;
    }
    let looks = looks.filter(|_| node.liftable && node.role != "RootWebArea");
    let flattened = looks.is_none()
        && (node.ignored
            || matches!(
                node.role,
                "RootWebArea" | "none" | "presentation" | "MenuListPopup"
            ));
    match node.role {
        _ if flattened => {}
        "InlineTextBox" | "ListMarker" | "LineBreak" => return Vec::new(),
        "StaticText" => {
            return if node.name.trim().is_empty() || place.outside {
                Vec::new()
            } else {
                vec![Item::Text(node.name.to_owned())]
            };
        }
        _ => {}
    }
    // Numbered before its children, so refs read in document order.
    let own_ref = match node.backend {
        Some(backend) if !flattened => {
            Some((context.reference)((place.scope, backend), place.frame))
        }
        _ => None,
    };
    let mut children = Vec::new();
    for child in &node.children {
        children.extend(build(tree, context, place, child, depth + 1));
    }
    if node.role == "Iframe"
        && !place.outside
        && let Some(backend) = node.backend
        && let Some((scope, inner)) = context.frames.remove(&(place.scope, backend))
        && let Some(root) = inner.root
    {
        // Removed from the map so a frame is walked once, whatever its tree claims.
        let frame = context.next_frame;
        context.next_frame += 1;
        children.extend(build(
            &inner,
            context,
            Place {
                frame,
                scope,
                outside: false,
            },
            root,
            depth + 1,
        ));
    }
    let children = collapse(merge_text(children));
    if flattened {
        return children;
    }
    // Off the viewport, only as the container of something in it.
    if place.outside && children.is_empty() {
        return children;
    }
    let role = match node.role {
        _ if node.ignored => "generic",
        "none" | "presentation" => "generic",
        "image" => "img",
        "Iframe" => "iframe",
        "LabelText" | "Section" | "Pre" | "Canvas" | "Abbr" | "Ruby" | "Mark" => "generic",
        role if role.starts_with(|c: char| c.is_ascii_uppercase()) => "generic",
        role => role,
    };
    // An unnamed wrapper around one element is only nesting: the element stands in its place; an
    // unnamed empty one (an editor's inner box, a spacer) says nothing.
    if role == "generic" && node.name.is_empty() && looks.is_none() {
        match children.as_slice() {
            [] if node.value.as_deref().unwrap_or("").is_empty() => return children,
            [Item::Element { .. }] => return children,
            _ => {}
        }
    }
    let mut head = format!("- {role}");
    let name = node.name.trim();
    if !name.is_empty() {
        head.push(' ');
        head.push_str(&quote(name));
    }
    let mut url = None;
    // Chromium lists global states before widget ones; the states are written in Playwright's
    // order, whatever order they come in.
    let mut states: [Option<String>; STATE_ORDER.len()] = Default::default();
    for (property, value) in &node.properties {
        let flag = value.as_bool() == Some(true) || value.as_str() == Some("true");
        let state = match *property {
            "checked" | "pressed" if value.as_str() == Some("mixed") => {
                Some(format!("{property}=mixed"))
            }
            "checked" | "disabled" | "expanded" | "selected" | "pressed" if flag => {
                Some((*property).to_owned())
            }
            "level" => value.as_i64().map(|level| format!("level={level}")),
            "url" if role == "link" => {
                url = value.as_str().map(str::to_owned);
                None
            }
            _ => None,
        };
        if let Some(state) = state
            && let Some(slot) = STATE_ORDER.iter().position(|name| name == property)
        {
            states[slot] = Some(state);
        }
    }
    for state in states.iter().flatten() {
        head.push_str(&format!(" [{state}]"));
    }
    if let Some(own_ref) = &own_ref {
        head.push_str(&format!(" [ref={own_ref}]"));
    }
    // Said only where the role does not already tell that it can be clicked.
    if looks == Some(Looks::Pointer) && !INTERACTIVE.contains(&role) {
        head.push_str(" [cursor=pointer]");
    }
    // Text that only repeats the name says nothing more.
    let mut children: Vec<Item> = match children.as_slice() {
        [Item::Text(text)] if text.trim() == name => Vec::new(),
        _ => children,
    };
    // A text field's inner editor only echoes its value: the value is said once, inline, as
    // @playwright/mcp says it (`- textbox "Name" [ref=e6]: hello`).
    if matches!(role, "textbox" | "searchbox" | "spinbutton")
        && let Some(value) = node.value.as_deref()
        && !value.is_empty()
        && text_of(&children).trim() == value.trim()
        && children.iter().all(|child| match child {
            Item::Text(_) => true,
            Item::Element { role, acts, .. } => role == "generic" && !acts,
            Item::Collapsed { .. } => false,
        })
    {
        children.clear();
    }
    let has_elements = children
        .iter()
        .any(|child| matches!(child, Item::Element { .. }));
    let mut inline = node
        .value
        .as_ref()
        .filter(|value| !value.is_empty() && role != "link" && !has_elements)
        .cloned();
    if inline.is_none()
        && url.is_none()
        && let [Item::Text(text)] = children.as_slice()
    {
        inline = Some(text.clone());
        children.clear();
    }
    if let Some(url) = url {
        children.push(Item::Text(format!("\u{0}/url: {url}")));
    }
    let actionable = looks.is_some() || INTERACTIVE.contains(&role);
    let acts = actionable
        || children
            .iter()
            .any(|child| matches!(child, Item::Element { acts: true, .. }));
    vec![Item::Element {
        head,
        inline,
        children,
        role: role.to_owned(),
        acts,
        actionable,
        reference: own_ref,
    }]
}

/// A run of more than [`MAX_REPEATED`] sibling elements of one role (a long list, a big table) keeps
/// its first ones and those holding something to act on; the others give way to one notice per run,
/// where the first of them was.
fn collapse(items: Vec<Item>) -> Vec<Item> {
    let mut kept = Vec::with_capacity(items.len());
    // (role of the current run, its length so far, index in `kept` of its notice)
    let mut run: Option<(String, usize, Option<usize>)> = None;
    for item in items {
        let Item::Element { role, acts, .. } = &item else {
            run = None;
            kept.push(item);
            continue;
        };
        let (role, acts) = (role.clone(), *acts);
        let length = match &mut run {
            Some((current, length, _)) if *current == role => {
                *length += 1;
                *length
            }
            _ => {
                run = Some((role.clone(), 1, None));
                1
            }
        };
        if length <= MAX_REPEATED || acts {
            kept.push(item);
            continue;
        }
        if let Some((_, _, notice)) = &mut run {
            match notice {
                Some(index) => {
                    if let Some(Item::Collapsed { count, .. }) = kept.get_mut(*index) {
                        *count += 1;
                    }
                }
                None => {
                    *notice = Some(kept.len());
                    kept.push(Item::Collapsed { count: 1, role });
                }
            }
        }
    }
    kept
}

/// The text a list of items shows, links' targets left out.
fn text_of(items: &[Item]) -> String {
    let mut text = String::new();
    for item in items {
        match item {
            Item::Text(part) if !part.starts_with('\u{0}') => text.push_str(part),
            Item::Text(_) => {}
            Item::Element {
                inline, children, ..
            } => {
                text.push_str(inline.as_deref().unwrap_or(""));
                text.push_str(&text_of(children));
            }
            Item::Collapsed { .. } => {}
        }
    }
    text
}

fn merge_text(items: Vec<Item>) -> Vec<Item> {
    let mut merged: Vec<Item> = Vec::with_capacity(items.len());
    for item in items {
        match (merged.last_mut(), item) {
            (Some(Item::Text(last)), Item::Text(text)) if !text.starts_with('\u{0}') => {
                last.push_str(&text);
            }
            (_, item) => merged.push(item),
        }
    }
    merged
}

fn write(items: &[Item], indent: usize, lines: &mut Vec<Line>) {
    let pad = "  ".repeat(indent);
    let plain = |text: String| Line {
        text,
        indent,
        reference: None,
    };
    for item in items {
        match item {
            Item::Text(text) => match text.strip_prefix('\u{0}') {
                Some(url) => lines.push(plain(format!("{pad}- {url}"))),
                None => lines.push(plain(format!("{pad}- text: {}", scalar(text.trim())))),
            },
            Item::Collapsed { count, role } => lines.push(plain(format!(
                "{pad}# {count} more {role} elements like those above are not shown (nothing in them \
                 to click or type in; a screenshot or PDF shows their content)"
            ))),
            Item::Element {
                head,
                inline,
                children,
                reference,
                ..
            } => {
                let mut line = format!("{pad}{head}");
                if let Some(inline) = inline {
                    line.push_str(": ");
                    line.push_str(&scalar(inline.trim()));
                } else if !children.is_empty() {
                    line.push(':');
                }
                lines.push(Line {
                    text: line,
                    indent,
                    reference: reference.clone(),
                });
                if inline.is_none() {
                    write(children, indent + 1, lines);
                }
            }
        }
    }
}

/// A name in double quotes, escaped as JSON (which YAML reads too).
fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("\"{text}\""))
}

/// A YAML value: plain when YAML would read it back as the same string, quoted otherwise.
fn scalar(text: &str) -> String {
    let special_start = text.starts_with([
        '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@',
        '`', ' ',
    ]);
    let ambiguous = matches!(
        text.to_ascii_lowercase().as_str(),
        "true" | "false" | "null" | "yes" | "no" | "~" | ""
    ) || text.parse::<f64>().is_ok();
    if special_start
        || ambiguous
        || text.contains(": ")
        || text.contains(" #")
        || text.ends_with(':')
        || text.chars().any(char::is_control)
    {
        quote(text)
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(id: &str, role: &str, name: &str, children: &[&str], backend: i64) -> Value {
        json!({"nodeId": id, "ignored": false, "role": {"value": role}, "name": {"value": name},
               "childIds": children, "backendDOMNodeId": backend})
    }

    #[test]
    fn the_outline_nests_names_states_refs_text_and_urls() {
        let mut root = node("1", "RootWebArea", "Test", &["2"], 1);
        root.as_object_mut().unwrap().remove("parentId");
        let mut heading = node("3", "heading", "Title", &["4"], 3);
        heading["properties"] =
            json!([{"name": "level", "value": {"type": "integer", "value": 1}}]);
        let mut link = node("5", "link", "Home", &["6"], 5);
        link["properties"] =
            json!([{"name": "url", "value": {"type": "string", "value": "http://x/home"}}]);
        let mut check = node("7", "checkbox", "Agree", &[], 7);
        // In Chromium's order: global states (disabled) before widget ones (checked).
        check["properties"] = json!([{"name": "disabled", "value": {"type": "boolean", "value": true}},
                                     {"name": "checked", "value": {"type": "tristate", "value": "true"}}]);
        let mut hidden = node("9", "button", "Hidden", &[], 9);
        hidden["ignored"] = json!(true);
        let nodes = vec![
            root,
            node("2", "main", "", &["3", "5", "7", "8", "9"], 2),
            heading,
            node("4", "StaticText", "Title", &[], 4),
            link,
            node("6", "StaticText", "Home", &[], 6),
            check,
            node("8", "paragraph", "", &["10", "11"], 8),
            hidden,
            node("10", "StaticText", "Hello: ", &[], 10),
            node("11", "StaticText", "world", &[], 11),
        ];
        let mut refs = Vec::new();
        let snapshot = render(
            &nodes,
            &HashMap::new(),
            &HashMap::new(),
            &mut |(_, backend), _| {
                refs.push(backend);
                format!("e{backend}")
            },
        );
        assert_eq!(
            snapshot.yaml,
            [
                "- main [ref=e2]:",
                "  - heading \"Title\" [level=1] [ref=e3]",
                "  - link \"Home\" [ref=e5]:",
                "    - /url: http://x/home",
                "  - checkbox \"Agree\" [checked] [disabled] [ref=e7]",
                "  - paragraph [ref=e8]: \"Hello: world\"",
            ]
            .join("\n")
        );
        assert_eq!(snapshot.cut_lines, 0);
    }

    #[test]
    fn a_child_frame_is_nested_under_its_iframe_with_its_own_ref_prefix() {
        let nodes = vec![
            node("1", "RootWebArea", "Outer", &["2", "3", "4"], 1),
            node("2", "button", "Outer", &[], 2),
            node("3", "Iframe", "Inner frame", &[], 3),
            node("4", "Iframe", "Cross-origin", &[], 4),
        ];
        let inner = vec![
            node("1", "RootWebArea", "Inner", &["2"], 10),
            node("2", "button", "Inner", &[], 11),
        ];
        // A frame in another process: its node ids (the same numbers) are of its own scope, and
        // so are the elements that look clickable in it.
        let other = vec![
            node("1", "RootWebArea", "Other", &["2", "3"], 1),
            node("2", "button", "Other", &[], 2),
            node("3", "generic", "", &[], 3),
        ];
        let frames = HashMap::from([
            (
                (0, 3),
                Frame {
                    scope: 0,
                    nodes: inner,
                },
            ),
            (
                (0, 4),
                Frame {
                    scope: 1,
                    nodes: other,
                },
            ),
        ]);
        let clickable = HashMap::from([((1, 3), Looks::Pointer)]);
        let snapshot = render(
            &nodes,
            &frames,
            &clickable,
            &mut |(scope, backend), frame| match frame {
                0 => format!("e{backend}"),
                frame => format!("f{frame}e{backend}s{scope}"),
            },
        );
        assert_eq!(
            snapshot.yaml,
            [
                "- button \"Outer\" [ref=e2]",
                "- iframe \"Inner frame\" [ref=e3]:",
                "  - button \"Inner\" [ref=f1e11s0]",
                "- iframe \"Cross-origin\" [ref=e4]:",
                "  - button \"Other\" [ref=f2e2s1]",
                "  - generic [ref=f2e3s1] [cursor=pointer]",
            ]
            .join("\n")
        );
    }

    #[test]
    fn a_text_field_says_its_value_inline_not_as_its_inner_editor() {
        let mut field = node("2", "textbox", "Name", &["3"], 2);
        field["value"] = json!({"type": "string", "value": "hello"});
        let mut rich = node("5", "textbox", "Notes", &["6"], 5);
        rich["value"] = json!({"type": "string", "value": "see"});
        let nodes = vec![
            node("1", "RootWebArea", "", &["2", "5"], 1),
            field,
            node("3", "generic", "", &["4"], 3),
            node("4", "StaticText", "hello", &[], 4),
            rich,
            node("6", "link", "see", &["7"], 6),
            node("7", "StaticText", "see", &[], 7),
        ];
        let snapshot = render(
            &nodes,
            &HashMap::new(),
            &HashMap::new(),
            &mut |(_, backend), _| format!("e{backend}"),
        );
        assert_eq!(
            snapshot.yaml,
            [
                "- textbox \"Name\" [ref=e2]: hello",
                "- textbox \"Notes\" [ref=e5]:",
                "  - link \"see\" [ref=e6]",
            ]
            .join("\n")
        );
    }

    #[test]
    fn a_huge_page_is_cut_at_the_cap() {
        let count = 5000;
        let ids: Vec<String> = (2..count + 2).map(|n| n.to_string()).collect();
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut nodes = vec![node("1", "RootWebArea", "", &id_refs, 1)];
        for id in &ids {
            nodes.push(node(
                id,
                "button",
                "a rather long button name to fill",
                &[],
                id.parse().unwrap(),
            ));
        }
        let snapshot = render(
            &nodes,
            &HashMap::new(),
            &HashMap::new(),
            &mut |(_, backend), _| format!("e{backend}"),
        );
        assert!(snapshot.yaml.len() <= MAX_SNAPSHOT_CHARS);
        assert_eq!(snapshot.total_lines, count);
        assert!(snapshot.cut_lines > 0);
    }

    #[test]
    fn long_sibling_runs_collapse_but_keep_what_can_be_acted_on() {
        let rows: Vec<String> = (0..30).map(|n| format!("r{n}")).collect();
        let mut ids: Vec<&str> = rows.iter().map(String::as_str).collect();
        ids.push("b");
        let mut nodes = vec![node("1", "RootWebArea", "", &ids, 1)];
        for (n, id) in rows.iter().enumerate() {
            let backend = 100 + n as i64;
            if n == 20 {
                nodes.push(node(id, "listitem", "", &["l"], backend));
                nodes.push(node("l", "link", "Go", &[], 999));
            } else {
                nodes.push(node(id, "listitem", &format!("Row {n}"), &[], backend));
            }
        }
        nodes.push(node("b", "button", "After", &[], 2));
        let snapshot = render(
            &nodes,
            &HashMap::new(),
            &HashMap::new(),
            &mut |(_, backend), _| format!("e{backend}"),
        );
        let lines: Vec<&str> = snapshot.yaml.lines().collect();
        assert_eq!(lines[MAX_REPEATED - 1], "- listitem \"Row 9\" [ref=e109]");
        assert!(lines[MAX_REPEATED].starts_with("# 19 more listitem elements"));
        assert_eq!(lines[MAX_REPEATED + 1], "- listitem [ref=e120]:");
        assert_eq!(lines[MAX_REPEATED + 2], "  - link \"Go\" [ref=e999]");
        assert_eq!(lines.last(), Some(&"- button \"After\" [ref=e2]"));
        assert!(!snapshot.yaml.contains("Row 10"));
    }

    /// A page of two sections, each a heading, text and a button, and a link at the end.
    fn sections() -> Vec<Value> {
        let mut link = node("9", "link", "More", &["10"], 9);
        link["properties"] =
            json!([{"name": "url", "value": {"type": "string", "value": "http://x/more"}}]);
        vec![
            node("1", "RootWebArea", "", &["2", "5", "9"], 1),
            node("2", "region", "First", &["3", "4", "11"], 2),
            node("3", "heading", "One", &[], 3),
            node("4", "button", "Go one", &[], 4),
            node("11", "StaticText", "Some text", &[], 11),
            node("5", "region", "Second", &["6", "7"], 5),
            node("6", "heading", "Two", &[], 6),
            node("7", "group", "", &["8"], 7),
            node("8", "button", "Go two", &[], 8),
            link,
            node("10", "StaticText", "More", &[], 10),
        ]
    }

    fn view_of(nodes: &[Value], view: &View) -> Snapshot {
        render_view(
            nodes,
            &HashMap::new(),
            &HashMap::new(),
            view,
            &mut |(_, backend), _| format!("e{backend}"),
        )
    }

    #[test]
    fn a_view_keeps_the_interactive_elements_a_subtree_or_levels() {
        let nodes = sections();
        let whole = view_of(&nodes, &View::default());
        assert_eq!(
            whole.yaml,
            render(
                &nodes,
                &HashMap::new(),
                &HashMap::new(),
                &mut |(_, b), _| format!("e{b}")
            )
            .yaml
        );
        let interactive = view_of(
            &nodes,
            &View {
                interactive_only: true,
                ..View::default()
            },
        );
        assert_eq!(
            interactive.yaml,
            [
                "- button \"Go one\" [ref=e4]",
                "- button \"Go two\" [ref=e8]",
                "- link \"More\" [ref=e9]:",
                "  - /url: http://x/more",
            ]
            .join("\n")
        );
        let second = view_of(
            &nodes,
            &View {
                root: Some((0, 5)),
                ..View::default()
            },
        );
        assert_eq!(
            second.yaml,
            [
                "- region \"Second\" [ref=e5]:",
                "  - heading \"Two\" [ref=e6]",
                "  - group [ref=e7]:",
                "    - button \"Go two\" [ref=e8]",
            ]
            .join("\n")
        );
        let gone = view_of(
            &nodes,
            &View {
                root: Some((0, 99)),
                ..View::default()
            },
        );
        assert!(gone.root_missing && gone.yaml.is_empty());
        let top = view_of(
            &nodes,
            &View {
                max_depth: Some(1),
                ..View::default()
            },
        );
        assert_eq!(
            top.yaml,
            [
                "- region \"First\" [ref=e2]",
                "- region \"Second\" [ref=e5]",
                "- link \"More\" [ref=e9]:",
                "  - /url: http://x/more",
            ]
            .join("\n")
        );
        assert_eq!(
            (top.deeper, top.deeper_elements),
            (vec!["e2".to_owned(), "e5".to_owned()], 5)
        );
    }

    #[test]
    fn a_candidate_alone_takes_what_it_takes_in_the_interactive_view() {
        let mut link = node("3", "link", "More", &[], 3);
        link["properties"] =
            json!([{"name": "url", "value": {"type": "string", "value": "http://x/more"}}]);
        let mut field = node("4", "textbox", "Name", &[], 4);
        field["value"] = json!({"type": "string", "value": "hello"});
        let mut ignored = node("6", "button", "Gone", &[], 6);
        ignored["ignored"] = json!(true);
        let candidates = [
            node("2", "button", "Go", &[], 2),
            link,
            field,
            node("5", "generic", "", &[], 5),
            ignored,
        ];
        let clickable = HashMap::from([((0, 5), Looks::Pointer)]);
        let mut nodes = vec![node("1", "RootWebArea", "", &["2", "3", "4", "5", "6"], 1)];
        nodes.extend(candidates.iter().cloned());
        let whole = render_view(
            &nodes,
            &HashMap::new(),
            &clickable,
            &View {
                interactive_only: true,
                ..View::default()
            },
            &mut |_, _| "e0".to_owned(),
        );
        let alone: usize = candidates
            .iter()
            .map(|node| {
                let backend = node["backendDOMNodeId"].as_i64().unwrap();
                candidate_chars(node, clickable.get(&(0, backend)).copied())
            })
            .sum();
        assert_eq!(alone, whole.yaml.len() + 1, "{}", whole.yaml);
        assert_eq!(whole.lines.len(), 5, "{}", whole.yaml);
    }

    #[test]
    fn a_cut_names_the_refs_of_what_it_left_out() {
        let nodes = sections();
        let cut = view_of(
            &nodes,
            &View {
                max_chars: Some(60),
                ..View::default()
            },
        );
        // `- region "First" [ref=e2]:` and its heading fit; its button, its text, the second
        // region and the link do not.
        assert_eq!(cut.yaml.lines().count(), 2, "{}", cut.yaml);
        assert_eq!(cut.rest, ["e4", "e2", "e5", "e9"]);
        assert_eq!(cut.rest_elements, 6);
        assert_eq!(cut.total_lines, cut.lines.len());
    }

    #[test]
    fn a_view_of_the_viewport_keeps_what_is_in_it_and_what_holds_it() {
        let nodes = sections();
        let boxes = HashMap::from([
            (2, [0.0, 0.0, 800.0, 400.0]),
            (3, [0.0, 0.0, 800.0, 40.0]),
            (4, [0.0, 50.0, 80.0, 20.0]),
            (11, [0.0, 80.0, 80.0, 20.0]),
            // The second region starts below the viewport; a fixed button of it shows.
            (5, [0.0, 2000.0, 800.0, 400.0]),
            (6, [0.0, 2000.0, 800.0, 40.0]),
            (8, [10.0, 10.0, 80.0, 20.0]),
            (9, [0.0, 3000.0, 80.0, 20.0]),
            (10, [0.0, 3000.0, 80.0, 20.0]),
        ]);
        let visible = view_of(
            &nodes,
            &View {
                layout: Some(Layout {
                    viewport: [0.0, 0.0, 1024.0, 768.0],
                    boxes,
                }),
                ..View::default()
            },
        );
        assert_eq!(
            visible.yaml,
            [
                "- region \"First\" [ref=e2]:",
                "  - heading \"One\" [ref=e3]",
                "  - button \"Go one\" [ref=e4]",
                "  - text: Some text",
                "- region \"Second\" [ref=e5]:",
                "  - group [ref=e7]:",
                "    - button \"Go two\" [ref=e8]",
            ]
            .join("\n")
        );
    }
}
