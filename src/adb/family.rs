//! The `adb` family: one Android device, reached straight over TCP (`BOXD_ADB_CONNECT=host:port`, as
//! redroid and emulators listen) or through an adb server (`ADB_SERVER_SOCKET`, default
//! `tcp:127.0.0.1:5037`; the device `ANDROID_SERIAL` names, else the only one). Not in the default family
//! list: only images with a device name it. Its health follows the device: ready once it answers and
//! has booted, `starting` while it boots, `failed` with the reason while it cannot be reached (calls then
//! answer 503 with that reason); it reconnects with backoff, and checks an idle device now and then so
//! the health does not go stale.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use super::Adb;
use super::device::{Device, DeviceError, Target};
use super::key::AdbKey;
use super::wire::Server;
use crate::core::child::Backoff;
use crate::core::footprint::Held;
use crate::core::health::Health;
use crate::family::limits::{Limit, count, seconds};
use crate::family::{BoxFuture, Family, Setup};
use crate::tools::Tool;

/// How often a device that answered is checked again while nothing else talks to it.
const IDLE_CHECK: Duration = Duration::from_secs(10);

struct AdbFamily {
    adb: Arc<Adb>,
    /// BOXD_ADB_KEY's public half as a line of adb_keys, logged at start for the operator to install
    /// on the device (public keys are not secret); None without a key.
    public_key: Option<String>,
}

impl Family for AdbFamily {
    fn name(&self) -> &'static str {
        "adb"
    }

    fn tools(&self) -> Vec<Tool> {
        super::tools(&self.adb)
    }

    /// The live view's frames and input, behind the bearer check.
    fn routes(&self) -> Router {
        super::view::routes(Arc::clone(&self.adb))
    }

    /// The live view's page: it holds no data, and asks for the token itself.
    fn public_routes(&self) -> Router {
        super::view::page_routes()
    }

    fn reserved_groups(&self) -> Vec<&'static str> {
        vec![super::GROUP]
    }

    /// The adb server, when one runs in the sandbox (boxd itself needs none: it may talk to the device
    /// straight over TCP).
    fn held_processes(&self) -> Vec<Held> {
        vec![Held::Named("adb".to_owned())]
    }

    fn start(self: Arc<Self>, health: Health) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            if let Some(line) = &self.public_key {
                tracing::info!(
                    "adb: boxd authenticates to the device with BOXD_ADB_KEY; the device trusts it once this line is in its /data/misc/adb/adb_keys: {line}"
                );
            }
            let device = self.adb.device.clone();
            device.set_health(health.clone());
            let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
            loop {
                match device.probe().await {
                    Ok((which, state, output)) => {
                        let booted = String::from_utf8_lossy(&output.stdout).trim().to_owned();
                        // 127: no `getprop` (a device stand-in, not Android): it answers, so it serves.
                        if booted == "1" || output.exit == Some(127) {
                            // Logged by the health on each change, not on every idle check.
                            health.ready_with(ready_state(&state, &booted));
                            backoff.reset();
                            tokio::select! {
                                () = device.lost() => {}
                                () = tokio::time::sleep(IDLE_CHECK) => {}
                            }
                        } else {
                            health.starting(format!(
                                "{which} is booting (sys.boot_completed={booted:?})"
                            ));
                            tokio::time::sleep(backoff.next_delay()).await;
                        }
                    }
                    // A device busy with long commands is not lost: the probe waits for its turn.
                    Err(err @ (DeviceError::TurnTimeout | DeviceError::Busy)) => {
                        tracing::debug!(error = %err, "adb probe did not get its turn");
                        tokio::time::sleep(IDLE_CHECK).await;
                    }
                    Err(err) => {
                        health.failed(err.to_string());
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                }
            }
        })
    }
}

/// What a ready device's health says: `SERIAL: STATE, sys.boot_completed=1`.
fn ready_state(serial_and_state: &str, booted: &str) -> String {
    format!(
        "{serial_and_state}, sys.boot_completed={}",
        if booted.is_empty() { "(none)" } else { booted }
    )
}

// The `adb` family's flags; not a doc comment, which clap would show as `serve`'s description.
#[derive(Debug, clap::Args)]
pub struct AdbArgs {
    /// The adb server the `adb` family asks for its device (`tcp:HOST:PORT`, as adb itself reads it).
    #[arg(long, env = "ADB_SERVER_SOCKET", default_value = "tcp:127.0.0.1:5037")]
    pub adb_server: String,
    /// The device the `adb` family drives when the adb server has several (its serial, as `adb
    /// devices` lists it). Unset: the only device.
    #[arg(long, env = "ANDROID_SERIAL")]
    pub adb_serial: Option<String>,
    /// A device the `adb` family reaches straight over TCP (HOST:PORT, e.g. redroid's or an emulator's
    /// adbd on 5555), with no adb server in between. Set, it wins over the adb server.
    #[arg(long, env = "BOXD_ADB_CONNECT")]
    pub adb_connect: Option<String>,
    /// The private key (PEM) the `adb` family answers a device's authorization request with, so a
    /// device with `ro.adb.secure=1` trusts boxd alone. Only from the environment (or `boxd init`'s
    /// pipe): kept out of every child's environment.
    #[arg(
        long = "adb-key",
        env = "BOXD_ADB_KEY",
        hide = true,
        hide_env_values = true
    )]
    pub adb_key: Option<String>,
}

pub fn family(_: &Setup, args: &AdbArgs) -> Result<Arc<dyn Family>, String> {
    // Parsed before anything connects, so a bad key stops boxd at start rather than failing every
    // connection later. The message names the variable, never its value.
    let key = match args
        .adb_key
        .as_deref()
        .map(str::trim)
        .filter(|pem| !pem.is_empty())
    {
        Some(pem) => Some(Arc::new(
            AdbKey::from_pem(pem).map_err(|err| format!("BOXD_ADB_KEY {err}"))?,
        )),
        None => None,
    };
    let target = match args
        .adb_connect
        .as_deref()
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        Some(address) => {
            match address.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => {
                    return Err(format!(
                        "BOXD_ADB_CONNECT must be host:port (e.g. 127.0.0.1:5555), got {address:?}"
                    ));
                }
            }
            Target::Direct(address.to_owned())
        }
        None => Target::Server {
            server: Server::from_socket_spec(args.adb_server.trim())?,
            serial: args
                .adb_serial
                .as_deref()
                .map(str::trim)
                .filter(|serial| !serial.is_empty())
                .map(str::to_owned),
        },
    };
    if key.is_some()
        && let Target::Server { server, .. } = &target
    {
        // An adb server answers the device's authorization with its own keys; boxd never sees it.
        tracing::warn!(
            server = %server.address,
            "BOXD_ADB_KEY is used only for a device reached straight over TCP (BOXD_ADB_CONNECT); the adb server authenticates with its own keys"
        );
    }
    let public_key = key.as_ref().map(|key| key.public_line().to_owned());
    let device = Device::start(target, key)?;
    Ok(Arc::new(AdbFamily {
        public_key,
        adb: Arc::new(Adb {
            device,
            geometry: std::sync::Mutex::new(None),
            views: super::view::Views::new(),
        }),
    }))
}

/// The bounds the `adb` family keeps, for `boxd limits`.
pub fn limits(_: &AdbArgs) -> Vec<Limit> {
    vec![
        Limit::new(
            "adb",
            "device commands waiting",
            count(super::device::MAX_QUEUED_COMMANDS),
            "429",
        ),
        Limit::new(
            "adb",
            "wait for a command's turn",
            seconds(super::device::TURN_WAIT),
            "504; the command is withdrawn and never runs (also when its caller goes away)",
        ),
        Limit::new(
            "adb",
            "one device command; a screenshot",
            format!(
                "{}; {} (a swipe: its duration + {})",
                seconds(super::COMMAND_TIMEOUT),
                seconds(super::SCREENSHOT_TIMEOUT),
                seconds(super::COMMAND_TIMEOUT)
            ),
            "an error result naming the command",
        ),
        Limit::new(
            "adb",
            "text of one `input_text`; one swipe",
            format!(
                "{} characters; {}",
                super::actions::MAX_TEXT_CHARS,
                seconds(std::time::Duration::from_millis(
                    super::actions::MAX_SWIPE_MS
                ))
            ),
            "an error result; nothing reaches the device",
        ),
        Limit::new(
            "adb",
            "one `list_elements` (`uiautomator dump`)",
            format!(
                "{} tries of at most {} each within {}; {} elements listed",
                super::UI_DUMP_ATTEMPTS,
                seconds(super::UI_DUMP_TIMEOUT),
                seconds(super::UI_DUMP_BUDGET),
                super::ui::MAX_ELEMENTS
            ),
            "an error result with the last failure (one past its bound: 503 while the device is reconnected); more elements: the first ones and a notice",
        ),
        Limit::new(
            "adb",
            "`url` of one `open_url`; a screenshot's `max_size`",
            format!(
                "{} characters; {} to {} pixels",
                super::actions::MAX_URL_CHARS,
                super::actions::MIN_SCREENSHOT_SIDE,
                super::actions::MAX_SCREENSHOT_SIDE
            ),
            "an error result; nothing reaches the device",
        ),
        Limit::new(
            "adb",
            "live view (`/adb/stream`): viewers at once; frames per second",
            format!(
                "{}; at most {} (default {})",
                super::view::MAX_VIEW_STREAMS,
                super::view::MAX_VIEW_FPS,
                super::view::DEFAULT_VIEW_FPS
            ),
            "429; a higher rate is 400",
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ready_state_names_the_device_its_state_and_boot() {
        assert_eq!(
            super::ready_state("127.0.0.1:5555: device", "1"),
            "127.0.0.1:5555: device, sys.boot_completed=1"
        );
        assert_eq!(
            super::ready_state("emulator-5554: device", ""),
            "emulator-5554: device, sys.boot_completed=(none)"
        );
    }
}
