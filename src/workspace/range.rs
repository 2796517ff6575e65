//! The single-range subset of HTTP `Range` (RFC 9110 §14): `bytes=a-b`, `bytes=a-`, `bytes=-n`.
//! Multiple ranges or other units are answered with the whole file, which the RFC allows.

use crate::core::error::{ApiError, ApiResult};

#[derive(Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end_inclusive: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.end_inclusive - self.start + 1
    }
}

/// `Ok(None)`: serve the whole file. `Err`: 416.
pub fn parse(header: &str, size: u64) -> ApiResult<Option<ByteRange>> {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let unsatisfiable =
        || ApiError::RangeNotSatisfiable(format!("range {header:?} outside 0..{size}"));
    let parse_number = |text: &str| text.trim().parse::<u64>().ok();
    let range = match (first.trim().is_empty(), last.trim().is_empty()) {
        (true, false) => {
            let suffix = parse_number(last).ok_or_else(unsatisfiable)?;
            if suffix == 0 || size == 0 {
                return Err(unsatisfiable());
            }
            ByteRange {
                start: size.saturating_sub(suffix),
                end_inclusive: size - 1,
            }
        }
        (false, _) => {
            let start = parse_number(first).ok_or_else(unsatisfiable)?;
            let end = if last.trim().is_empty() {
                size.saturating_sub(1)
            } else {
                parse_number(last)
                    .ok_or_else(unsatisfiable)?
                    .min(size.saturating_sub(1))
            };
            if start >= size || end < start {
                return Err(unsatisfiable());
            }
            ByteRange {
                start,
                end_inclusive: end,
            }
        }
        (true, true) => return Ok(None),
    };
    Ok(Some(range))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end_inclusive: u64) -> Option<ByteRange> {
        Some(ByteRange {
            start,
            end_inclusive,
        })
    }

    #[test]
    fn forms_of_a_single_range() {
        assert_eq!(parse("bytes=0-9", 100).unwrap(), range(0, 9));
        assert_eq!(parse("bytes=90-", 100).unwrap(), range(90, 99));
        assert_eq!(parse("bytes=-10", 100).unwrap(), range(90, 99));
        assert_eq!(parse("bytes=95-200", 100).unwrap(), range(95, 99));
        assert_eq!(parse("bytes=-500", 100).unwrap(), range(0, 99));
    }

    #[test]
    fn unsatisfiable_and_ignored_forms() {
        assert!(parse("bytes=100-", 100).is_err());
        assert!(parse("bytes=5-2", 100).is_err());
        assert!(parse("bytes=-0", 100).is_err());
        assert_eq!(parse("bytes=0-1,5-6", 100).unwrap(), None);
        assert_eq!(parse("items=0-1", 100).unwrap(), None);
    }
}
