//! `edit_file`'s matching and its patch text, with the reference's semantics: edits apply in order, an
//! exact match first, else a run of lines equal after trimming, re-indented like the lines it replaces.

use super::line_diff::unified_patch;

pub struct Edit {
    pub old_text: String,
    pub new_text: String,
}

/// Line comparisons the whitespace-tolerant match may make over one call, all edits together. The match
/// is O(file lines × edit lines); this is seconds of work, where a pathological edit (a long run of equal
/// lines in both) would otherwise spin for hours.
pub const MATCH_BUDGET: u64 = 50_000_000;

/// The edited text, or which edit found nothing (and then nothing is to be written).
pub fn apply(content: &str, edits: &[Edit]) -> Result<String, String> {
    apply_with_budget(content, edits, MATCH_BUDGET)
}

fn apply_with_budget(content: &str, edits: &[Edit], mut budget: u64) -> Result<String, String> {
    let mut text = content.to_owned();
    for edit in edits {
        let old = normalize_line_endings(&edit.old_text);
        let new = normalize_line_endings(&edit.new_text);
        if let Some(at) = text.find(old.as_str()) {
            text.replace_range(at..at + old.len(), &new);
            continue;
        }
        text = match replace_lines_ignoring_whitespace(&text, &old, &new, &mut budget) {
            Match::Found(edited) => edited,
            Match::Missing => {
                return Err(format!(
                    "Could not find exact match for edit:\n{}",
                    edit.old_text
                ));
            }
            Match::OverBudget => {
                return Err(format!(
                    "Gave up matching edit after {MATCH_BUDGET} line comparisons (no exact match; the \
                     whitespace-tolerant search is too costly for this file and edit). Give oldText \
                     exactly as in the file, or fewer lines:\n{}",
                    edit.old_text
                ));
            }
        };
    }
    Ok(text)
}

enum Match {
    Found(String),
    Missing,
    OverBudget,
}

pub fn normalize_line_endings(text: &str) -> String {
    text.replace("\r\n", "\n")
}

fn replace_lines_ignoring_whitespace(text: &str, old: &str, new: &str, budget: &mut u64) -> Match {
    let old_lines: Vec<&str> = old.split('\n').collect();
    let old_trimmed: Vec<&str> = old_lines.iter().map(|line| line.trim()).collect();
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let trimmed: Vec<&str> = lines.iter().map(|line| line.trim()).collect();
    let Some(last_start) = trimmed.len().checked_sub(old_trimmed.len()) else {
        return Match::Missing;
    };
    let mut found = None;
    'starts: for start in 0..=last_start {
        for (old_line, line) in old_trimmed.iter().zip(&trimmed[start..]) {
            let Some(left) = budget.checked_sub(1) else {
                return Match::OverBudget;
            };
            *budget = left;
            if old_line != line {
                continue 'starts;
            }
        }
        found = Some(start);
        break;
    }
    drop(trimmed);
    let Some(start) = found else {
        return Match::Missing;
    };
    let first_indent = leading_whitespace(&lines[start]).to_owned();
    let replacement: Vec<String> = new
        .split('\n')
        .enumerate()
        .map(|(index, line)| {
            if index == 0 {
                return format!("{first_indent}{}", line.trim_start());
            }
            let old_indent = old_lines
                .get(index)
                .map_or("", |old| leading_whitespace(old));
            let new_indent = leading_whitespace(line);
            if old_indent.is_empty() || new_indent.is_empty() {
                return line.to_owned();
            }
            let relative = new_indent
                .chars()
                .count()
                .saturating_sub(old_indent.chars().count());
            format!(
                "{first_indent}{}{}",
                " ".repeat(relative),
                line.trim_start()
            )
        })
        .collect();
    lines.splice(start..start + old_lines.len(), replacement);
    Match::Found(lines.join("\n"))
}

fn leading_whitespace(line: &str) -> &str {
    let end = line
        .find(|c: char| !c.is_whitespace())
        .unwrap_or(line.len());
    &line[..end]
}

/// The reference's patch: jsdiff's `createTwoFilesPatch(path, path, old, new, 'original', 'modified')`
/// (four lines of context, every range written `start,count`), in a fenced `diff` block.
pub fn fenced_patch(path: &str, old: &str, new: &str) -> String {
    let patch = unified_patch(path, old, new);
    let mut fence = "```".to_owned();
    while patch.contains(&fence) {
        fence.push('`');
    }
    format!("{fence}diff\n{patch}{fence}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str) -> Edit {
        Edit {
            old_text: old.into(),
            new_text: new.into(),
        }
    }

    #[test]
    fn exact_match_replaces_the_first_occurrence_literally() {
        let edited = apply("a $x a\n", &[edit("a", "$&b")]).unwrap();
        assert_eq!(edited, "$&b $x a\n");
    }

    #[test]
    fn whitespace_tolerant_match_keeps_the_original_indentation() {
        let content = "fn main() {\n        let x = 1;\n        call(x);\n}\n";
        let edited = apply(
            content,
            &[edit("let x = 1;\n  call(x);", "let y = 2;\n    call(y);")],
        )
        .unwrap();
        assert_eq!(
            edited,
            "fn main() {\n        let y = 2;\n          call(y);\n}\n"
        );
    }

    #[test]
    fn a_pathological_tolerant_match_ends_with_a_clear_error() {
        // Every start position matches all but the last edit line: lines × edit lines comparisons.
        let content = "a\n".repeat(20_000);
        let old = format!("{}b", " a\n".repeat(10_000));
        let started = std::time::Instant::now();
        let err = apply(&content, &[edit(&old, "x")]).unwrap_err();
        assert!(err.starts_with("Gave up matching edit after"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // The same shape within the budget still matches.
        let small = apply_with_budget("a\na\nb\n", &[edit(" a\n b", "c")], 100).unwrap();
        assert_eq!(small, "a\nc\n");
        assert!(matches!(
            apply_with_budget("a\na\nb\n", &[edit(" a\n b", "c")], 2),
            Err(message) if message.starts_with("Gave up")
        ));
    }

    #[test]
    fn a_missing_match_names_the_edit() {
        let err = apply("abc\n", &[edit("abc", "x"), edit("zzz", "y")]).unwrap_err();
        assert_eq!(err, "Could not find exact match for edit:\nzzz");
    }
}
