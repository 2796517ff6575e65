//! User-given timeouts and the instants they end at. Every timeout a request can set goes through
//! [`user_timeout`], which caps it, and every "now + timeout" through [`Deadline::after`], which cannot
//! overflow: a request must never be able to panic the server with a huge number.

use std::time::Duration;

use tokio::time::Instant;

/// The longest timeout a request may ask for (24 h). Longer work belongs in a live process
/// (`/processes`), which has no timeout unless one is given.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a requested timeout was refused; the message names the bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimeoutError {
    #[error("timeout must be a positive number of seconds, got {0}")]
    NotPositive(f64),
    #[error("timeout must be at most {max} seconds (24 h), got {0}", max = MAX_TIMEOUT.as_secs())]
    TooLong(f64),
}

/// A flag's seconds as a positive duration, or the start-up error naming the flag.
pub fn positive_seconds(flag: &str, seconds: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| format!("{flag} must be a positive number of seconds, got {seconds}"))
}

/// A requested timeout in seconds: positive, finite and at most [`MAX_TIMEOUT`].
pub fn user_timeout(seconds: f64) -> Result<Duration, TimeoutError> {
    let duration = Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero());
    match duration {
        None if seconds.is_finite() && seconds > 0.0 => Err(TimeoutError::TooLong(seconds)),
        None => Err(TimeoutError::NotPositive(seconds)),
        Some(duration) if duration > MAX_TIMEOUT => Err(TimeoutError::TooLong(seconds)),
        Some(duration) => Ok(duration),
    }
}

/// A point in time computed without overflow: durations are capped at [`MAX_TIMEOUT`], which any
/// `Instant` can be advanced by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(Instant);

impl Deadline {
    pub fn after(duration: Duration) -> Deadline {
        Deadline::from(Instant::now(), duration)
    }

    pub fn from(start: Instant, duration: Duration) -> Deadline {
        let capped = duration.min(MAX_TIMEOUT);
        // Adding 24 h cannot overflow an `Instant` in practice; should it, an hour is still far off.
        Deadline(
            start
                .checked_add(capped)
                .or_else(|| start.checked_add(Duration::from_secs(60 * 60)))
                .unwrap_or(start),
        )
    }

    pub fn instant(self) -> Instant {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_and_odd_timeouts_are_refused_with_the_bound() {
        assert_eq!(user_timeout(1e19), Err(TimeoutError::TooLong(1e19)));
        assert_eq!(user_timeout(86_401.0), Err(TimeoutError::TooLong(86_401.0)));
        assert!(user_timeout(f64::INFINITY).is_err());
        assert!(user_timeout(f64::NAN).is_err());
        assert_eq!(user_timeout(0.0), Err(TimeoutError::NotPositive(0.0)));
        assert_eq!(user_timeout(-1.0), Err(TimeoutError::NotPositive(-1.0)));
        assert_eq!(user_timeout(86_400.0), Ok(MAX_TIMEOUT));
        assert!(
            user_timeout(1e19)
                .unwrap_err()
                .to_string()
                .contains("at most 86400")
        );
    }

    #[tokio::test]
    async fn a_deadline_never_overflows() {
        let now = Instant::now();
        let far = Deadline::from(now, Duration::MAX);
        assert_eq!(far.instant(), now + MAX_TIMEOUT);
        assert_eq!(Deadline::from(now, Duration::ZERO).instant(), now);
    }
}
