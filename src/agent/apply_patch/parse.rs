//! The V4A patch format as Codex's `apply-patch` crate reads it (`codex-rs/apply-patch/src/parser.rs`):
//! the same grammar, the same leniency (markers padded with whitespace, a `<<EOF` heredoc around the
//! envelope, a first chunk without `@@`) and the same refusals, worded as Codex words them.

use std::fmt;

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File: ";
const DELETE_FILE: &str = "*** Delete File: ";
const UPDATE_FILE: &str = "*** Update File: ";
const MOVE_TO: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";
const CONTEXT: &str = "@@ ";
const EMPTY_CONTEXT: &str = "@@";

/// Why a patch was refused before anything was touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    InvalidPatch(String),
    InvalidHunk { message: String, line_number: usize },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::InvalidPatch(message) => write!(f, "invalid patch: {message}"),
            ParseError::InvalidHunk {
                message,
                line_number,
            } => write!(f, "invalid hunk at line {line_number}, {message}"),
        }
    }
}

/// One file's operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    Add {
        path: String,
        contents: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One `@@` section of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The line after `@@ `: the chunk's lines are looked for after it.
    pub context: Option<String>,
    pub old_lines: Vec<String>,
    pub new_lines: Vec<String>,
    /// `*** End of File`: the old lines are looked for at the end first.
    pub at_end_of_file: bool,
}

/// The hunks of a whole `*** Begin Patch` ... `*** End Patch` envelope.
pub fn parse_patch(patch: &str) -> Result<Vec<Hunk>, ParseError> {
    let lines: Vec<&str> = patch.trim().lines().collect();
    let body = envelope_body(&lines)?;
    let mut hunks = Vec::new();
    let mut remaining = body;
    let mut line_number = 2;
    while !remaining.is_empty() {
        let (hunk, used) = parse_one_hunk(remaining, line_number)?;
        hunks.push(hunk);
        line_number = line_number.saturating_add(used);
        remaining = remaining.get(used..).unwrap_or_default();
    }
    Ok(hunks)
}

/// The chunks of one file's update given alone, as the Responses API's `update_file` operation
/// carries them (its `diff`): what follows `*** Update File:` in an envelope.
pub fn parse_update_body(path: &str, diff: &str) -> Result<Hunk, ParseError> {
    let lines: Vec<&str> = diff.lines().collect();
    let (chunks, used) = parse_chunks(&lines, 1)?;
    if let Some(extra) = lines.get(used..).and_then(|rest| rest.first()) {
        return Err(ParseError::InvalidHunk {
            message: format!("Unexpected line after the update's hunks: '{extra}'"),
            line_number: used.saturating_add(1),
        });
    }
    if chunks.is_empty() {
        return Err(empty_update(path, 1));
    }
    Ok(Hunk::Update {
        path: path.to_owned(),
        move_to: None,
        chunks,
    })
}

/// The contents of a file created by the Responses API's `create_file` operation: its `diff` is the
/// `+` lines of an `*** Add File:` section.
pub fn parse_create_body(path: &str, diff: &str) -> Result<Hunk, ParseError> {
    let mut contents = String::new();
    for (index, line) in diff.lines().enumerate() {
        let Some(added) = line.strip_prefix('+') else {
            return Err(ParseError::InvalidHunk {
                message: format!(
                    "Unexpected line in the contents of '{path}': '{line}'. Every line of a created file starts with '+'"
                ),
                line_number: index.saturating_add(1),
            });
        };
        contents.push_str(added);
        contents.push('\n');
    }
    Ok(Hunk::Add {
        path: path.to_owned(),
        contents,
    })
}

/// The lines between the markers; the envelope may be wrapped in a `<<EOF` heredoc, as Codex's
/// lenient mode accepts.
fn envelope_body<'a>(lines: &'a [&'a str]) -> Result<&'a [&'a str], ParseError> {
    let strict = strict_body(lines);
    if strict.is_ok() {
        return strict;
    }
    if let [first, .., last] = lines
        && matches!(*first, "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
        && last.ends_with("EOF")
        && lines.len() >= 4
    {
        return strict_body(lines.get(1..lines.len() - 1).unwrap_or_default());
    }
    strict
}

fn strict_body<'a>(lines: &'a [&'a str]) -> Result<&'a [&'a str], ParseError> {
    let first = lines.first().map(|line| line.trim());
    let last = lines.last().map(|line| line.trim());
    match (first, last) {
        (Some(BEGIN_PATCH), Some(END_PATCH)) if lines.len() >= 2 => {
            Ok(lines.get(1..lines.len() - 1).unwrap_or_default())
        }
        (Some(first), _) if first != BEGIN_PATCH => Err(ParseError::InvalidPatch(
            "The first line of the patch must be '*** Begin Patch'".to_owned(),
        )),
        (None, _) => Err(ParseError::InvalidPatch(
            "The first line of the patch must be '*** Begin Patch'".to_owned(),
        )),
        _ => Err(ParseError::InvalidPatch(
            "The last line of the patch must be '*** End Patch'".to_owned(),
        )),
    }
}

fn empty_update(path: &str, line_number: usize) -> ParseError {
    ParseError::InvalidHunk {
        message: format!("Update file hunk for path '{path}' is empty"),
        line_number,
    }
}

/// One hunk from the start of `lines`, and how many lines it took.
fn parse_one_hunk(lines: &[&str], line_number: usize) -> Result<(Hunk, usize), ParseError> {
    let first = lines.first().map(|line| line.trim()).unwrap_or_default();
    if let Some(path) = first.strip_prefix(ADD_FILE) {
        let mut contents = String::new();
        let mut used = 1;
        for line in lines.iter().skip(1) {
            let Some(added) = line.strip_prefix('+') else {
                break;
            };
            contents.push_str(added);
            contents.push('\n');
            used += 1;
        }
        return Ok((
            Hunk::Add {
                path: path.to_owned(),
                contents,
            },
            used,
        ));
    }
    if let Some(path) = first.strip_prefix(DELETE_FILE) {
        return Ok((
            Hunk::Delete {
                path: path.to_owned(),
            },
            1,
        ));
    }
    if let Some(path) = first.strip_prefix(UPDATE_FILE) {
        let mut used = 1;
        let move_to = lines
            .get(1)
            .and_then(|line| line.strip_prefix(MOVE_TO))
            .map(str::to_owned);
        if move_to.is_some() {
            used += 1;
        }
        let rest = lines.get(used..).unwrap_or_default();
        let (chunks, chunk_lines) = parse_chunks(rest, line_number.saturating_add(used))?;
        if chunks.is_empty() {
            return Err(empty_update(path, line_number));
        }
        return Ok((
            Hunk::Update {
                path: path.to_owned(),
                move_to,
                chunks,
            },
            used.saturating_add(chunk_lines),
        ));
    }
    Err(ParseError::InvalidHunk {
        message: format!(
            "'{first}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', '*** Delete File: {{path}}', '*** Update File: {{path}}'"
        ),
        line_number,
    })
}

/// The chunks of an update, up to the next `*` line (the next hunk or the end), and the lines used.
fn parse_chunks(lines: &[&str], line_number: usize) -> Result<(Vec<Chunk>, usize), ParseError> {
    let mut chunks = Vec::new();
    let mut used = 0usize;
    while let Some(line) = lines.get(used) {
        if line.trim().is_empty() {
            used += 1;
            continue;
        }
        if line.starts_with('*') {
            break;
        }
        let rest = lines.get(used..).unwrap_or_default();
        let (chunk, chunk_lines) =
            parse_chunk(rest, line_number.saturating_add(used), chunks.is_empty())?;
        chunks.push(chunk);
        used = used.saturating_add(chunk_lines);
    }
    Ok((chunks, used))
}

fn no_lines(line_number: usize) -> ParseError {
    ParseError::InvalidHunk {
        message: "Update hunk does not contain any lines".to_owned(),
        line_number,
    }
}

fn parse_chunk(
    lines: &[&str],
    line_number: usize,
    first_chunk: bool,
) -> Result<(Chunk, usize), ParseError> {
    let Some(header) = lines.first() else {
        return Err(no_lines(line_number));
    };
    let (context, start) = if *header == EMPTY_CONTEXT {
        (None, 1)
    } else if let Some(context) = header.strip_prefix(CONTEXT) {
        (Some(context.to_owned()), 1)
    } else if first_chunk {
        (None, 0)
    } else {
        return Err(ParseError::InvalidHunk {
            message: format!(
                "Expected update hunk to start with a @@ context marker, got: '{header}'"
            ),
            line_number,
        });
    };
    if start >= lines.len() {
        return Err(no_lines(line_number.saturating_add(1)));
    }
    let mut chunk = Chunk {
        context,
        old_lines: Vec::new(),
        new_lines: Vec::new(),
        at_end_of_file: false,
    };
    let mut parsed = 0usize;
    for line in lines.iter().skip(start) {
        if *line == END_OF_FILE {
            if parsed == 0 {
                return Err(no_lines(line_number.saturating_add(1)));
            }
            chunk.at_end_of_file = true;
            parsed += 1;
            break;
        }
        let mut chars = line.chars();
        match chars.next() {
            None => {
                chunk.old_lines.push(String::new());
                chunk.new_lines.push(String::new());
            }
            Some(' ') => {
                chunk.old_lines.push(chars.as_str().to_owned());
                chunk.new_lines.push(chars.as_str().to_owned());
            }
            Some('+') => chunk.new_lines.push(chars.as_str().to_owned()),
            Some('-') => chunk.old_lines.push(chars.as_str().to_owned()),
            Some(_) => {
                if parsed == 0 {
                    return Err(ParseError::InvalidHunk {
                        message: format!(
                            "Unexpected line found in update hunk: '{line}'. Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)"
                        ),
                        line_number: line_number.saturating_add(1),
                    });
                }
                // The start of the next chunk.
                break;
            }
        }
        parsed += 1;
    }
    Ok((chunk, parsed.saturating_add(start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(patch: &str) -> String {
        match parse_patch(patch) {
            Ok(hunks) => panic!("accepted: {hunks:?}"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn the_envelope_must_open_and_close() {
        assert_eq!(
            refusal("bad"),
            "invalid patch: The first line of the patch must be '*** Begin Patch'"
        );
        assert_eq!(
            refusal(""),
            "invalid patch: The first line of the patch must be '*** Begin Patch'"
        );
        assert_eq!(
            refusal("*** Begin Patch\n*** Add File: a\n+x"),
            "invalid patch: The last line of the patch must be '*** End Patch'"
        );
    }

    #[test]
    fn hunks_are_refused_as_codex_refuses_them() {
        assert_eq!(
            refusal("*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch"),
            "invalid hunk at line 2, '*** Frobnicate File: foo' is not a valid hunk header. Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'"
        );
        assert_eq!(
            refusal("*** Begin Patch\n*** Update File: test.py\n*** End Patch"),
            "invalid hunk at line 2, Update file hunk for path 'test.py' is empty"
        );
        assert_eq!(
            refusal("*** Begin Patch\n*** Update File: a\n@@\n*** End Patch"),
            "invalid hunk at line 4, Update hunk does not contain any lines"
        );
        assert_eq!(
            refusal(
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n@@\n*** End of File\n*** End Patch"
            ),
            "invalid hunk at line 6, Update hunk does not contain any lines"
        );
        assert!(
            refusal("*** Begin Patch\n*** Update File: a\n@@\nbad\n*** End Patch")
                .starts_with("invalid hunk at line 4, Unexpected line found in update hunk: 'bad'")
        );
    }

    #[test]
    fn a_patch_is_read_leniently_where_codex_is_lenient() {
        let hunks = parse_patch(
            "<<'EOF'\n *** Begin Patch\n  *** Update File: f\n*** Move to: g\n import x\n+y\n@@ def f():\n-a\n+b\n*** End of File\n*** Add File: n\n+1\n*** Delete File: d\n*** End Patch \nEOF\n",
        );
        assert_eq!(
            hunks,
            Ok(vec![
                Hunk::Update {
                    path: "f".into(),
                    move_to: Some("g".into()),
                    chunks: vec![
                        Chunk {
                            context: None,
                            old_lines: vec!["import x".into()],
                            new_lines: vec!["import x".into(), "y".into()],
                            at_end_of_file: false,
                        },
                        Chunk {
                            context: Some("def f():".into()),
                            old_lines: vec!["a".into()],
                            new_lines: vec!["b".into()],
                            at_end_of_file: true,
                        },
                    ],
                },
                Hunk::Add {
                    path: "n".into(),
                    contents: "1\n".into()
                },
                Hunk::Delete { path: "d".into() },
            ])
        );
        assert_eq!(
            parse_patch("*** Begin Patch\n*** End Patch"),
            Ok(Vec::new())
        );
    }

    #[test]
    fn one_operation_s_diff_is_read_alone() {
        assert_eq!(
            parse_create_body("a", "+one\n+two\n"),
            Ok(Hunk::Add {
                path: "a".into(),
                contents: "one\ntwo\n".into()
            })
        );
        assert!(parse_create_body("a", "one\n").is_err());
        assert!(parse_update_body("a", "").is_err());
        assert!(parse_update_body("a", "@@\n-x\n+y\n*** Delete File: b\n").is_err());
        assert!(matches!(
            parse_update_body("a", "@@ fn f\n-x\n+y\n"),
            Ok(Hunk::Update { chunks, .. }) if chunks.len() == 1
        ));
    }
}
