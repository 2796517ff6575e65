//! The secrets boxd alone may hold, and how they travel from `boxd init` to `boxd serve`: a JSON object
//! on a pipe (`--secrets-fd`), read once and closed, so they are in no environment, argv or file.

use std::collections::BTreeMap;
use std::io::Read;

/// Every variable that holds a secret: taken out of the environment of init and of serve before any
/// child exists (and blanked in `/proc/<pid>/environ`), handed over on the pipe.
pub const SECRET_VARIABLES: &[&str] = &[TOKEN, ADB_KEY, POOL_SECRET];
/// The bearer token.
pub const TOKEN: &str = "SECRET_TOKEN";
/// Pool mode's secret, which opens `POST /init` of a pod nobody has claimed (a Secret through
/// `secretKeyRef`: no file in the container holds it, as a mounted Secret would).
pub const POOL_SECRET: &str = "BOXD_POOL_SECRET";
/// The private key the `adb` family authenticates to a device with (PEM).
pub const ADB_KEY: &str = "BOXD_ADB_KEY";
/// The most the pipe may carry: a token, a pool secret and an RSA key are a few KiB.
pub const MAX_SECRETS_BYTES: usize = 64 * 1024;

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

pub fn encode(secrets: &Secrets) -> Result<Vec<u8>, String> {
    let encoded = serde_json::to_vec(secrets).map_err(|err| err.to_string())?;
    if encoded.len() > MAX_SECRETS_BYTES {
        return Err(format!(
            "the secrets ({}) are longer than {MAX_SECRETS_BYTES} bytes",
            SECRET_VARIABLES.join(", ")
        ));
    }
    Ok(encoded)
}

/// What `boxd init` wrote on the pipe at `fd`, read to its end; the descriptor is closed.
pub fn read(fd: i32) -> Result<Secrets, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: `boxd init` placed this descriptor for this process alone; nothing else owns it.
    let pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let limit = u64::try_from(MAX_SECRETS_BYTES)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let mut encoded = Vec::new();
    pipe.take(limit)
        .read_to_end(&mut encoded)
        .map_err(|err| format!("cannot read the secrets from descriptor {fd}: {err}"))?;
    if encoded.len() > MAX_SECRETS_BYTES {
        return Err(format!(
            "the secrets are longer than {MAX_SECRETS_BYTES} bytes"
        ));
    }
    let secrets: Secrets = serde_json::from_slice(&encoded)
        .map_err(|err| format!("the secrets on descriptor {fd} are not a JSON object: {err}"))?;
    if let Some(unknown) = secrets
        .keys()
        .find(|name| !SECRET_VARIABLES.contains(&name.as_str()))
    {
        return Err(format!("unknown secret {unknown} on descriptor {fd}"));
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_unknown_names_are_refused() {
        let secrets = Secrets::from([
            (TOKEN.to_string(), "t".to_string()),
            (
                ADB_KEY.to_string(),
                "-----BEGIN PRIVATE KEY-----\nabc\n".to_string(),
            ),
        ]);
        let encoded = encode(&secrets).unwrap_or_default();
        let decoded: Secrets = serde_json::from_slice(&encoded).unwrap_or_default();
        assert_eq!(decoded, secrets);
        let too_long = Secrets::from([(TOKEN.to_string(), "x".repeat(MAX_SECRETS_BYTES))]);
        assert!(encode(&too_long).is_err());
    }
}
