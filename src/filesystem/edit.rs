//! `edit_file`'s matching and its patch text, with the reference's semantics: edits apply in order, an
//! exact match first, else a run of lines equal after trimming, re-indented like the lines it replaces.

use super::line_diff::unified_patch;

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
}
