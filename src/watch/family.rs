//! The `watch` family: `/watch` event streams of workspace changes.

use std::sync::Arc;

use crate::family::limits::{Limit, count};
use crate::family::{Family, RoutesOnly, Setup};

// The `watch` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Workspace watch streams open at once.
    #[arg(long, env = "BOXD_MAX_WATCHES", default_value_t = 16)]
    pub max_watches: usize,
}

pub fn family(setup: &Setup, args: &WatchArgs) -> Result<Arc<dyn Family>, String> {
    let hub = super::WatchHub::new(Arc::new(setup.workspace.clone()), args.max_watches);
    Ok(Arc::new(RoutesOnly {
        name: "watch",
        routes: super::routes().with_state(Arc::new(hub)),
    }))
}

/// The bounds the `watch` family keeps, for `boxd limits`.
pub fn limits(args: &WatchArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "watch",
            "watch streams open at once",
            format!("{} (`--max-watches`)", args.max_watches),
            "429",
        ),
        Limit::new(
            "watch",
            "events queued for a slow watcher",
            count(super::QUEUE),
            "an `overflow` event; some events are dropped",
        ),
    ]
}
