//! One row of `boxd limits`: a bound boxd keeps, where it is enforced, and what happens past it. Each
//! family lists its own rows (its `limits`), next to the constants and flags they name.

use std::time::Duration;

pub struct Limit {
    pub area: &'static str,
    pub what: &'static str,
    pub value: String,
    pub past_it: &'static str,
}

impl Limit {
    pub fn new(
        area: &'static str,
        what: &'static str,
        value: impl Into<String>,
        past_it: &'static str,
    ) -> Limit {
        Limit {
            area,
            what,
            value: value.into(),
            past_it,
        }
    }
}

pub fn bytes(count: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if count >= MIB && count.is_multiple_of(MIB) {
        format!("{} MiB", count / MIB)
    } else if count >= KIB && count.is_multiple_of(KIB) {
        format!("{} KiB", count / KIB)
    } else {
        format!("{count} bytes")
    }
}

pub fn seconds(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds >= 3600.0 && seconds % 3600.0 == 0.0 {
        format!("{} h", seconds / 3600.0)
    } else {
        format!("{seconds} s")
    }
}

pub fn flag_seconds(seconds: f64, flag: &str) -> String {
    format!("{seconds} s (`{flag}`)")
}

pub fn count(value: usize) -> String {
    value.to_string()
}

pub fn as_u64(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}
