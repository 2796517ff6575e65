//! The device: one thread that owns the way to it and runs the commands sent to it, one at a time, in the
//! order they came (two agents' taps never interleave, and the blocking socket I/O never holds an async
//! worker). It picks and connects the device on first use and again after it is lost; the family's health
//! says whether the device is reachable.

use std::sync::Arc;
use std::time::Duration;

use super::key::AdbKey;
use super::wire::{Deadline, Direct, Output, Server, WireError};
use crate::core::health::Health;
use crate::core::owner::{Loss, Owner, OwnerError};
use crate::core::ticket::{Ticket, WithdrawOnDrop};

/// Commands waiting for the device beyond this are refused as busy (429), not queued without end.
pub const MAX_QUEUED_COMMANDS: usize = 64;
/// Connecting, and asking the server for its devices.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a command waits for its turn (commands queued ahead of it); then it is withdrawn and never
/// runs. Once it runs, its own bound applies.
pub const TURN_WAIT: Duration = Duration::from_secs(30);

/// Where the device is: straight over TCP, or whichever device an adb server has (the one named, else the
/// only one).
#[derive(Clone)]
pub enum Target {
    Direct(String),
    Server {
        server: Server,
        serial: Option<String>,
    },
}

impl Target {
    fn describe(&self) -> String {
        match self {
            Target::Direct(address) => format!("device {address}"),
            Target::Server {
                server,
                serial: Some(serial),
            } => format!("device {serial} (adb server {})", server.address),
            Target::Server { server, .. } => format!("the adb server at {}", server.address),
        }
    }
}

#[derive(Clone)]
pub struct Device {
    owner: Owner<Connector>,
}

enum Live {
    Direct(Direct),
    Server { server: Server, serial: String },
}

struct Connector {
    target: Target,
    /// What a direct device that asks for authorization is answered with (`BOXD_ADB_KEY`).
    key: Option<Arc<AdbKey>>,
    live: Option<Live>,
    loss: Arc<Loss>,
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// No device to talk to, or it stopped answering: the family is failed until it is back.
    #[error("{0}")]
    Unreachable(String),
    /// The device answered but refused this command (too long, a service it lacks).
    #[error("{0}")]
    Refused(String),
    #[error("the device is busy: {MAX_QUEUED_COMMANDS} commands are waiting; try again shortly")]
    Busy,
    /// The command's turn did not come within [`TURN_WAIT`]: withdrawn, it never reached the device.
    #[error(
        "the device was busy with earlier commands for {} s; this command was withdrawn and did not run",
        TURN_WAIT.as_secs()
    )]
    TurnTimeout,
    /// Its caller went away before its turn; nobody reads this.
    #[error("withdrawn before its turn")]
    Withdrawn,
    #[error("the device thread stopped")]
    Stopped,
}

impl Device {
    pub fn start(target: Target, key: Option<Arc<AdbKey>>) -> Result<Device, String> {
        let owner = Owner::start("boxd-adb", MAX_QUEUED_COMMANDS, |loss| Connector {
            target,
            key,
            live: None,
            loss,
        })?;
        Ok(Device { owner })
    }

    /// Runs `command` in the device's shell, within `timeout` once its turn comes.
    pub async fn shell(&self, command: String, timeout: Duration) -> Result<Output, DeviceError> {
        self.run(move |connector| connector.shell(&command, timeout))
            .await
    }

    /// Connects if needed and says which device answers: its description and its serial and state
    /// (for health), and what `getprop sys.boot_completed` said.
    pub async fn probe(&self) -> Result<(String, String, Output), DeviceError> {
        self.run(|connector| {
            let output = connector.shell("getprop sys.boot_completed", CONNECT_TIMEOUT)?;
            Ok((connector.current(), connector.serial_and_state(), output))
        })
        .await
    }

    /// Runs `work` on the device's thread once its turn comes. A command whose caller went away, or
    /// whose turn did not come within [`TURN_WAIT`], is withdrawn and never runs (a tap retried after a
    /// timeout must not land twice); once running, it is bounded by its own deadline on the thread.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connector) -> Result<T, DeviceError> + Send + 'static,
    ) -> Result<T, DeviceError> {
        let ticket = Ticket::new();
        let claim = Arc::clone(&ticket);
        let job = move |connector: &mut Connector| {
            if !claim.start() {
                return Err(DeviceError::Withdrawn);
            }
            work(connector)
        };
        let guard = WithdrawOnDrop::new(&ticket, "an adb command");
        let answer = self.owner.run(job, None);
        tokio::pin!(answer);
        let answered = tokio::select! {
            answered = &mut answer => answered,
            () = tokio::time::sleep(TURN_WAIT) => {
                if ticket.withdraw() {
                    tracing::warn!(wait = ?TURN_WAIT, "an adb command was withdrawn: its turn did not come in time");
                    return Err(DeviceError::TurnTimeout);
                }
                drop(guard);
                answer.await
            }
        };
        match answered {
            Ok(outcome) => outcome,
            Err(OwnerError::Busy(_)) => Err(DeviceError::Busy),
            Err(OwnerError::Stopped) => Err(DeviceError::Stopped),
        }
    }

    pub fn set_health(&self, health: Health) {
        self.owner.set_health(health);
    }

    /// Resolves when a command found the device gone.
    pub async fn lost(&self) {
        self.owner.lost().await;
    }
}

impl Connector {
    fn current(&self) -> String {
        match &self.live {
            Some(Live::Direct(direct)) => format!(
                "device {} ({})",
                match &self.target {
                    Target::Direct(address) => address.as_str(),
                    Target::Server { .. } => "",
                },
                direct.banner
            ),
            Some(Live::Server { server, serial }) => {
                format!("device {serial} (adb server {})", server.address)
            }
            None => self.target.describe(),
        }
    }

    /// `SERIAL: STATE` as `adb devices` shows it: a direct device's state is the first field of its
    /// banner; one chosen from a server is in state `device` (the only one chosen).
    fn serial_and_state(&self) -> String {
        match (&self.live, &self.target) {
            (Some(Live::Direct(direct)), Target::Direct(address)) => {
                let state = direct.banner.split(':').next().unwrap_or_default();
                format!(
                    "{address}: {}",
                    if state.is_empty() { "device" } else { state }
                )
            }
            (Some(Live::Server { serial, .. }), _) => format!("{serial}: device"),
            _ => self.target.describe(),
        }
    }

    fn connect(&self) -> Result<Live, DeviceError> {
        let deadline = Deadline::after(CONNECT_TIMEOUT);
        match &self.target {
            Target::Direct(address) => {
                let direct =
                    Direct::connect(address, self.key.as_deref(), deadline).map_err(|err| {
                        DeviceError::Unreachable(match err {
                            // The device answered and refused boxd (authorization, TLS): its own
                            // words, which name the address; "unreachable" would mislead.
                            WireError::Refused(reason) => reason,
                            other => format!("device {address} unreachable: {other}"),
                        })
                    })?;
                tracing::info!(device = %address, banner = %direct.banner, "connected to the adb device");
                Ok(Live::Direct(direct))
            }
            Target::Server { server, serial } => {
                let devices = server
                    .devices(deadline)
                    .map_err(|err| DeviceError::Unreachable(err.to_string()))?;
                let serial = choose(&devices, serial.as_deref(), &server.address)
                    .map_err(DeviceError::Unreachable)?;
                tracing::info!(device = %serial, server = %server.address, "using the adb device");
                Ok(Live::Server {
                    server: server.clone(),
                    serial,
                })
            }
        }
    }

    fn shell(&mut self, command: &str, timeout: Duration) -> Result<Output, DeviceError> {
        // A connection that went stale while idle fails before the device accepted the command: one
        // fresh connection may then run it, and it still runs once.
        for attempt in 0..2 {
            let fresh = self.live.is_none();
            let live = match self.live.take() {
                Some(live) => live,
                None => match self.connect() {
                    Ok(live) => live,
                    Err(err) => {
                        self.lost(&err);
                        return Err(err);
                    }
                },
            };
            let deadline = Deadline::after(timeout);
            let (outcome, live) = match live {
                Live::Direct(mut direct) => {
                    (direct.shell(command, deadline), Some(Live::Direct(direct)))
                }
                Live::Server { server, serial } => {
                    let outcome = server.shell(&serial, command, deadline);
                    (outcome, Some(Live::Server { server, serial }))
                }
            };
            match outcome {
                Ok(output) => {
                    self.live = live;
                    return Ok(output);
                }
                Err(WireError::Refused(reason)) => {
                    // The transport is intact when the device refuses: keep it.
                    self.live = live;
                    return Err(DeviceError::Refused(reason));
                }
                Err(WireError::TooLarge) => {
                    // The rest of the output is unread: the connection cannot carry another command.
                    return Err(DeviceError::Refused(WireError::TooLarge.to_string()));
                }
                Err(err) if !err.opened() && !fresh && attempt == 0 => {
                    tracing::debug!(error = %err, "adb connection went stale; reconnecting");
                }
                Err(err) => {
                    let err = DeviceError::Unreachable(format!(
                        "{} did not answer: {err}",
                        self.target.describe()
                    ));
                    self.lost(&err);
                    return Err(err);
                }
            }
        }
        Err(DeviceError::Unreachable(format!(
            "{} unreachable",
            self.target.describe()
        )))
    }

    fn lost(&self, err: &DeviceError) {
        self.loss.report(err.to_string());
    }
}

/// `ANDROID_SERIAL`'s device if it is there and ready, else the only ready device, else why not.
fn choose(
    devices: &[(String, String)],
    wanted: Option<&str>,
    server: &str,
) -> Result<String, String> {
    let listing = || {
        if devices.is_empty() {
            "none".to_owned()
        } else {
            devices
                .iter()
                .map(|(serial, state)| format!("{serial} ({state})"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    if let Some(wanted) = wanted {
        return match devices.iter().find(|(serial, _)| serial == wanted) {
            Some((serial, state)) if state == "device" => Ok(serial.clone()),
            Some((serial, state)) => Err(format!(
                "device {serial} (ANDROID_SERIAL) is {state}, not ready"
            )),
            None => Err(format!(
                "device {wanted} (ANDROID_SERIAL) is not attached to the adb server at {server}; attached: {}",
                listing()
            )),
        };
    }
    let ready: Vec<&String> = devices
        .iter()
        .filter(|(_, state)| state == "device")
        .map(|(serial, _)| serial)
        .collect();
    match ready.as_slice() {
        [only] => Ok((*only).clone()),
        [] => Err(format!(
            "no device is ready on the adb server at {server} (attached: {}); start one, or set BOXD_ADB_CONNECT=host:port",
            listing()
        )),
        _ => Err(format!(
            "{} devices are attached to the adb server at {server}: {}; set ANDROID_SERIAL to the one to use",
            ready.len(),
            listing()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::choose;

    fn devices(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(serial, state)| (serial.to_string(), state.to_string()))
            .collect()
    }

    #[test]
    fn the_named_device_else_the_only_one_else_a_listing() {
        let two = devices(&[("emulator-5554", "device"), ("127.0.0.1:5555", "device")]);
        assert_eq!(
            choose(&two, Some("127.0.0.1:5555"), "s").unwrap(),
            "127.0.0.1:5555"
        );
        let err = choose(&two, None, "s").unwrap_err();
        assert!(
            err.contains("emulator-5554 (device), 127.0.0.1:5555 (device)")
                && err.contains("ANDROID_SERIAL"),
            "{err}"
        );
        let one = devices(&[("a", "offline"), ("b", "device")]);
        assert_eq!(choose(&one, None, "s").unwrap(), "b");
        assert!(
            choose(&one, Some("a"), "s")
                .unwrap_err()
                .contains("offline")
        );
        assert!(
            choose(&one, Some("c"), "s")
                .unwrap_err()
                .contains("a (offline), b (device)")
        );
        assert!(
            choose(&[], None, "s")
                .unwrap_err()
                .contains("attached: none")
        );
    }
}
