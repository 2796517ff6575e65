//! The line diff and patch layout of jsdiff 5 (`createTwoFilesPatch`), which the reference server's
//! `edit_file` answers with. Where several shortest diffs exist, jsdiff's forward search picks one by its
//! own rule (an insertion unless the removal path is strictly further along, then removals moved in
//! front of the insertions they follow); `similar`'s Myers breaks those ties differently, so a patch
//! would read differently for the same edit. This follows jsdiff's choices so the text is the
//! reference's, byte for byte (checked by the differential test against the real server).
//!
//! The forward search keeps every path's history (memory grows with the square of the number of edits)
//! and compares lines along every diagonal (time grows with file length × edits). Past `MAX_EDITS` edited
//! lines or `SEARCH_BUDGET` the patch comes from `similar` instead (a valid patch, possibly laid out
//! differently), so a huge rewrite costs neither unbounded memory nor time.

use similar::{Algorithm, DiffTag, capture_diff_slices_deadline};

/// Edited lines (insertions + deletions) the jsdiff-exact search handles before falling back: at most
/// ~1 M path nodes (~32 MB).
const MAX_EDITS: usize = 1_000;
const SEARCH_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);
/// Context lines around each change, as the reference asks jsdiff for.
const CONTEXT: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Equal,
    Delete,
    Insert,
}

/// A run of lines of one kind, in patch order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    tag: Tag,
    count: usize,
}

/// jsdiff's tokens: lines with their `\n` (the last one may lack it).
fn tokens(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The unified patch of `old` → `new` under the header jsdiff writes for `createTwoFilesPatch(path,
/// path, old, new, "original", "modified")`.
pub fn unified_patch(path: &str, old: &str, new: &str) -> String {
    let (old_lines, new_lines) = (tokens(old), tokens(new));
    let runs = forward_search(&old_lines, &new_lines)
        .unwrap_or_else(|| similar_runs(&old_lines, &new_lines));
    let mut out = format!(
        "Index: {path}\n{}\n--- {path}\toriginal\n+++ {path}\tmodified\n",
        "=".repeat(67)
    );
    for hunk in hunks(&runs, &old_lines, &new_lines, old, new) {
        out.push_str(&hunk);
    }
    out
}

#[derive(Clone, Copy)]
struct Path {
    /// Index of the last old line consumed (-1 before any).
    old_pos: isize,
    /// The path's last run in the arena.
    last: Option<usize>,
}

/// A run in a path's history; histories share their prefixes.
struct Node {
    run: Run,
    previous: Option<usize>,
}

/// jsdiff's `diff()`: extends the furthest path on each diagonal one edit at a time.
fn forward_search(old: &[&str], new: &[&str]) -> Option<Vec<Run>> {
    let (old_len, new_len) = (old.len() as isize, new.len() as isize);
    let mut nodes: Vec<Node> = Vec::new();
    let follow_common = |nodes: &mut Vec<Node>, path: &mut Path, diagonal: isize| -> isize {
        let mut old_pos = path.old_pos;
        let mut new_pos = old_pos - diagonal;
        let mut common = 0;
        while new_pos + 1 < new_len
            && old_pos + 1 < old_len
            && new[(new_pos + 1) as usize] == old[(old_pos + 1) as usize]
        {
            new_pos += 1;
            old_pos += 1;
            common += 1;
        }
        if common > 0 {
            nodes.push(Node {
                run: Run {
                    tag: Tag::Equal,
                    count: common,
                },
                previous: path.last,
            });
            path.last = Some(nodes.len() - 1);
        }
        path.old_pos = old_pos;
        new_pos
    };
    let extend = |nodes: &mut Vec<Node>, path: Path, tag: Tag| -> Path {
        let old_step = isize::from(tag == Tag::Delete);
        let node = match path.last.map(|index| &nodes[index]) {
            Some(last) if last.run.tag == tag => Node {
                run: Run {
                    tag,
                    count: last.run.count + 1,
                },
                previous: last.previous,
            },
            _ => Node {
                run: Run { tag, count: 1 },
                previous: path.last,
            },
        };
        nodes.push(node);
        Path {
            old_pos: path.old_pos + old_step,
            last: Some(nodes.len() - 1),
        }
    };

    // Diagonal k (old_pos - new_pos) lives at index k + offset.
    let max_edits = (old.len() + new.len()).min(MAX_EDITS) as isize;
    let offset = max_edits + 1;
    let mut best: Vec<Option<Path>> = vec![None; (2 * offset + 1) as usize];
    let mut start = Path {
        old_pos: -1,
        last: None,
    };
    let new_pos = follow_common(&mut nodes, &mut start, 0);
    if start.old_pos + 1 >= old_len && new_pos + 1 >= new_len {
        return Some(history(&nodes, start.last));
    }
    best[offset as usize] = Some(start);
    let (mut min_diagonal, mut max_diagonal) = (isize::MIN, isize::MAX);
    let give_up_at = std::time::Instant::now() + SEARCH_BUDGET;
    for edits in 1..=max_edits {
        if std::time::Instant::now() > give_up_at {
            return None;
        }
        let mut diagonal = min_diagonal.max(-edits);
        while diagonal <= max_diagonal.min(edits) {
            let at = (diagonal + offset) as usize;
            let remove_path = best[at - 1].take();
            let add_path = best[at + 1];
            let can_add =
                add_path.is_some_and(|path| (0..new_len).contains(&(path.old_pos - diagonal)));
            let can_remove = remove_path.is_some_and(|path| path.old_pos + 1 < old_len);
            let chosen = match (remove_path, add_path) {
                (Some(remove), Some(add)) if can_remove && can_add => {
                    if remove.old_pos + 1 < add.old_pos {
                        Some((add, Tag::Insert))
                    } else {
                        Some((remove, Tag::Delete))
                    }
                }
                (Some(remove), _) if can_remove => Some((remove, Tag::Delete)),
                (_, Some(add)) if can_add => Some((add, Tag::Insert)),
                _ => None,
            };
            let Some((base, tag)) = chosen else {
                best[at] = None;
                diagonal += 2;
                continue;
            };
            let mut path = extend(&mut nodes, base, tag);
            let new_pos = follow_common(&mut nodes, &mut path, diagonal);
            if path.old_pos + 1 >= old_len && new_pos + 1 >= new_len {
                return Some(history(&nodes, path.last));
            }
            best[at] = Some(path);
            if path.old_pos + 1 >= old_len {
                max_diagonal = max_diagonal.min(diagonal - 1);
            }
            if new_pos + 1 >= new_len {
                min_diagonal = min_diagonal.max(diagonal + 1);
            }
            diagonal += 2;
        }
    }
    None
}

/// A path's runs in order, each removal moved before an insertion just ahead of it (jsdiff's
/// `buildValues`).
fn history(nodes: &[Node], mut last: Option<usize>) -> Vec<Run> {
    let mut runs = Vec::new();
    while let Some(index) = last {
        runs.push(nodes[index].run);
        last = nodes[index].previous;
    }
    runs.reverse();
    for at in 1..runs.len() {
        if runs[at].tag == Tag::Delete && runs[at - 1].tag == Tag::Insert {
            runs.swap(at - 1, at);
        }
    }
    runs
}

fn similar_runs(old: &[&str], new: &[&str]) -> Vec<Run> {
    let mut runs = Vec::new();
    // Past the deadline similar settles for a coarser (still valid) diff.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    for op in capture_diff_slices_deadline(Algorithm::Myers, old, new, Some(deadline)) {
        let (tag, old_range, new_range) = op.as_tag_tuple();
        let mut push = |tag, count| {
            if count > 0 {
                runs.push(Run { tag, count });
            }
        };
        match tag {
            DiffTag::Equal => push(Tag::Equal, old_range.len()),
            DiffTag::Delete => push(Tag::Delete, old_range.len()),
            DiffTag::Insert => push(Tag::Insert, new_range.len()),
            DiffTag::Replace => {
                push(Tag::Delete, old_range.len());
                push(Tag::Insert, new_range.len());
            }
        }
    }
    runs
}

const NO_NEWLINE: &str = "\\ No newline at end of file";

/// jsdiff's `structuredPatch` + `formatPatch`: changes with `CONTEXT` lines around them, hunks joined
/// when at most twice that many equal lines separate them, and its rules for where the end-of-file
/// marker goes.
fn hunks(runs: &[Run], old: &[&str], new: &[&str], old_text: &str, new_text: &str) -> Vec<String> {
    // Each run's lines; a final empty equal run closes the last hunk.
    let mut spans: Vec<(Tag, &[&str])> = Vec::with_capacity(runs.len() + 1);
    let (mut old_at, mut new_at) = (0, 0);
    for run in runs {
        spans.push(match run.tag {
            Tag::Insert => (run.tag, &new[new_at..new_at + run.count]),
            Tag::Equal | Tag::Delete => (run.tag, &old[old_at..old_at + run.count]),
        });
        if run.tag != Tag::Insert {
            old_at += run.count;
        }
        if run.tag != Tag::Delete {
            new_at += run.count;
        }
    }
    spans.push((Tag::Equal, &[]));

    let marked = |sign: char, lines: &[&str]| -> Vec<String> {
        lines
            .iter()
            .map(|line| format!("{sign}{}", line.strip_suffix('\n').unwrap_or(line)))
            .collect()
    };
    let mut hunks = Vec::new();
    let (mut old_line, mut new_line) = (1usize, 1usize);
    // Where the open hunk starts (old, new), and its lines so far.
    let mut open: Option<(usize, usize)> = None;
    let mut lines: Vec<String> = Vec::new();
    for (index, &(tag, span)) in spans.iter().enumerate() {
        let is_last = index + 2 >= spans.len();
        if tag != Tag::Equal {
            if open.is_none() {
                let before = index
                    .checked_sub(1)
                    .map_or(&[][..], |previous| spans[previous].1);
                let context = &before[before.len().saturating_sub(CONTEXT)..];
                lines = marked(' ', context);
                open = Some((old_line - context.len(), new_line - context.len()));
            }
            if tag == Tag::Insert {
                lines.extend(marked('+', span));
                new_line += span.len();
            } else {
                lines.extend(marked('-', span));
                old_line += span.len();
            }
            continue;
        }
        if let Some((old_start, new_start)) = open {
            if span.len() <= CONTEXT * 2 && !is_last {
                lines.extend(marked(' ', span));
            } else {
                let context = span.len().min(CONTEXT);
                lines.extend(marked(' ', &span[..context]));
                let old_count = old_line - old_start + context;
                let new_count = new_line - new_start + context;
                if is_last && span.len() <= CONTEXT {
                    // The end of the file is inside this hunk.
                    let old_ends_in_newline = old_text.ends_with('\n');
                    let no_newline_before_adds = span.is_empty() && lines.len() > old_count;
                    if !old_ends_in_newline && no_newline_before_adds && !old_text.is_empty() {
                        lines.insert(old_count, NO_NEWLINE.to_owned());
                    }
                    if (!old_ends_in_newline && !no_newline_before_adds)
                        || !new_text.ends_with('\n')
                    {
                        lines.push(NO_NEWLINE.to_owned());
                    }
                }
                // An empty side is written one line before where it would start.
                let shown = |start: usize, count: usize| if count == 0 { start - 1 } else { start };
                let mut hunk = format!(
                    "@@ -{},{old_count} +{},{new_count} @@\n",
                    shown(old_start, old_count),
                    shown(new_start, new_count)
                );
                for line in lines.drain(..) {
                    hunk.push_str(&line);
                    hunk.push('\n');
                }
                hunks.push(hunk);
                open = None;
            }
        }
        old_line += span.len();
        new_line += span.len();
    }
    hunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(old: &str, new: &str) -> String {
        let patch = unified_patch("f", old, new);
        patch
            .split_once("\tmodified\n")
            .map(|(_, hunks)| hunks.to_owned())
            .unwrap_or_default()
    }

    #[test]
    fn header_and_a_one_line_change() {
        assert_eq!(
            unified_patch("/w/f.txt", "a\nb\nc\n", "a\nB\nc\n"),
            "Index: /w/f.txt\n===================================================================\n\
             --- /w/f.txt\toriginal\n+++ /w/f.txt\tmodified\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
    }

    #[test]
    fn ties_go_the_way_jsdiff_takes_them() {
        // The first of two equal lines replaced: jsdiff inserts before the common line and removes the
        // second (Myers in `similar` removes the first instead).
        assert_eq!(
            body("dup\ndup\n", "once\ndup\n"),
            "@@ -1,2 +1,2 @@\n+once\n dup\n-dup\n"
        );
    }

    #[test]
    fn end_of_file_markers_and_empty_sides_as_jsdiff_writes_them() {
        // Expected texts printed by jsdiff 5.2.2's createTwoFilesPatch (the reference's dependency).
        for (old, new, expected) in [
            (
                "x\n",
                "",
                "@@ -1,1 +0,0 @@\n-x\n\\ No newline at end of file\n",
            ),
            (
                "a\nb",
                "a\nc",
                "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
            ),
            ("", "x\n", "@@ -0,0 +1,1 @@\n+x\n"),
            (
                "a\nb\n",
                "a\nb",
                "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n",
            ),
            ("same\n", "same\n", ""),
            (
                "",
                "x",
                "@@ -0,0 +1,1 @@\n+x\n\\ No newline at end of file\n",
            ),
            (
                "x",
                "",
                "@@ -1,1 +0,0 @@\n-x\n\\ No newline at end of file\n",
            ),
            (
                "a\n",
                "a\nb",
                "@@ -1,1 +1,2 @@\n a\n+b\n\\ No newline at end of file\n",
            ),
        ] {
            assert_eq!(body(old, new), expected, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn distant_changes_make_separate_hunks_and_near_ones_join() {
        let numbered = |changed: &[(usize, &str)]| -> String {
            (1..=30)
                .map(|n| match changed.iter().find(|(line, _)| *line == n) {
                    Some((_, text)) => format!("{text}\n"),
                    None => format!("{n}\n"),
                })
                .collect()
        };
        let old = numbered(&[]);
        let far = numbered(&[(2, "two"), (25, "twenty-five")]);
        assert_eq!(body(&old, &far).matches("@@ -").count(), 2);
        // 8 equal lines between two changes still make one hunk; 9 make two.
        let near = numbered(&[(2, "two"), (11, "eleven")]);
        assert_eq!(body(&old, &near).matches("@@ -").count(), 1);
        let apart = numbered(&[(2, "two"), (12, "twelve")]);
        assert_eq!(body(&old, &apart).matches("@@ -").count(), 2);
    }

    #[test]
    fn a_huge_rewrite_falls_back_to_a_valid_patch() {
        let old: String = (0..3000).map(|n| format!("old {n}\n")).collect();
        let new: String = (0..3000).map(|n| format!("new {n}\n")).collect();
        let patch = body(&old, &new);
        assert!(patch.starts_with("@@ -1,3000 +1,3000 @@\n-old 0\n"));
        assert_eq!(
            patch.lines().filter(|line| line.starts_with('+')).count(),
            3000
        );
    }
}
