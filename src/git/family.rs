//! The `git` family: the `/watcher/*` commit, diff and log routes over the workspace's repository.

use std::sync::Arc;

use crate::family::{Family, RoutesOnly, Setup};

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let watcher = super::GitWatcher::new(setup.workspace.real_root().to_path_buf());
    Ok(Arc::new(RoutesOnly {
        name: "git",
        routes: super::routes().with_state(Arc::new(watcher)),
    }))
}
