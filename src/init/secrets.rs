//! The secrets boxd alone may hold. They travel from `boxd init` to `boxd serve` through the hand-over
//! (`handover`), so they are in no environment, argv, file or pipe.

use std::collections::BTreeMap;
/// Every variable that holds a secret: taken out of the environment of init and of serve before any
/// child exists (and blanked in `/proc/<pid>/environ`), handed over.
pub const SECRET_VARIABLES: &[&str] = &[TOKEN, ADB_KEY, POOL_SECRET];
/// The bearer token.
pub const TOKEN: &str = "SECRET_TOKEN";
/// Pool mode's secret, which opens `POST /init` of a pod nobody has claimed (a Secret through
/// `secretKeyRef`: no file in the container holds it, as a mounted Secret would).
pub const POOL_SECRET: &str = "BOXD_POOL_SECRET";
/// The private key the `adb` family authenticates to a device with (PEM).
pub const ADB_KEY: &str = "BOXD_ADB_KEY";

/// Secrets by variable name; an absent one is not set.
pub type Secrets = BTreeMap<String, String>;

/// The non-empty secrets among this process's environment variables.
pub fn from_environment() -> Secrets {
    SECRET_VARIABLES
        .iter()
        .filter_map(|name| {
            let value = std::env::var(name).ok().filter(|value| !value.is_empty())?;
            Some(((*name).to_string(), value))
        })
        .collect()
}
