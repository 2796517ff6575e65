//! Fresh secrets from the OS's random source: the token of a server started without `SECRET_TOKEN`
//! (`boxd serve`, and `boxd init` for the serve it supervises) and the desktop stream's one-time passes.

/// A fresh random token: 24 random bytes, hex-encoded (48 characters).
pub fn generate() -> String {
    let mut bytes = [0u8; 24];
    if let Err(err) = getrandom::fill(&mut bytes) {
        // Without an OS random source nothing here is safe to serve.
        eprintln!("boxd: cannot read random bytes for a token: {err}");
        std::process::exit(1);
    }
    hex::encode(bytes)
}
