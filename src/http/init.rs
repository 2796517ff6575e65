//! `POST /init`: the claim of a pooled pod. A warm pool's pods start before anyone claims them, with
//! no token of their own (agent-sandbox turns a claim that sets env into a cold start), so the
//! launcher that wins a pod hands it its session token and its children's environment here, once,
//! authenticated with the pool secret.
//!
//! Trust model: the pool secret is held by the launcher (a Kubernetes Secret mounted into every pod of
//! the pool and read by the launcher); it opens only this route and only until the first init
//! succeeds. A second init is 409 for a caller who holds the pool secret or the session token (the
//! launcher learns the pod is taken and must not use it) and 403 for anyone else. A pod nobody claims
//! answers nothing but its probes and this route.

use std::collections::BTreeMap;

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::{Json, http::HeaderMap};
use serde::Deserialize;

use super::auth::{Auth, InitCaller};
use crate::api::extract::ApiJson;
use crate::core::error::ApiError;

/// `POST /init` bodies are small: a token and some variables.
pub const MAX_INIT_BODY: usize = 1024 * 1024;
/// A session token shorter than this is refused: it is the only credential of the pod from now on.
pub const MIN_SESSION_TOKEN: usize = 16;
pub const MAX_SESSION_TOKEN: usize = 4096;
/// The variables' names and values together, at most: every child's exec carries them, and past
/// the kernel's argument-and-environment limit (ARG_MAX, 2 MiB by default) every spawn would fail.
pub const MAX_ENV_BYTES: usize = 256 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitRequest {
    /// The session token every later request must present as `Authorization: Bearer <token>`.
    token: String,
    /// Variables every child started from now on gets (commands, live processes, hosted MCP
    /// servers), over boxd's own environment and under the families' own (`DISPLAY`, ...).
    #[serde(default)]
    env: BTreeMap<String, String>,
}

pub async fn init(State(auth): State<Auth>, headers: HeaderMap, request: Request) -> Response {
    let Some(pool) = auth.pool_mode() else {
        // Outside pool mode the route is refused like any other to a caller without the token.
        let refusal = match auth.check_headers(&headers) {
            Err(detail) => ApiError::Forbidden(detail.into()),
            Ok(()) => ApiError::NotFound(
                "POST /init exists only in pool mode (BOXD_POOL_SECRET or --pool-secret-file); this boxd \
                 has its token from SECRET_TOKEN"
                    .into(),
            ),
        };
        return crate::api::reject_unread_body(refusal, request.into_body()).await;
    };
    match pool.caller(&headers) {
        InitCaller::Claimant => {}
        InitCaller::Refused => {
            return crate::api::reject_unread_body(
                ApiError::Forbidden(
                    "POST /init needs the pool secret as `Authorization: Bearer <secret>`".into(),
                ),
                request.into_body(),
            )
            .await;
        }
        InitCaller::AlreadyClaimed => {
            return crate::api::reject_unread_body(already_claimed(), request.into_body()).await;
        }
    }
    let body = match ApiJson::<InitRequest>::from_request(request, &()).await {
        Ok(ApiJson(body)) => body,
        Err(err) => return err.into_response(),
    };
    if let Err(err) = validate(&body, |token| pool.is_secret(token)) {
        return err.into_response();
    }
    let variables = body.env.len();
    let env: Vec<(String, String)> = body.env.into_iter().collect();
    let kept_env = env.clone();
    if !pool.claim(&body.token, || {
        crate::core::child::set_runtime_environment(env)
    }) {
        return already_claimed().into_response();
    }
    if let Some(keeper) = pool.keeper() {
        // Answered once kept, so a restart right after the answer is still claimed.
        let token = body.token.clone();
        let kept = tokio::task::spawn_blocking(move || keeper(&token, &kept_env)).await;
        match kept {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!("pool mode: the claim is not kept beyond a restart: {err}")
            }
            Err(err) => tracing::warn!("pool mode: the claim is not kept beyond a restart: {err}"),
        }
    }
    tracing::info!(
        variables,
        "pool mode: claimed by POST /init; only the session token is accepted from now on"
    );
    Json(serde_json::json!({ "initialized": true })).into_response()
}

fn already_claimed() -> ApiError {
    ApiError::Conflict(
        "this boxd was already initialised by an earlier POST /init; a pod serves one claim \
         (discard it and claim another)"
            .into(),
    )
}

fn validate(body: &InitRequest, is_pool_secret: impl Fn(&str) -> bool) -> Result<(), ApiError> {
    let token = &body.token;
    if !(MIN_SESSION_TOKEN..=MAX_SESSION_TOKEN).contains(&token.len()) {
        return Err(ApiError::BadRequest(format!(
            "token must be {MIN_SESSION_TOKEN} to {MAX_SESSION_TOKEN} bytes long, got {}",
            token.len()
        )));
    }
    // It travels in a header after `Bearer `: visible ASCII only, no spaces.
    if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(ApiError::BadRequest(
            "token must be visible ASCII characters without spaces".into(),
        ));
    }
    if is_pool_secret(token) {
        return Err(ApiError::BadRequest(
            "token must differ from the pool secret, which every pod of the pool shares".into(),
        ));
    }
    let mut total: usize = 0;
    for (name, value) in &body.env {
        if !is_variable_name(name) {
            return Err(ApiError::BadRequest(format!(
                "env: {name:?} is not a variable name (letters, digits and `_`, not starting \
                 with a digit)"
            )));
        }
        if name == "SECRET_TOKEN" {
            return Err(ApiError::BadRequest(
                "env: SECRET_TOKEN is boxd's own and never reaches its children".into(),
            ));
        }
        if value.contains('\0') {
            return Err(ApiError::BadRequest(format!(
                "env: the value of {name} contains a NUL byte"
            )));
        }
        // `=` and the NUL after each pair.
        total = total.saturating_add(name.len().saturating_add(value.len()).saturating_add(2));
    }
    if total > MAX_ENV_BYTES {
        return Err(ApiError::BadRequest(format!(
            "env is {total} bytes; at most {MAX_ENV_BYTES} fit in every child's environment"
        )));
    }
    Ok(())
}

fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first == b'_' || first.is_ascii_alphabetic())
        && bytes.all(|byte| byte == b'_' || byte.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(token: &str, env: &[(&str, &str)]) -> InitRequest {
        InitRequest {
            token: token.into(),
            env: env
                .iter()
                .map(|(name, value)| ((*name).into(), (*value).into()))
                .collect(),
        }
    }

    fn refused(body: &InitRequest) -> String {
        match validate(body, |token| token == "the-pool-secret-000") {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn variable_names() {
        assert!(is_variable_name("PATH"));
        assert!(is_variable_name("_x1"));
        assert!(!is_variable_name(""));
        assert!(!is_variable_name("1A"));
        assert!(!is_variable_name("A=B"));
        assert!(!is_variable_name("A B"));
    }

    #[test]
    fn init_bodies_that_fit_the_schema_but_not_the_rules_are_400() {
        let good = "session-token-0123456789";
        assert!(validate(&request(good, &[("A", "b")]), |_| false).is_ok());
        assert!(refused(&request("short", &[])).contains("16 to 4096"));
        assert!(refused(&request("has a space in it!!", &[])).contains("visible ASCII"));
        assert!(refused(&request("the-pool-secret-000", &[])).contains("differ"));
        assert!(refused(&request(good, &[("A=B", "c")])).contains("not a variable name"));
        assert!(refused(&request(good, &[("SECRET_TOKEN", "x")])).contains("never reaches"));
        assert!(refused(&request(good, &[("A", "b\0c")])).contains("NUL"));
        let big = "x".repeat(MAX_ENV_BYTES);
        assert!(refused(&request(good, &[("A", &big)])).contains("at most"));
    }
}
