//! Whether a client has come yet: the listeners say so on every request (only the first one counts),
//! and a family that holds something costly only once a client comes (the IPython kernel) waits for it
//! in its start. So a sandbox nobody contacted holds nothing the families can put off, and no listener
//! needs to know which family waits.

use super::latch::Latch;

static CAME: Latch = Latch::new();

/// A request reached boxd (any listener, any route). Never waits; after the first call, one atomic load.
pub fn arrived() {
    if CAME.open() {
        tracing::debug!("the first request reached boxd");
    }
}

/// Whether a request has reached boxd.
pub fn has_come() -> bool {
    CAME.is_open()
}

/// Resolves once a request has reached boxd (at once if one already has).
pub async fn wait() {
    CAME.opened().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_on_the_first_request_and_later_ones_pass_at_once() {
        let waiter = tokio::spawn(wait());
        arrived();
        assert!(has_come());
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .is_ok()
        );
        arrived();
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), wait())
                .await
                .is_ok()
        );
    }
}
