//! What can go wrong on the host side, each as one line a user can act on (the not-ready errors add
//! the container's last log lines below theirs).

use std::path::PathBuf;

/// The command that starts podman's Docker-compatible API where `--engine-socket` looks first.
pub const START_PODMAN: &str = "podman system service --time=0 unix:///run/podman/podman.sock &";

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(
        "cannot reach the container engine at {endpoint} ({reason}); start podman's API with \
         `{START_PODMAN}` (or start Docker), or point --engine-socket / DOCKER_HOST at a running engine"
    )]
    EngineUnreachable { endpoint: String, reason: String },

    #[error(
        "unsupported engine address {0:?}: give a Unix socket path, unix:///PATH, tcp://HOST:PORT or \
         http://HOST:PORT"
    )]
    UnsupportedEngine(String),

    #[error(
        "image {image} is not in the engine at {endpoint}; build the images with `make images` (or \
         pass --image)"
    )]
    ImageMissing { image: String, endpoint: String },

    #[error("127.0.0.1:{port} is already in use; pass another --port, or none for a free one")]
    PortInUse { port: u16 },

    #[error("workspace {}: {reason}", path.display())]
    Workspace { path: PathBuf, reason: String },

    #[error("no container {0} in the engine")]
    NoSuchContainer(String),

    #[error("container {0} was not started by `boxd launch`; leaving it alone")]
    NotOurs(String),

    #[error(
        "container {id} ({image}) was not ready within {seconds} s (last probe: {last_probe}); \
         removed it. Its last log lines:\n{logs}"
    )]
    NotReady {
        id: String,
        image: String,
        seconds: u64,
        last_probe: String,
        logs: String,
    },

    #[error(
        "container {id} ({image}) stopped before it was ready (exit status {status}); removed it. \
         Its last log lines:\n{logs}"
    )]
    Exited {
        id: String,
        image: String,
        status: String,
        logs: String,
    },

    #[error("the engine published no host port for the container's port 80 ({0})")]
    NoPort(String),

    #[error("interrupted; container {0} removed")]
    Interrupted(String),

    #[error("the engine refused {action}: {message} (HTTP {status})")]
    Engine {
        action: &'static str,
        status: u16,
        message: String,
    },

    #[error("{action}: {reason}")]
    Other {
        action: &'static str,
        reason: String,
    },
}

impl LaunchError {
    /// Classifies an engine call's failure: transport failures mean the engine is not there; an
    /// answer is the engine's own refusal.
    pub fn from_engine(action: &'static str, endpoint: &str, err: bollard::errors::Error) -> Self {
        use bollard::errors::Error as E;
        match err {
            E::DockerResponseServerError {
                status_code,
                message,
            } => LaunchError::Engine {
                action,
                status: status_code,
                message: message.trim().to_owned(),
            },
            E::SocketNotFoundError(path) => LaunchError::EngineUnreachable {
                endpoint: endpoint.to_owned(),
                reason: format!("no socket at {path}"),
            },
            E::RequestTimeoutError => LaunchError::EngineUnreachable {
                endpoint: endpoint.to_owned(),
                reason: format!("no answer to {action} in time"),
            },
            E::HyperLegacyError { err } if err.is_connect() => LaunchError::EngineUnreachable {
                endpoint: endpoint.to_owned(),
                reason: root_cause(&err),
            },
            E::IOError { err } => LaunchError::EngineUnreachable {
                endpoint: endpoint.to_owned(),
                reason: err.to_string(),
            },
            E::UnsupportedURISchemeError { uri } => LaunchError::UnsupportedEngine(uri),
            other => LaunchError::Other {
                action,
                reason: other.to_string(),
            },
        }
    }

    /// The HTTP status the engine answered, when it answered.
    pub fn engine_status(&self) -> Option<u16> {
        match self {
            LaunchError::Engine { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The innermost message of an error chain: hyper's outer ones ("client error (Connect)") say
/// nothing a user can act on, the OS's ("Connection refused") does.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> &'static str {
        "unix:///run/podman/podman.sock"
    }

    #[test]
    fn a_missing_socket_is_an_unreachable_engine_with_the_command_that_starts_one() {
        let err = LaunchError::from_engine(
            "create",
            endpoint(),
            bollard::errors::Error::SocketNotFoundError("/run/podman/podman.sock".into()),
        );
        assert!(
            matches!(err, LaunchError::EngineUnreachable { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("podman system service"), "{message}");
        assert!(
            message.contains("no socket at /run/podman/podman.sock"),
            "{message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
    }

    #[test]
    fn a_refused_connection_is_an_unreachable_engine() {
        let err = LaunchError::from_engine(
            "create",
            endpoint(),
            bollard::errors::Error::IOError {
                err: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            },
        );
        assert!(
            matches!(err, LaunchError::EngineUnreachable { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn an_engine_answer_keeps_its_status_and_message() {
        let err = LaunchError::from_engine(
            "create",
            endpoint(),
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                message: "no such image\n".into(),
            },
        );
        assert_eq!(err.engine_status(), Some(404));
        assert_eq!(
            err.to_string(),
            "the engine refused create: no such image (HTTP 404)"
        );
    }

    #[test]
    fn a_missing_image_names_the_make_target_in_one_line() {
        let message = LaunchError::ImageMissing {
            image: "docker.io/agentscope/runtime-sandbox-gui:latest".into(),
            endpoint: endpoint().into(),
        }
        .to_string();
        assert!(message.contains("`make images`"), "{message}");
        assert!(message.contains("--image"), "{message}");
        assert!(!message.contains('\n'), "one line: {message}");
    }
}
