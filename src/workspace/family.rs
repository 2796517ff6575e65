//! The `workspace` family: the `/workspace/*` file routes.

use std::sync::Arc;

use crate::family::{Family, RoutesOnly, Setup};

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    Ok(Arc::new(RoutesOnly {
        name: "workspace",
        routes: super::routes().with_state(Arc::new(setup.workspace.clone())),
    }))
}
