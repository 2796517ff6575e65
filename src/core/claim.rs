//! Whether this boxd serves its session yet: from the start with a fixed token; in pool mode only once
//! `POST /init` claimed it. What serves without boxd's token (sandboxd's listeners) waits for it, so a
//! warm pod nobody has claimed runs nothing for anyone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Debug)]
pub struct Claim(Arc<AtomicBool>);

impl Claim {
    /// A boxd with its token from the start.
    pub fn claimed() -> Claim {
        Claim(Arc::new(AtomicBool::new(true)))
    }

    /// A pooled boxd before its claim.
    pub fn pending() -> Claim {
        Claim(Arc::new(AtomicBool::new(false)))
    }

    pub fn mark_claimed(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_claimed(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}
