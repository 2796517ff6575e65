//! `edit_file`'s matching and its patch text, with the reference's semantics: edits apply in order, an
//! exact match first, else a run of lines equal after trimming, re-indented like the lines it replaces.

use similar::{ChangeTag, TextDiff};

pub struct Edit {
    pub old_text: String,
    pub new_text: String,
}

/// The edited text, or which edit found nothing (and then nothing is to be written).
pub fn apply(content: &str, edits: &[Edit]) -> Result<String, String> {
    let mut text = content.to_owned();
    for edit in edits {
        let old = normalize_line_endings(&edit.old_text);
        let new = normalize_line_endings(&edit.new_text);
        if let Some(at) = text.find(old.as_str()) {
            text.replace_range(at..at + old.len(), &new);
            continue;
        }
        text = replace_lines_ignoring_whitespace(&text, &old, &new)
            .ok_or_else(|| format!("Could not find exact match for edit:\n{}", edit.old_text))?;
    }
    Ok(text)
}

pub fn normalize_line_endings(text: &str) -> String {
    text.replace("\r\n", "\n")
}

fn replace_lines_ignoring_whitespace(text: &str, old: &str, new: &str) -> Option<String> {
    let old_lines: Vec<&str> = old.split('\n').collect();
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let start = (0..=lines.len().checked_sub(old_lines.len())?).find(|&start| {
        old_lines
            .iter()
            .zip(&lines[start..])
            .all(|(old_line, line)| old_line.trim() == line.trim())
    })?;
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
    Some(lines.join("\n"))
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

fn unified_patch(path: &str, old: &str, new: &str) -> String {
    let mut out = format!(
        "Index: {path}\n{}\n--- {path}\toriginal\n+++ {path}\tmodified\n",
        "=".repeat(67)
    );
    let diff = TextDiff::configure()
        .timeout(std::time::Duration::from_secs(5))
        .diff_lines(old, new);
    for group in diff.grouped_ops(4) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        out.push_str(&format!(
            "@@ -{},{} +{},{} @@\n",
            hunk_start(&old_range),
            old_range.len(),
            hunk_start(&new_range),
            new_range.len()
        ));
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    ChangeTag::Equal => ' ',
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                };
                let line = change.value();
                out.push(sign);
                match line.strip_suffix('\n') {
                    Some(line) => {
                        out.push_str(line);
                        out.push('\n');
                    }
                    None => {
                        out.push_str(line);
                        out.push_str("\n\\ No newline at end of file\n");
                    }
                }
            }
        }
    }
    out
}

/// 1-based first line, or the line before an empty range, as jsdiff writes it.
fn hunk_start(range: &std::ops::Range<usize>) -> usize {
    if range.is_empty() {
        range.start
    } else {
        range.start + 1
    }
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
    fn a_missing_match_names_the_edit() {
        let err = apply("abc\n", &[edit("abc", "x"), edit("zzz", "y")]).unwrap_err();
        assert_eq!(err, "Could not find exact match for edit:\nzzz");
    }

    #[test]
    fn patch_matches_jsdiff_layout() {
        let patch = unified_patch("/w/f.txt", "a\nb\nc\n", "a\nB\nc\n");
        assert_eq!(
            patch,
            "Index: /w/f.txt\n===================================================================\n\
             --- /w/f.txt\toriginal\n+++ /w/f.txt\tmodified\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
        let no_newline = unified_patch("f", "a\nb", "a\nc");
        assert!(no_newline.ends_with(
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        ));
        assert!(unified_patch("f", "", "x\n").ends_with("@@ -0,0 +1,1 @@\n+x\n"));
    }
}
