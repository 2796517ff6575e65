//! Keeps the layers of `src/` pointing one way. Reads every `crate::` path of every source file (the
//! `use` lines and paths written inline), takes each top-level module's edges, and fails on an import
//! from one family into another, on an edge against the layer order, and on any cycle between modules.
//! The families are those of the family list in `src/main.rs`, so a new family is covered by its line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers under the families, lowest first: a module may import only from its own layer's
/// modules listed before it or from a lower layer. Families sit above `family`; everything not listed
/// here and not a family (`main`'s own helpers: `cli`, `limits`, `http`, `launch`) assembles the app and
/// may import anything, but nothing below it may import them.
const LAYERS: &[&[&str]] = &[&["core"], &["api", "tools"], &["family"]];

fn source_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/browser/tools/input.rs` → `browser`); `src/main.rs`
/// is `main`.
fn owner(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// `text` without its comments (line, block and doc) and without the contents of its string and
/// character literals, so that only code is read.
fn code_only(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for skipped in chars.by_ref() {
                    if skipped == '\n' {
                        code.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut depth = 1usize;
                while depth > 0 {
                    match chars.next() {
                        Some('*') if chars.peek() == Some(&'/') => {
                            chars.next();
                            depth -= 1;
                        }
                        Some('/') if chars.peek() == Some(&'*') => {
                            chars.next();
                            depth += 1;
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
            }
            '"' => {
                code.push('"');
                while let Some(inside) = chars.next() {
                    match inside {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                code.push('"');
            }
            _ => code.push(c),
        }
    }
    code
}

/// Every module named right after `crate::` in `code`, including inside `use crate::{a::x, b}`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                if let Some(name) = module_name(item) {
                    found.insert(name);
                }
            }
        } else if let Some(name) = module_name(rest) {
            found.insert(name);
        }
    }
    found
}

/// The module path of a file (`src/browser/tools/mod.rs` → `browser::tools`, `src/main.rs` → none).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let Ok(relative) = file.strip_prefix(src) else {
        return Vec::new();
    };
    let mut path: Vec<String> = relative
        .components()
        .filter_map(|part| part.as_os_str().to_str())
        .map(|part| part.trim_end_matches(".rs").to_owned())
        .collect();
    if path
        .last()
        .is_some_and(|last| last == "mod" || last == "main")
    {
        path.pop();
    }
    path
}

/// The top-level modules `super::` chains reach in `code` of a file at `path`: a chain as long as the
/// path names a module of the crate's root, as `crate::` does.
fn super_paths(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at..];
        let mut depth = 0usize;
        while let Some(after) = rest.strip_prefix("super::") {
            depth += 1;
            rest = after;
        }
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') || depth < path.len() {
            continue;
        }
        if let Some(name) = module_name(rest) {
            found.insert(name);
        }
    }
    found
}

/// The items of a `{...}` group (its text after the `{`), split at its own commas.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..at]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The lowercase identifier `text` starts with (a module; `Type`s and `self` are not).
fn module_name(text: &str) -> Option<String> {
    let name: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let first = name.chars().next()?;
    (first.is_lowercase() && name != "self").then_some(name)
}

/// The families of `src/main.rs`'s family list: its `family!(module, ...)` lines, and entries written
/// out, whose builder is `module::family`.
fn families(main: &str) -> BTreeSet<String> {
    let list = main
        .split_once("const FAMILIES")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(list, _)| list)
        .unwrap_or_default();
    let by_macro = list.split("family!(").skip(1).filter_map(module_name);
    let written_out = list.split("::family").filter_map(|before| {
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!name.is_empty()).then(|| name.chars().rev().collect())
    });
    by_macro.chain(written_out).collect()
}

fn edges() -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|file| owner(&src, file)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let (Some(from), Ok(text)) = (owner(&src, file), std::fs::read_to_string(file)) else {
            continue;
        };
        let code = code_only(&text);
        let targets = edges.entry(from.clone()).or_default();
        let reached = crate_paths(&code)
            .into_iter()
            .chain(super_paths(&code, &module_path(&src, file)));
        for to in reached {
            if to != from && modules.contains(&to) {
                targets.insert(to);
            }
        }
    }
    let main = std::fs::read_to_string(src.join("main.rs")).unwrap_or_default();
    (edges, families(&main))
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn the_family_list_is_read() {
    let (_, families) = edges();
    for family in ["shell", "filesystem", "browser", "mcp"] {
        assert!(families.contains(family), "{families:?}");
    }
}

#[test]
fn no_family_imports_another() {
    let (edges, families) = edges();
    let mut crossings = Vec::new();
    for (from, targets) in &edges {
        if !families.contains(from) {
            continue;
        }
        for to in targets.iter().filter(|to| families.contains(*to)) {
            crossings.push(format!("{from} -> {to}"));
        }
    }
    assert!(
        crossings.is_empty(),
        "families import other families (move what they share into core): {crossings:?}"
    );
}

#[test]
fn layers_point_down() {
    let (edges, families) = edges();
    let family_layer = LAYERS.len();
    let rank = |module: &str| -> Option<usize> {
        layer_of(module).or_else(|| families.contains(module).then_some(family_layer))
    };
    let mut upward = Vec::new();
    for (from, targets) in &edges {
        let Some(from_rank) = rank(from) else {
            continue;
        };
        for to in targets {
            match rank(to) {
                Some(to_rank) if to_rank < from_rank => {}
                // Inside one layer only `api` and `tools` sit together; neither imports the other.
                Some(to_rank) if to_rank == from_rank && to_rank != family_layer => {
                    upward.push(format!("{from} -> {to} (same layer)"));
                }
                Some(to_rank) if to_rank == from_rank => {}
                _ => upward.push(format!("{from} -> {to}")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layer order: {upward:?}"
    );
}

#[test]
fn no_cycle_between_modules() {
    let (edges, _) = edges();
    fn visit(
        module: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|seen| seen == module) {
            let mut cycle = path[at..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in edges.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for module in edges.keys() {
        let cycle = visit(module, &edges, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "a cycle between modules: {}",
            cycle.unwrap_or_default().join(" -> ")
        );
    }
}

#[test]
fn paths_are_read_from_use_groups_and_inline() {
    let found = crate_paths(&code_only(
        "use crate::{tools::{Tool, ToolSpec}, core::Health, Thing};\n// crate::commented\nlet x = crate::api::x(); /* crate::shell */ let s = \"crate::git\";\nmacro $crate::y",
    ));
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        vec!["api".to_owned(), "core".to_owned(), "tools".to_owned()]
    );
}

/// The architecture page, where the layer drawing and the Layout block are.
fn architecture_page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
        .unwrap_or_default()
}

/// docs/architecture.md's Layout block: its lines that start with a path.
fn documented_layout() -> Vec<String> {
    let page = architecture_page();
    let block = page
        .split_once("## Layout")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .unwrap_or_default();
    block
        .lines()
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_documented_layout_names_every_module_and_only_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = documented_layout();
    assert!(
        listed.len() > 10,
        "docs/architecture.md has no Layout block: {listed:?}"
    );
    for path in &listed {
        let on_disk = root.join(path.trim_end_matches(['/', '*']).trim_end_matches("/*.rs"));
        let pattern = path.contains('*');
        assert!(
            pattern || on_disk.exists(),
            "docs/architecture.md's Layout names {path}, which does not exist"
        );
    }
    let src = root.join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|file| owner(&src, file)).collect();
    for module in modules {
        let as_dir = format!("src/{module}/");
        let as_file = format!("src/{module}.rs");
        assert!(
            listed.contains(&as_dir) || listed.contains(&as_file),
            "docs/architecture.md's Layout has no line for src/{module}"
        );
    }
}

#[test]
fn super_chains_that_leave_the_family_are_edges() {
    let path = vec!["browser".to_owned(), "tools".to_owned()];
    let found = super_paths("use super::super::shell::x; use super::session::y;", &path);
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        vec!["shell".to_owned()]
    );
}

/// docs/architecture.md's drawing of the layers goes top-down: each layer of [`LAYERS`] starts a line
/// of it, lower layers further down.
#[test]
fn the_documented_layers_are_drawn_in_their_order() {
    let page = architecture_page();
    let block = page
        .split_once("## Layers")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .unwrap_or_default();
    // A layer's line names its modules in its first column, before the gap to its description.
    let line_of = |module: &str| {
        block.lines().position(|line| {
            !line.starts_with(' ')
                && line
                    .split("  ")
                    .next()
                    .unwrap_or_default()
                    .split([' ', ','])
                    .any(|word| word == module)
        })
    };
    let mut below = usize::MAX;
    for layer in LAYERS {
        let mut highest = usize::MAX;
        for module in *layer {
            let line = line_of(module);
            assert!(
                line.is_some(),
                "docs/architecture.md's layer drawing has no line for {module}"
            );
            let line = line.unwrap_or_default();
            assert!(
                line < below,
                "{module} is drawn below a layer that stands on it"
            );
            highest = highest.min(line);
        }
        below = highest;
    }
}
