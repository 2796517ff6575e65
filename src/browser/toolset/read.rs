//! Reading the page: read_page (the accessibility tree with `[ref_N]` refs), find (its elements that
//! match a description), get_page_text, read_console and read_network (what came since the last
//! read), javascript_exec.

use serde_json::Value;

use super::super::session::{SLOW_CALL, SNAPSHOT_REFS, session_of_ref};
use super::super::snapshot::SnapshotOptions;
use super::input::{PageFilter, ReadPage};
use super::{Act, Outcome, TOOLSET_REFS};
use crate::tools::ToolError;

/// Characters `read_page`, `find`, `get_page_text`, `read_console`, `read_network` and
/// `javascript_exec` answer at most (the SDK's
/// `read_page` cap).
pub const MAX_READ_CHARS: usize = 50_000;
/// `read_page`'s depth when none is given.
const DEFAULT_DEPTH: i64 = 15;
/// Matches `find` answers at most.
pub const MAX_MATCHES: usize = 20;

/// The page's snapshot in the view `options` ask for, as the toolset shows it: its YAML lines with
/// `[ref_N]` refs, and the refs of the parts the size cap and the depth left out (with how many
/// elements each left out).
struct Tree {
    lines: Vec<String>,
    rest: Vec<String>,
    rest_elements: usize,
    /// More elements than `rest_elements` may be left out (see `PageSnapshot::rest_more`).
    rest_more: bool,
    deeper: Vec<String>,
    deeper_elements: usize,
}

async fn tree(act: &mut Act<'_>, options: &SnapshotOptions) -> Result<Tree, ToolError> {
    let snapshot = act.running.page_snapshot(options).await?;
    let Some(yaml) = snapshot.yaml else {
        // No tree (a page too large to snapshot): what the snapshot says instead.
        return Err(ToolError::Reported(
            snapshot
                .heading
                .trim_start_matches("- Page Snapshot: ")
                .replace("browser_take_screenshot", "screenshot"),
        ));
    };
    let refs = |refs: &[String]| -> Vec<String> {
        refs.iter()
            .map(|reference| toolset_ref(reference).unwrap_or_else(|| reference.clone()))
            .collect()
    };
    Ok(Tree {
        lines: yaml.lines().map(toolset_refs).collect(),
        rest: refs(&snapshot.rest),
        rest_elements: snapshot.rest_elements,
        rest_more: snapshot.rest_more,
        deeper: refs(&snapshot.deeper),
        deeper_elements: snapshot.deeper_elements,
    })
}

/// A snapshot line with its refs (`[ref=e7]`, `[ref=f1e7]`) written as the toolset writes them
/// (`[ref_7]`).
fn toolset_refs(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find("[ref=") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "[ref=".len()..];
        match after
            .find(']')
            .and_then(|end| Some((toolset_ref(&after[..end])?, end)))
        {
            Some((reference, end)) => {
                out.push_str(&format!("[{reference}]"));
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("[ref=");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A snapshot's ref (`e7`, `f1e7`, `s2_e7`) as the toolset writes it (`ref_7`, `s2_ref_7`).
fn toolset_ref(reference: &str) -> Option<String> {
    let (session, bare) = session_of_ref(reference);
    let number = (SNAPSHOT_REFS.number)(bare)?;
    Some(match session {
        Some(session) => format!("{session}_ref_{number}"),
        None => format!("ref_{number}"),
    })
}

/// The ref a line carries (`[ref_7]`, `[s2_ref_7]` in a session), if any.
fn line_ref(line: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(found) = line.get(from..)?.find('[') {
        let start = from + found;
        let end = start + line.get(start..)?.find(']')?;
        let inner = line.get(start + 1..end)?;
        if session_of_ref(inner).1.starts_with("ref_") {
            return Some(inner);
        }
        from = start + 1;
    }
    None
}

/// The role a line names (`- button "Send"` → `button`).
fn line_role(line: &str) -> &str {
    line.trim_start()
        .trim_start_matches("- ")
        .split([' ', ':'])
        .next()
        .unwrap_or_default()
}

/// The page's tree (the playwright tools' snapshot, in the view the input asks for): `filter`
/// omitted shows what is in the viewport, `interactive` the elements one acts on there, `all` the
/// whole page; `depth` levels of nesting; `ref` that element's subtree; within [`MAX_READ_CHARS`],
/// with the refs to read what was left out.
pub async fn read_page(mut act: Act<'_>, input: ReadPage) -> Result<Outcome, ToolError> {
    let depth = input.depth.unwrap_or(DEFAULT_DEPTH);
    let depth = usize::try_from(depth)
        .map_err(|_| ToolError::Reported(format!("depth must be 0 or more, not {depth}.")))?;
    let root_ref = match input.reference.as_deref() {
        Some(reference) => {
            // Checked here so a stale ref is refused in the toolset's words.
            act.running
                .element_in_style(reference, &TOOLSET_REFS)
                .await?;
            let (session, bare) = session_of_ref(reference);
            let number = (TOOLSET_REFS.number)(bare).unwrap_or_default();
            Some(match session {
                Some(session) => format!("{session}_e{number}"),
                None => format!("e{number}"),
            })
        }
        None => None,
    };
    let options = SnapshotOptions {
        interactive_only: input.filter == Some(PageFilter::Interactive),
        viewport_only: input.filter != Some(PageFilter::All),
        max_depth: Some(depth.max(1)),
        root_ref,
        max_chars: Some(MAX_READ_CHARS),
        diff: false,
    };
    let tree = tree(&mut act, &options).await?;
    let mut text = tree.lines.join("\n");
    if !tree.rest.is_empty() {
        let at_least = if tree.rest_more { "at least " } else { "" };
        text.push_str(&format!(
            "\n(cut at {MAX_READ_CHARS} characters: {at_least}{} more elements are not shown, under \
             {}; read one with ref)",
            tree.rest_elements,
            named(&tree.rest, tree.rest_elements)
        ));
    }
    if !tree.deeper.is_empty() {
        text.push_str(&format!(
            "\n({} elements nested deeper than {} levels are not shown, under {}; read one with ref \
             or a larger depth)",
            tree.deeper_elements,
            depth.max(1),
            named(&tree.deeper, tree.deeper_elements)
        ));
    }
    if text.is_empty() {
        text = if input.filter == Some(PageFilter::All) {
            "(the page shows nothing)".to_owned()
        } else {
            "(nothing in the viewport: scroll, or read_page with filter \"all\")".to_owned()
        };
    }
    Ok(Outcome::Text(text))
}

/// Refs a note names (the first ones the snapshot gave), saying when there are more.
fn named(refs: &[String], elements: usize) -> String {
    let mut text = refs.join(", ");
    if elements > refs.len() {
        text.push_str(", ...");
    }
    text
}

/// Words of a description that say nothing of which element is meant.
const FILLER: &[&str] = &[
    "a", "an", "the", "of", "to", "for", "in", "on", "with", "and", "or", "at", "by", "that",
    "this", "is", "me", "my", "its", "it", "element", "elements", "page",
];

/// What words of a description say of an element's role.
const ROLE_WORDS: &[(&str, &[&str])] = &[
    ("field", &["textbox", "searchbox", "combobox", "spinbutton"]),
    (
        "input",
        &[
            "textbox",
            "searchbox",
            "combobox",
            "spinbutton",
            "checkbox",
            "radio",
        ],
    ),
    ("box", &["textbox", "searchbox", "combobox", "checkbox"]),
    ("search", &["searchbox"]),
    ("dropdown", &["combobox", "listbox"]),
    ("select", &["combobox", "listbox"]),
    ("menu", &["menu", "menuitem", "combobox"]),
    ("button", &["button"]),
    ("link", &["link"]),
    ("checkbox", &["checkbox"]),
    ("tab", &["tab"]),
    ("image", &["img"]),
    ("heading", &["heading"]),
    ("title", &["heading"]),
];

/// The page's elements (with refs) that match a description best, at most [`MAX_MATCHES`], in
/// document order among equals: each word of the description found in an element's line (its role,
/// name, value and states) counts, as does a word that names its role (`field`: a text box).
pub async fn find(mut act: Act<'_>, query: &str) -> Result<Outcome, ToolError> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|word| !word.is_empty() && !FILLER.contains(&word.as_str()))
        .collect();
    if words.is_empty() {
        return Err(ToolError::Reported(
            "query describes no element: say what it is (\"search field\", \"add to cart button\")."
                .into(),
        ));
    }
    // The whole page, as the playwright tools' snapshot shows it.
    let lines = tree(&mut act, &SnapshotOptions::default()).await?.lines;
    let mut scored: Vec<(usize, usize, String)> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line_ref(line).is_some())
        .filter_map(|(index, line)| {
            let role = line_role(line);
            let lower = line.to_lowercase();
            let score: usize = words
                .iter()
                .map(|word| {
                    let named = usize::from(lower.contains(word.as_str())) * 2;
                    let by_role = ROLE_WORDS
                        .iter()
                        .any(|(said, roles)| said == word && roles.contains(&role));
                    named + usize::from(by_role)
                })
                .sum();
            (score > 0).then(|| (score, index, line.trim_start().to_owned()))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let best = scored.first().map_or(0, |(score, ..)| *score);
    // Elements matching far less than the best are noise beside it.
    let found: Vec<String> = scored
        .into_iter()
        .filter(|(score, ..)| *score * 2 >= best)
        .take(MAX_MATCHES)
        .map(|(.., line)| line)
        .collect();
    if found.is_empty() {
        return Ok(Outcome::Text(format!(
            "No element matches {query:?}. read_page (filter \"interactive\") lists what can be \
             acted on."
        )));
    }
    Ok(Outcome::Text(found.join("\n")))
}

/// The page's text: its article or main content when it has a substantial one, else its body's.
const PAGE_TEXT: &str = "(() => { const main = document.querySelector('article') || \
    document.querySelector('main, [role=main]'); const body = document.body; \
    const source = main && main.innerText.trim().length >= 200 ? main : body; \
    return source ? source.innerText : ''; })()";

pub async fn page_text(act: Act<'_>) -> Result<Outcome, ToolError> {
    let answer = act
        .running
        .evaluate_in_page(PAGE_TEXT, SLOW_CALL)
        .await?
        .ok_or_else(dialog_opened)?;
    let text = answer
        .pointer("/result/value")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(Outcome::Text(bounded(text.trim())))
}

fn dialog_opened() -> ToolError {
    ToolError::Reported("The page opened a dialog meanwhile, which was dismissed.".into())
}

/// `text` cut to [`MAX_READ_CHARS`], saying so.
fn bounded(text: &str) -> String {
    let total = text.chars().count();
    if total <= MAX_READ_CHARS {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(MAX_READ_CHARS).collect();
    kept.push_str(&format!(
        "\n(cut: {total} characters, the first {MAX_READ_CHARS} shown)"
    ));
    kept
}

/// The addressed tab's console messages since the last read.
pub fn console(act: Act<'_>) -> Result<Outcome, ToolError> {
    let target = act.running.current_target().unwrap_or_default();
    let seen = act.reports.console_read.get(&target).copied().unwrap_or(0);
    let (lines, now) = act.running.events(|events| {
        let (lines, now) = events.console.since(seen);
        (lines.into_iter().cloned().collect::<Vec<_>>(), now)
    })?;
    act.reports.console_read.insert(target, now);
    Ok(Outcome::Text(bounded(&lines.join("\n"))))
}

/// The addressed tab's requests since the last read: method, URL, status, MIME type and time.
pub fn network(act: Act<'_>) -> Result<Outcome, ToolError> {
    let target = act.running.current_target().unwrap_or_default();
    let seen = act.reports.network_read.get(&target).copied().unwrap_or(0);
    let (lines, now) = act.running.events(|events| {
        let (requests, now) = events.requests.since(seen);
        let lines = requests
            .into_iter()
            .map(|request| {
                let mut line = format!("{} {}", request.method.to_uppercase(), request.url);
                match &request.status {
                    Some((status, _)) => line.push_str(&format!(" {status}")),
                    None => line.push_str(" (no answer yet)"),
                }
                if let Some(mime) = &request.mime {
                    line.push_str(&format!(" {mime}"));
                }
                if let (Some(sent), Some(done)) = (request.sent_at, request.done_at) {
                    let milliseconds = ((done - sent) * 1000.0).max(0.0).round();
                    line.push_str(&format!(" {milliseconds} ms"));
                }
                line
            })
            .collect::<Vec<_>>();
        (lines, now)
    })?;
    act.reports.network_read.insert(target, now);
    Ok(Outcome::Text(bounded(&lines.join("\n"))))
}

/// Evaluates `code` in the page (a promise is awaited): the value of its last expression, a string
/// as it is and anything else as JSON.
pub async fn javascript(act: Act<'_>, code: &str) -> Result<Outcome, ToolError> {
    let answer = act
        .running
        .evaluate_in_page(code, SLOW_CALL)
        .await?
        .ok_or_else(dialog_opened)?;
    if let Some(details) = answer.get("exceptionDetails") {
        let said = details
            .pointer("/exception/description")
            .and_then(Value::as_str)
            .or_else(|| details.get("text").and_then(Value::as_str))
            .unwrap_or("an exception");
        return Err(ToolError::Reported(format!(
            "The script threw: {}",
            bounded(said)
        )));
    }
    let result = &answer["result"];
    let text = match result.get("value") {
        Some(Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
        None => result
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_else(|| result["type"].as_str().unwrap_or("undefined"))
            .to_owned(),
    };
    Ok(Outcome::Text(bounded(&text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_refs_are_written_as_the_toolset_s() {
        assert_eq!(
            toolset_refs("- button \"Go\" [ref=e7] [cursor=pointer]"),
            "- button \"Go\" [ref_7] [cursor=pointer]"
        );
        assert_eq!(
            toolset_refs("  - textbox [ref=f2e12]: hi"),
            "  - textbox [ref_12]: hi"
        );
        assert_eq!(toolset_refs("- text: [ref=x]"), "- text: [ref=x]");
        assert_eq!(line_ref("  - link \"a\" [ref_3]"), Some("ref_3"));
        assert_eq!(line_role("  - link \"a\" [ref_3]"), "link");
    }
}
