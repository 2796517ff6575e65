//! The training sandboxes of agentscope-runtime (`TrainingSandbox`, BFCL and AppWorld): upstream's
//! env-service protocol (`/get_env_profile`, `/create`, `/step`, `/evaluate`, `/get_info`, `/release`)
//! served by boxd, each instance a Python worker of its own (`worker/`) under boxd's supervision.

mod family;
mod instances;
mod routes;
mod tenancy;
mod worker;

pub use family::{TrainingArgs, family, limits};
