//! The env-service routes of agentscope-runtime's `TrainingSandboxClient`, at the root and without a
//! token (the client sends none). Every POST takes `{env_type, task_id, instance_id, messages, params}`
//! (other fields ignored) and answers `{"success": true, "data": ...}`; errors are `{"detail": ...}`.
//! A body must say it is `application/json` (as the client's `requests` does): without a token, that
//! is what keeps a web page from posting here (a cross-site form or `text/plain` fetch needs no
//! preflight; `application/json` does, and boxd answers no preflight).

use std::sync::Arc;

use axum::extract::{FromRequest, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::instances::{Environment, ID_MAX};
use crate::api::extract::ApiJson;
use crate::core::error::ApiError;

pub fn routes(environment: Arc<Environment>) -> Router {
    Router::new()
        .route("/get_env_profile", post(profile))
        .route("/create", post(create))
        .route(
            "/step",
            post(|state, body| ask_instance(state, "step", body)),
        )
        .route(
            "/evaluate",
            post(|state, body| ask_instance(state, "evaluate", body)),
        )
        .route(
            "/get_info",
            post(|state, body| ask_instance(state, "get_info", body)),
        )
        .route("/release", post(release))
        .with_state(environment)
}

/// [`ApiJson`] for a body whose Content-Type is `application/json` (parameters such as a charset
/// allowed); any other, or none, is refused with 415 before the body is read.
struct JsonBody<T>(T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if !is_json(content_type) {
            let shown = if content_type.is_empty() {
                "none".to_owned()
            } else {
                format!("{:?}", content_type.chars().take(100).collect::<String>())
            };
            let detail = format!(
                "the body must be JSON sent as Content-Type: application/json (got {shown})"
            );
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Json(json!({ "detail": detail })),
            )
                .into_response());
        }
        let ApiJson(value) = ApiJson::<T>::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(JsonBody(value))
    }
}

/// `application/json`, in any case, with or without parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// The one body of every route. `messages` and `params` must be objects when given (`null` is refused,
/// as upstream's FastAPI model does).
#[derive(Debug, Deserialize)]
struct EnvRequest {
    #[serde(default)]
    env_type: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    instance_id: Option<String>,
    #[serde(default)]
    messages: Map<String, Value>,
    #[serde(default)]
    params: Map<String, Value>,
}

type Answer = Result<Json<Value>, ApiError>;

fn success(data: Value) -> Answer {
    Ok(Json(json!({"success": true, "data": data})))
}

/// The request's `env_type`, which must be the one this sandbox serves.
fn served_env_type(environment: &Environment, request: &EnvRequest) -> Result<(), ApiError> {
    match request.env_type.as_deref() {
        None | Some("") => Err(ApiError::BadRequest("env_type is required".into())),
        Some(asked) if asked == environment.name() => Ok(()),
        Some(asked) => Err(ApiError::BadRequest(format!(
            "unknown env_type {asked:?}: this sandbox serves {:?}",
            environment.name()
        ))),
    }
}

fn required_instance_id(request: &EnvRequest) -> Result<&str, ApiError> {
    match request.instance_id.as_deref() {
        None | Some("") => Err(ApiError::BadRequest("instance_id is required".into())),
        Some(id) => Ok(id),
    }
}

async fn profile(
    State(environment): State<Arc<Environment>>,
    JsonBody(request): JsonBody<EnvRequest>,
) -> Answer {
    served_env_type(&environment, &request)?;
    let mut fields = Map::new();
    fields.insert("params".into(), Value::Object(request.params));
    success(environment.ask_spare("profile", fields).await?)
}

async fn create(
    State(environment): State<Arc<Environment>>,
    JsonBody(request): JsonBody<EnvRequest>,
) -> Answer {
    let task_id = match request.task_id.as_deref() {
        None | Some("") => return Err(ApiError::BadRequest("task_id is required".into())),
        Some(task_id) if task_id.len() > ID_MAX => {
            return Err(ApiError::BadRequest(format!(
                "task_id must be at most {ID_MAX} bytes"
            )));
        }
        Some(task_id) => task_id.to_owned(),
    };
    served_env_type(&environment, &request)?;
    let instance_id = match request.instance_id.as_deref() {
        None | Some("") => generated_instance_id()?,
        Some(id) if id.len() > ID_MAX || id.chars().any(char::is_control) => {
            return Err(ApiError::BadRequest(format!(
                "instance_id must be at most {ID_MAX} bytes without control characters"
            )));
        }
        Some(id) => id.to_owned(),
    };
    success(
        environment
            .create(&task_id, &instance_id, request.params)
            .await?,
    )
}

/// `exp_{unix seconds}_{8 hex digits}`, upstream's form.
fn generated_instance_id() -> Result<String, ApiError> {
    let mut random = [0u8; 4];
    getrandom::fill(&mut random)
        .map_err(|err| ApiError::Internal(format!("no randomness for an instance id: {err}")))?;
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    Ok(format!("exp_{seconds}_{}", hex::encode(random)))
}

/// `/step`, `/evaluate` and `/get_info`: `op` with the request's messages and params, to the worker of
/// its instance.
async fn ask_instance(
    State(environment): State<Arc<Environment>>,
    op: &'static str,
    JsonBody(request): JsonBody<EnvRequest>,
) -> Answer {
    let instance_id = required_instance_id(&request)?.to_owned();
    let mut fields = Map::new();
    fields.insert("messages".into(), Value::Object(request.messages));
    fields.insert("params".into(), Value::Object(request.params));
    success(environment.ask(&instance_id, op, fields).await?)
}

/// Always 200: `success` says whether there was such an instance (upstream's contract).
async fn release(
    State(environment): State<Arc<Environment>>,
    JsonBody(request): JsonBody<EnvRequest>,
) -> Answer {
    let released = environment.release(required_instance_id(&request)?).await;
    Ok(Json(json!({"success": released, "data": null})))
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn only_json_is_taken() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json(""));
        assert!(!is_json("text/plain"));
        assert!(!is_json("text/plain; a=application/json"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json("multipart/form-data; boundary=x"));
        assert!(!is_json("application/jsonp"));
    }
}
