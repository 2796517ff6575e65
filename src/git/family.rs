//! The `git` family: the `/watcher/*` commit, diff and log routes over the workspace's repository.

use std::sync::Arc;

use crate::family::limits::{Limit, as_u64, bytes};
use crate::family::{Family, RoutesOnly, Setup};

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let watcher = super::GitWatcher::new(setup.workspace.real_root().to_path_buf());
    Ok(Arc::new(RoutesOnly {
        name: "git",
        routes: super::routes().with_state(Arc::new(watcher)),
    }))
}

/// The bounds the `git` family keeps, for `boxd limits`.
pub fn limits() -> Vec<Limit> {
    vec![
        Limit::new(
            "git",
            "`git_logs` commits",
            format!(
                "{} by default, at most {}",
                super::DEFAULT_LOG_LIMIT,
                super::MAX_LOG_LIMIT
            ),
            "400 naming the bound",
        ),
        Limit::new(
            "git",
            "diff text of one answer",
            bytes(as_u64(super::MAX_RESPONSE_DIFF_BYTES)),
            "the rest is left out, with a note",
        ),
    ]
}
