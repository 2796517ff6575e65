//! Bearer-token check on every route but `/livez`, in constant time, answering upstream's 403 shape.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

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

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110 section 11.1).
fn bearer_credentials(header: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = header.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

pub async fn require_bearer(State(token): State<Token>, request: Request, next: Next) -> Response {
    let refusal = match request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| bearer_credentials(value.as_bytes()))
    {
        None => Some("Missing or invalid authorization header"),
        Some(presented) if !token.matches(presented) => Some("Invalid secret token"),
        Some(_) => None,
    };
    match refusal {
        None => next.run(request).await,
        Some(detail) => {
            super::reject_unread_body(ApiError::Forbidden(detail.into()), request.into_body()).await
        }
    }
}

/// A fresh random token for a server started without `SECRET_TOKEN`.
pub fn generate() -> String {
    let mut bytes = [0u8; 24];
    if let Err(err) = getrandom::fill(&mut bytes) {
        // Without an OS random source nothing here is safe to serve.
        eprintln!("boxd: cannot read random bytes for a token: {err}");
        std::process::exit(1);
    }
    hex::encode(bytes)
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
}
