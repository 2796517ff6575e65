//! The one error type of the HTTP API, as plain data: what went wrong and the words a client reads.
//! How it becomes an answer (its status, the `{"detail"}` body, `Retry-After`, the reason phrase) is
//! `api::response`'s; how sandboxd's APIs name it, `sandboxd`'s. Nothing here knows HTTP.

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request that fits its schema but asks for something unacceptable (an empty command, a timeout
    /// out of range, a NUL in a path), or a malformed query.
    #[error("{0}")]
    BadRequest(String),
    /// A missing or wrong token, a path outside the workspace, or a file the system does not let boxd
    /// touch; the detail says which (each has its own wording).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    RangeNotSatisfiable(String),
    /// A body, or a tool's arguments, that does not parse or does not fit the schema (a wrong type, a
    /// missing field): FastAPI's status for the same case, which upstream's clients already know.
    #[error("{0}")]
    Unprocessable(String),
    #[error("{0}")]
    InsufficientStorage(String),
    /// A configured limit (concurrent processes, watches) is reached.
    #[error("{0}")]
    TooManyRequests(String),
    /// A hosted MCP server (or other upstream peer) failed.
    #[error("{0}")]
    BadGateway(String),
    #[error("{0}")]
    GatewayTimeout(String),
    /// Work that must wait its turn found the queue full or did not get its turn within its bound
    /// (a concurrency cap); the client may retry after the given seconds.
    #[error("{message}")]
    Busy {
        message: String,
        retry_after_seconds: u64,
    },
    /// A family that is starting or failed; the client may retry after the given seconds.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after_seconds: u64,
    },
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// Maps a filesystem error on `what` (a path as the user gave it) to the kind a client can act on.
    pub fn from_io(err: &std::io::Error, what: &str) -> ApiError {
        use std::io::ErrorKind as K;
        let message = format!("{what}: {err}");
        match err.kind() {
            K::NotFound => ApiError::NotFound(message),
            K::PermissionDenied | K::ReadOnlyFilesystem => {
                ApiError::Forbidden(format!("{what}: the system does not allow this ({err})"))
            }
            K::AlreadyExists | K::IsADirectory | K::NotADirectory | K::DirectoryNotEmpty => {
                ApiError::Conflict(message)
            }
            K::InvalidInput | K::InvalidFilename | K::CrossesDevices => {
                ApiError::BadRequest(message)
            }
            K::StorageFull | K::QuotaExceeded | K::FileTooLarge => {
                ApiError::InsufficientStorage(message)
            }
            _ => ApiError::Internal(message),
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(err: tokio::task::JoinError) -> Self {
        ApiError::Internal(format!("worker task failed: {err}"))
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
