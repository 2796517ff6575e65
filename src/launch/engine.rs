//! The few Docker Engine API calls the launcher makes, through bollard, each failure classified into a
//! `LaunchError`. Podman's compatible API (`podman system service`) answers them the same way.

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HostConfig, Mount,
    MountType, PortBinding,
};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    StopContainerOptions,
};
use futures_util::StreamExt;

use super::error::LaunchError;
use super::spec::{CONTAINER_PORT, Endpoint, LABEL, LABEL_TYPE, SandboxType};

/// Seconds any one engine call may take. Creating a container is the slowest (podman: ~0.1-0.5 s).
const CALL_TIMEOUT_SECS: u64 = 30;
/// The API version the launcher speaks: Docker 25+ (29 refuses anything older) and podman, which
/// ignores the version in the path. Asking the engine (`GET /version`) would cost a round trip.
const API_VERSION: bollard::ClientVersion = bollard::ClientVersion {
    major_version: 1,
    minor_version: 44,
};
/// Seconds `down` gives the entrypoint to stop boxd and nginx before the engine kills them.
const STOP_GRACE_SECS: i32 = 10;
/// How often, and how far apart, an inspect answer in a state outside the Docker API is asked again.
const UNDECODABLE_RETRIES: u32 = 30;
const UNDECODABLE_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Engine {
    docker: Docker,
    endpoint: String,
}

/// What `up` asks the engine for.
pub struct ContainerSpec<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub kind: SandboxType,
    pub token: &'a str,
    pub nginx_timeout: u32,
    pub port: Option<u16>,
    pub workspace: Option<&'a Path>,
}

/// A container's state as far as `up`'s wait cares.
pub enum State {
    Running,
    /// The exit code, when the engine knows it.
    Stopped {
        exit_code: Option<i64>,
    },
}

/// One of ours, as `ls` shows it.
pub struct Listed {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub state: String,
    pub status: String,
    pub port: Option<u16>,
}

impl Engine {
    pub fn connect(endpoint: &Endpoint) -> Result<Self, LaunchError> {
        let shown = endpoint.to_string();
        let docker = match endpoint {
            Endpoint::Unix(path) => {
                Docker::connect_with_unix(&path.to_string_lossy(), CALL_TIMEOUT_SECS, &API_VERSION)
            }
            Endpoint::Http(address) => {
                Docker::connect_with_http(address, CALL_TIMEOUT_SECS, &API_VERSION)
            }
        }
        .map_err(|err| LaunchError::from_engine("connect", &shown, err))?;
        Ok(Engine {
            docker,
            endpoint: shown,
        })
    }

    fn error(&self, action: &'static str, err: bollard::errors::Error) -> LaunchError {
        LaunchError::from_engine(action, &self.endpoint, err)
    }

    /// Inspects a container. Podman briefly reports a container whose process has exited as
    /// `stopped`, a state the Docker API (and so bollard's model) does not have, until its cleanup
    /// makes it `exited`: that answer is asked again, a bounded number of times.
    async fn inspect(&self, id: &str) -> Result<ContainerInspectResponse, LaunchError> {
        let mut attempts = 0;
        loop {
            match self.docker.inspect_container(id, None).await {
                Ok(inspected) => return Ok(inspected),
                Err(bollard::errors::Error::JsonDataError { message, .. })
                    if message.contains("unknown variant") && attempts < UNDECODABLE_RETRIES =>
                {
                    attempts += 1;
                    tracing::debug!(%message, "engine state not in the Docker API; asking again");
                    tokio::time::sleep(UNDECODABLE_RETRY_DELAY).await;
                }
                Err(err) => return Err(self.error("inspect", err)),
            }
        }
    }

    /// Creates the container (not started). A missing image is an error naming `make images`: the
    /// launcher does not pull, since the images are built here, not published.
    pub async fn create(&self, spec: &ContainerSpec<'_>) -> Result<String, LaunchError> {
        let binding = PortBinding {
            host_ip: Some("127.0.0.1".into()),
            // Empty: the engine picks a free port (`--port` absent or 0).
            host_port: Some(
                spec.port
                    .filter(|port| *port != 0)
                    .map(|port| port.to_string())
                    .unwrap_or_default(),
            ),
        };
        let mounts = spec.workspace.map(|path| {
            vec![Mount {
                target: Some("/workspace".into()),
                source: Some(path.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(false),
                ..Default::default()
            }]
        });
        let body = ContainerCreateBody {
            image: Some(spec.image.to_owned()),
            env: Some(vec![
                format!("SECRET_TOKEN={}", spec.token),
                format!("NGINX_TIMEOUT={}", spec.nginx_timeout),
            ]),
            labels: Some(HashMap::from([
                (LABEL.to_owned(), "1".to_owned()),
                (LABEL_TYPE.to_owned(), spec.kind.name().to_owned()),
            ])),
            exposed_ports: Some(vec![CONTAINER_PORT.to_owned()]),
            host_config: Some(HostConfig {
                port_bindings: Some(HashMap::from([(
                    CONTAINER_PORT.to_owned(),
                    Some(vec![binding]),
                )])),
                mounts,
                // Never privileged, mobile included (the SDK runs its mobile image privileged because
                // the emulator runs inside it): ours reaches the device over the network and needs no
                // device node, and a privileged container is root on the node for any tenant code.
                privileged: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(spec.name.to_owned()),
            ..Default::default()
        };
        match self.docker.create_container(Some(options), body).await {
            Ok(created) => Ok(created.id),
            Err(err) => match self.error("create", err) {
                err if err.engine_status() == Some(404) => Err(LaunchError::ImageMissing {
                    image: spec.image.to_owned(),
                    endpoint: self.endpoint.clone(),
                }),
                err => Err(err),
            },
        }
    }

    pub async fn start(&self, id: &str, port: Option<u16>) -> Result<(), LaunchError> {
        self.docker.start_container(id, None).await.map_err(|err| {
            match (self.error("start", err), port) {
                (LaunchError::Engine { message, .. }, Some(port)) if is_port_conflict(&message) => {
                    LaunchError::PortInUse { port }
                }
                (err, _) => err,
            }
        })
    }

    /// The host port the engine bound to the container's port 80.
    pub async fn host_port(&self, id: &str) -> Result<u16, LaunchError> {
        let inspected = self.inspect(id).await?;
        let bindings = inspected
            .network_settings
            .and_then(|settings| settings.ports)
            .and_then(|mut ports| ports.remove(CONTAINER_PORT))
            .flatten()
            .unwrap_or_default();
        bindings
            .iter()
            .filter_map(|binding| binding.host_port.as_deref())
            .find_map(|port| port.parse::<u16>().ok().filter(|port| *port != 0))
            .ok_or_else(|| LaunchError::NoPort(id.to_owned()))
    }

    pub async fn state(&self, id: &str) -> Result<State, LaunchError> {
        let inspected = self.inspect(id).await?;
        let state = inspected.state.unwrap_or_default();
        let running = state.running.unwrap_or(false)
            || matches!(
                state.status,
                Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::CREATED)
            );
        Ok(if running {
            State::Running
        } else {
            State::Stopped {
                exit_code: state.exit_code,
            }
        })
    }

    /// The container's last `lines` lines of output (stdout and stderr interleaved), best effort: the
    /// logs only decorate an error, so failing to read them must not hide it.
    pub async fn logs(&self, id: &str, lines: usize) -> String {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: lines.to_string(),
            ..Default::default()
        };
        let mut stream = self.docker.logs(id, Some(options));
        let mut text = String::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(output) => text.push_str(&String::from_utf8_lossy(&output.into_bytes())),
                Err(err) => {
                    text.push_str(&format!("\n(reading the logs failed: {err})"));
                    break;
                }
            }
        }
        text
    }

    /// Whether `id` names a container, and whether `boxd launch` made it.
    pub async fn ours(&self, id: &str) -> Result<bool, LaunchError> {
        match self.inspect(id).await {
            Ok(inspected) => Ok(inspected
                .config
                .and_then(|config| config.labels)
                .is_some_and(|labels| labels.contains_key(LABEL))),
            Err(err) if err.engine_status() == Some(404) => {
                Err(LaunchError::NoSuchContainer(id.to_owned()))
            }
            Err(err) => Err(err),
        }
    }

    /// Stops (SIGTERM, then the grace) and removes the container with its anonymous volumes.
    pub async fn stop_and_remove(&self, id: &str) -> Result<(), LaunchError> {
        let stop = StopContainerOptions {
            t: Some(STOP_GRACE_SECS),
            ..Default::default()
        };
        if let Err(err) = self.docker.stop_container(id, Some(stop)).await {
            // 304: already stopped. Anything else: the forced remove below still ends it.
            let err = self.error("stop", err);
            if err.engine_status() != Some(304) {
                tracing::debug!(%err, "stop failed; removing by force");
            }
        }
        self.remove(id).await
    }

    /// Removes at once (a container that never became ready has nothing to finish).
    pub async fn remove(&self, id: &str) -> Result<(), LaunchError> {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(err) => match self.error("remove", err) {
                err if err.engine_status() == Some(404) => Ok(()),
                err => Err(err),
            },
        }
    }

    /// Every container `boxd launch` made, running or not.
    pub async fn list(&self) -> Result<Vec<Listed>, LaunchError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![LABEL.to_owned()],
            )])),
            ..Default::default()
        };
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|err| self.error("list", err))?;
        Ok(containers
            .into_iter()
            .map(|container| {
                let labels = container.labels.unwrap_or_default();
                let port = container
                    .ports
                    .unwrap_or_default()
                    .into_iter()
                    .find_map(|port| {
                        (port.private_port == 80)
                            .then_some(port.public_port)
                            .flatten()
                    });
                Listed {
                    id: container.id.unwrap_or_default(),
                    name: container
                        .names
                        .and_then(|names| names.into_iter().next())
                        .map(|name| name.trim_start_matches('/').to_owned())
                        .unwrap_or_default(),
                    kind: labels
                        .get(LABEL_TYPE)
                        .cloned()
                        .unwrap_or_else(|| "?".into()),
                    state: container
                        .state
                        .map(|state| state.to_string())
                        .unwrap_or_default(),
                    status: container.status.unwrap_or_default(),
                    port,
                }
            })
            .collect())
    }
}

/// Docker says "port is already allocated", podman "address already in use".
fn is_port_conflict(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("address already in use") || message.contains("port is already allocated")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_engines_port_conflicts_are_recognised() {
        assert!(is_port_conflict(
            "rootlessport listen tcp 127.0.0.1:8080: bind: address already in use"
        ));
        assert!(is_port_conflict(
            "driver failed programming external connectivity: Bind for 127.0.0.1:8080 failed: port is already allocated"
        ));
        assert!(!is_port_conflict("no such image"));
    }
}
