//! The `filesystem` family: the eleven server-filesystem tools over the workspace and `--allow-dir`s.

use std::sync::Arc;

use crate::family::{Family, Setup};
use crate::tools::Tool;

struct Filesystem {
    tools: Vec<Tool>,
}

impl Family for Filesystem {
    fn name(&self) -> &'static str {
        "filesystem"
    }

    fn tools(&self) -> Vec<Tool> {
        self.tools.clone()
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::GROUP]
    }
}

pub fn family(setup: &Setup) -> Result<Arc<dyn Family>, String> {
    let mut dirs = vec![setup.workspace.root().to_path_buf()];
    dirs.extend(setup.args.allow_dirs.iter().cloned());
    let allowed = super::AllowedDirs::new(&dirs).map_err(|err| format!("--allow-dir: {err}"))?;
    Ok(Arc::new(Filesystem {
        tools: super::tools(allowed),
    }))
}
