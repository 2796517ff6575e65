//! The part of boxd's start that its first answer does not need (stopping what a previous boxd of the
//! same instance left, the guard, the families' start) waits until that answer is out. On a small
//! machine it would otherwise take the cores the first answer needs: on 2 cores with the client on one
//! of them, the `/proc` scan, the guard's exec and the families' set-up made the first `/healthz` ~0.7
//! ms later. It never waits for long: a request that needs a family opens the gate at once (it would
//! otherwise wait for the very start it holds up), and a sandbox nobody contacts starts after
//! [`HOLD_AT_MOST`].

use std::time::Duration;

use super::latch::Latch;

/// How long the background start waits for a first answer at most.
pub const HOLD_AT_MOST: Duration = Duration::from_millis(20);

static GATE: Latch = Latch::new();

/// The first answer is out, or a request waits for something the background start brings. Never waits.
pub fn open() {
    if GATE.open() {
        tracing::debug!("the background start may begin");
    }
}

/// Resolves once the gate is open, or after [`HOLD_AT_MOST`].
pub async fn opened() {
    let _ = tokio::time::timeout(HOLD_AT_MOST, GATE.opened()).await;
}
