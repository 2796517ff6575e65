//! The `workspace` family: the `/workspace/*` file routes.

use std::sync::Arc;

use crate::family::limits::{Limit, as_u64, bytes};
use crate::family::{Family, RoutesOnly, Setup};

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    Ok(Arc::new(RoutesOnly {
        name: "workspace",
        routes: super::routes().with_state(Arc::new(setup.workspace.clone())),
    }))
}

/// The bounds the `workspace` family keeps, for `boxd limits`.
pub fn limits() -> Vec<Limit> {
    vec![
        Limit::new(
            "workspace",
            "`paths` field of a batch upload",
            bytes(as_u64(super::MAX_BATCH_PATHS_BYTES)),
            "413",
        ),
        Limit::new(
            "workspace",
            "files of one batch upload",
            super::MAX_BATCH_FILES.to_string(),
            "413",
        ),
    ]
}
