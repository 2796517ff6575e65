//! Bearer-token check on every route but the probes, in constant time, answering upstream's 403 shape.
//!
//! Two modes. With `SECRET_TOKEN` the token is fixed for the process's life. In pool mode
//! (`--pool-secret-file`, a warm pool's pod that exists before anyone claims it) there is no token yet:
//! every authenticated route is refused until one `POST /init`, authenticated with the pool secret,
//! sets the session token (see `init`); from then on only that token works and the pool secret is
//! refused.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::core::claim::Claim;
use crate::core::error::ApiError;

/// A pool secret shorter than this is refused at start: every pod of a pool shares it, so it must not
/// be guessable (`openssl rand -hex 32` gives 64 characters).
pub const MIN_POOL_SECRET: usize = 16;

#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl Token {
    pub fn new(secret: &str) -> Self {
        Token(Arc::from(secret.as_bytes()))
    }

    fn matches(&self, candidate: &[u8]) -> bool {
        // ct_eq answers false at once for a different length; the length of the secret is not the secret.
        bool::from(self.0.as_ref().ct_eq(candidate))
    }
}

/// Who may call the authenticated routes: shared by the middleware and `POST /init`.
#[derive(Clone)]
pub struct Auth(Arc<Gate>);

enum Gate {
    Fixed(Token),
    Pool(Pool),
}

/// A pooled pod's credentials: the pool secret until the claim, the session token after it.
pub struct Pool {
    secret: Token,
    session: OnceLock<Token>,
    /// Told once the session token is set.
    claimed: Claim,
    /// Held while one `POST /init` checks and sets the claim, so two racing inits cannot both win.
    claiming: Mutex<()>,
    /// Where a claim is kept beyond this process (`boxd init`), so a restart does not undo it.
    keeper: OnceLock<ClaimKeeper>,
}

/// Keeps a claim (session token, environment) beyond this process; blocking.
pub type ClaimKeeper = Arc<dyn Fn(&str, &[(String, String)]) -> Result<(), String> + Send + Sync>;

/// What a credential presented to `POST /init` is, in pool mode.
#[derive(Debug, PartialEq, Eq)]
pub enum InitCaller {
    /// The pool secret, before the claim: may initialise.
    Claimant,
    /// The pool secret or the session token after the claim: told it is too late (409).
    AlreadyClaimed,
    /// Anything else: 403, whatever the state (a stranger learns nothing about it).
    Refused,
}

impl Auth {
    pub fn fixed(token: &str) -> Self {
        Auth(Arc::new(Gate::Fixed(Token::new(token))))
    }

    /// Pool mode with the secret read from `path` (surrounding whitespace, such as the newline a
    /// mounted Secret or `echo` leaves, is not part of it).
    pub fn pool_from_file(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|err| format!("cannot read the pool secret file {}: {err}", path.display()))?;
        let secret = String::from_utf8(bytes)
            .map_err(|_| format!("the pool secret file {} is not UTF-8", path.display()))?;
        Auth::pool_from_secret(&secret, &path.display().to_string())
    }

    /// Pool mode with `secret` as given by `source` (`BOXD_POOL_SECRET`, a file), under the same rules:
    /// surrounding whitespace is not part of it, and it must not be guessable.
    pub fn pool_from_secret(secret: &str, source: &str) -> Result<Self, String> {
        let secret = secret.trim();
        if secret.len() < MIN_POOL_SECRET {
            return Err(format!(
                "the pool secret in {source} is {} bytes; it must be at least {MIN_POOL_SECRET} \
                 (e.g. `openssl rand -hex 32`)",
                secret.len()
            ));
        }
        Ok(Auth::pool(secret))
    }

    pub fn pool(secret: &str) -> Self {
        Auth(Arc::new(Gate::Pool(Pool {
            secret: Token::new(secret),
            session: OnceLock::new(),
            claimed: Claim::pending(),
            claiming: Mutex::new(()),
            keeper: OnceLock::new(),
        })))
    }

    /// Whether this boxd is claimed; it follows the claim in pool mode.
    pub fn claim_state(&self) -> Claim {
        match self.0.as_ref() {
            Gate::Pool(pool) => pool.claimed.clone(),
            Gate::Fixed(_) => Claim::claimed(),
        }
    }

    pub fn pool_mode(&self) -> Option<&Pool> {
        match self.0.as_ref() {
            Gate::Pool(pool) => Some(pool),
            Gate::Fixed(_) => None,
        }
    }

    /// `Ok` for a request whose credential opens the authenticated routes, else the 403's detail.
    pub fn check_headers(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        self.check(presented(headers))
    }

    /// Whether `presented` opens the authenticated routes (a token shown some other way than the
    /// header: the desktop viewer's page URL).
    pub fn accepts(&self, presented: &[u8]) -> bool {
        self.check(Some(presented)).is_ok()
    }

    /// `Ok` for a credential that opens the authenticated routes, else the 403's detail.
    fn check(&self, presented: Option<&[u8]>) -> Result<(), &'static str> {
        match self.0.as_ref() {
            Gate::Fixed(token) => match presented {
                None => Err(MISSING),
                Some(presented) if token.matches(presented) => Ok(()),
                Some(_) => Err(INVALID),
            },
            Gate::Pool(pool) => {
                let Some(session) = pool.session.get() else {
                    return Err(NOT_CLAIMED);
                };
                match presented {
                    None => Err(MISSING),
                    Some(presented) if session.matches(presented) => Ok(()),
                    Some(presented) if pool.secret.matches(presented) => {
                        Err(POOL_SECRET_AFTER_INIT)
                    }
                    Some(_) => Err(INVALID),
                }
            }
        }
    }
}

const MISSING: &str = "Missing or invalid authorization header";
const INVALID: &str = "Invalid secret token";
const NOT_CLAIMED: &str = "this boxd is a pooled sandbox that has not been claimed yet: until \
    POST /init (authenticated with the pool secret) sets its session token, only /livez, \
    /readyz/status and POST /init answer";
const POOL_SECRET_AFTER_INIT: &str =
    "the pool secret is not accepted after POST /init; use the session token it set";

impl Pool {
    /// Classifies the credential `POST /init` was sent with.
    pub fn caller(&self, headers: &HeaderMap) -> InitCaller {
        let Some(presented) = presented(headers) else {
            return InitCaller::Refused;
        };
        let secret = self.secret.matches(presented);
        match self.session.get() {
            None if secret => InitCaller::Claimant,
            Some(session) if secret || session.matches(presented) => InitCaller::AlreadyClaimed,
            _ => InitCaller::Refused,
        }
    }

    /// Whether `token` is the pool secret (a session token equal to it would keep the secret working).
    pub fn is_secret(&self, token: &str) -> bool {
        self.secret.matches(token.as_bytes())
    }

    /// Has `keeper` keep every claim from now on.
    pub fn keep_claims_with(&self, keeper: ClaimKeeper) {
        let _ = self.keeper.set(keeper);
    }

    /// Where claims are kept, if anywhere.
    pub fn keeper(&self) -> Option<ClaimKeeper> {
        self.keeper.get().cloned()
    }

    /// Runs `claim` and then sets the session token, unless another init got there first (false).
    /// `claim` runs before the token is set, so no request can use the session before it is done.
    pub fn claim(&self, session: &str, claim: impl FnOnce() -> bool) -> bool {
        let _claiming = self
            .claiming
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.session.get().is_some() || !claim() {
            return false;
        }
        let set = self.session.set(Token::new(session)).is_ok();
        if set {
            self.claimed.mark_claimed();
        }
        set
    }
}

fn presented(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| bearer_credentials(value.as_bytes()))
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110 section 11.1).
fn bearer_credentials(header: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = header.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

pub async fn require_bearer(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    match auth.check_headers(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(detail) => {
            crate::api::reject_unread_body(ApiError::Forbidden(detail.into()), request.into_body())
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        let token = Token::new("s3cret");
        assert!(token.matches(b"s3cret"));
        assert!(!token.matches(b"s3cre"));
        assert!(!token.matches(b"s3cret!"));
        assert!(!token.matches(b""));
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = format!("Bearer {token}").parse().expect("header value");
        headers.insert(header::AUTHORIZATION, value);
        headers
    }

    #[test]
    fn a_pool_opens_to_the_session_token_only_once_claimed() {
        let auth = Auth::pool("pool-secret-0123456789");
        let pool = auth.pool_mode().expect("pool mode");
        assert_eq!(
            auth.check(Some(b"pool-secret-0123456789")),
            Err(NOT_CLAIMED)
        );
        assert_eq!(auth.check(None), Err(NOT_CLAIMED));
        assert_eq!(pool.caller(&bearer("wrong")), InitCaller::Refused);
        assert_eq!(pool.caller(&HeaderMap::new()), InitCaller::Refused);
        assert_eq!(
            pool.caller(&bearer("pool-secret-0123456789")),
            InitCaller::Claimant
        );

        assert!(!pool.claim("session-token-abcdef", || false));
        assert_eq!(auth.check(Some(b"session-token-abcdef")), Err(NOT_CLAIMED));
        assert!(pool.claim("session-token-abcdef", || true));
        assert!(!pool.claim("another-session-token", || true));

        assert_eq!(auth.check(Some(b"session-token-abcdef")), Ok(()));
        assert_eq!(
            auth.check(Some(b"pool-secret-0123456789")),
            Err(POOL_SECRET_AFTER_INIT)
        );
        assert_eq!(auth.check(Some(b"another-session-token")), Err(INVALID));
        assert_eq!(auth.check(None), Err(MISSING));
        assert_eq!(
            pool.caller(&bearer("pool-secret-0123456789")),
            InitCaller::AlreadyClaimed
        );
        assert_eq!(
            pool.caller(&bearer("session-token-abcdef")),
            InitCaller::AlreadyClaimed
        );
        assert_eq!(pool.caller(&bearer("wrong")), InitCaller::Refused);
    }

    #[test]
    fn a_short_or_missing_pool_secret_file_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let short = dir.path().join("short");
        std::fs::write(&short, "tooshort\n").expect("write");
        let error = Auth::pool_from_file(&short).err().expect("refused");
        assert!(error.contains("at least 16"), "{error}");
        assert!(Auth::pool_from_file(&dir.path().join("absent")).is_err());
        let good = dir.path().join("good");
        std::fs::write(&good, "0123456789abcdef0123\n").expect("write");
        let auth = Auth::pool_from_file(&good).expect("accepted");
        let pool = auth.pool_mode().expect("pool mode");
        assert!(pool.is_secret("0123456789abcdef0123"));
        // The same rules for the secret given in BOXD_POOL_SECRET.
        let error = Auth::pool_from_secret("tooshort", "BOXD_POOL_SECRET")
            .err()
            .expect("refused");
        assert!(
            error.contains("BOXD_POOL_SECRET") && error.contains("at least 16"),
            "{error}"
        );
        let auth = Auth::pool_from_secret(" 0123456789abcdef0123\n", "BOXD_POOL_SECRET");
        assert!(auth.is_ok_and(|auth| {
            auth.pool_mode()
                .is_some_and(|pool| pool.is_secret("0123456789abcdef0123"))
        }));
    }
}
