//! The `watch` family: `/watch` event streams of workspace changes.

use std::sync::Arc;

use crate::family::{Family, RoutesOnly, Setup};

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let hub = super::WatchHub::new(Arc::new(setup.workspace.clone()), setup.args.max_watches);
    Ok(Arc::new(RoutesOnly {
        name: "watch",
        routes: super::routes().with_state(Arc::new(hub)),
    }))
}
