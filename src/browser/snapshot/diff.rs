//! A snapshot's changes since the tab's previous one of the same view: its lines compared with the
//! earlier ones, written as a unified diff of the YAML (`+ ` added, `- ` removed), each change after
//! the lines holding it (`  `, unchanged) so that it reads in place. Refs are the tab's, so an added
//! line's ref works as any other.

use std::ops::Range;
use std::time::{Duration, Instant};

use similar::{Algorithm, DiffOp, capture_diff_slices_deadline};

/// The longest a comparison takes: past it, the diff is coarser (whole blocks replaced), never slow.
const DIFF_TIME: Duration = Duration::from_millis(200);

/// The changes between two renderings of one view.
#[derive(Debug, Default)]
pub struct Diff {
    /// The lines of the diff (context, removed, added), in page order.
    pub lines: Vec<String>,
    /// Elements (by ref) only in the new snapshot, only in the old one, and in both but written
    /// otherwise; lines without a ref of their own (text, a link's target) count as added or removed.
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// The ref a line shows (`[ref=e12]`), if any.
fn reference(line: &str) -> Option<&str> {
    let start = line.find("[ref=")? + "[ref=".len();
    let length = line[start..].find(']')?;
    Some(&line[start..start + length])
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// `new` compared with `old` (the lines of two renderings of one view). Lines are matched by their
/// ref (by their text when they have none), so an element written otherwise (a state, a value, its
/// name) is one changed line, not a removal and an addition.
pub fn diff(old: &[String], new: &[String]) -> Diff {
    let key = |line: &String| reference(line).map_or_else(|| line.clone(), str::to_owned);
    let old_keys: Vec<String> = old.iter().map(key).collect();
    let new_keys: Vec<String> = new.iter().map(key).collect();
    let ops = capture_diff_slices_deadline(
        Algorithm::Myers,
        &old_keys,
        &new_keys,
        Some(Instant::now() + DIFF_TIME),
    );
    // The changes, each as the old lines it removes and the new lines it adds.
    let mut hunks: Vec<(Range<usize>, Range<usize>)> = Vec::new();
    for op in ops {
        match op {
            DiffOp::Equal {
                old_index,
                new_index,
                len,
            } => {
                for offset in 0..len {
                    let (was, is) = (old_index + offset, new_index + offset);
                    if old.get(was) != new.get(is) {
                        hunks.push((was..was + 1, is..is + 1));
                    }
                }
            }
            DiffOp::Delete {
                old_index,
                old_len,
                new_index,
            } => hunks.push((old_index..old_index + old_len, new_index..new_index)),
            DiffOp::Insert {
                old_index,
                new_index,
                new_len,
            } => hunks.push((old_index..old_index, new_index..new_index + new_len)),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => hunks.push((
                old_index..old_index + old_len,
                new_index..new_index + new_len,
            )),
        }
    }
    let mut result = Diff::default();
    // The context lines last written (indices in `new`), so that consecutive changes under the same
    // element name it once.
    let mut context: Vec<usize> = Vec::new();
    for (removed, added) in hunks {
        let first = new
            .get(added.start)
            .filter(|_| !added.is_empty())
            .or_else(|| old.get(removed.start));
        let depth = first.map_or(0, |line| indent(line));
        // The lines holding the change: the nearest earlier line of each lesser indent.
        let mut holders = Vec::new();
        let mut below = depth;
        for at in (0..added.start).rev() {
            if below == 0 {
                break;
            }
            let Some(line) = new.get(at) else { continue };
            if indent(line) < below {
                below = indent(line);
                holders.push(at);
            }
        }
        holders.reverse();
        for at in &holders {
            if !context.contains(at)
                && let Some(line) = new.get(*at)
            {
                result.lines.push(format!("  {line}"));
            }
        }
        context = holders;
        let old_refs: Vec<&str> = removed
            .clone()
            .filter_map(|at| old.get(at).and_then(|line| reference(line)))
            .collect();
        let mut same = 0;
        for line in removed.clone().filter_map(|at| old.get(at)) {
            result.lines.push(format!("- {line}"));
        }
        for line in added.clone().filter_map(|at| new.get(at)) {
            result.lines.push(format!("+ {line}"));
            if reference(line).is_some_and(|own| old_refs.contains(&own)) {
                same += 1;
            }
        }
        result.changed += same;
        result.removed += removed.len().saturating_sub(same);
        result.added += added.len().saturating_sub(same);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn changes_are_written_under_the_lines_holding_them() {
        let old = lines(
            "- main [ref=e1]:\n  - list [ref=e2]:\n    - listitem [ref=e3]: One\n    - listitem [ref=e4]: Two\n  - button \"Save\" [ref=e5]",
        );
        let new = lines(
            "- main [ref=e1]:\n  - list [ref=e2]:\n    - listitem [ref=e3]: One\n    - listitem [ref=e6]: Three\n  - button \"Save\" [disabled] [ref=e5]",
        );
        let diff = diff(&old, &new);
        assert_eq!(
            diff.lines,
            [
                "  - main [ref=e1]:",
                "    - list [ref=e2]:",
                "-     - listitem [ref=e4]: Two",
                "+     - listitem [ref=e6]: Three",
                "-   - button \"Save\" [ref=e5]",
                "+   - button \"Save\" [disabled] [ref=e5]",
            ]
        );
        assert_eq!((diff.added, diff.removed, diff.changed), (1, 1, 1));
        assert!(super::diff(&new, &new).is_empty());
    }
}
