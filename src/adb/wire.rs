//! The ADB wire, both ways boxd reaches a device: adbd's own transport over TCP (`CNXN`/`OPEN`/`WRTE`/
//! `OKAY`/`CLSE` messages; redroid and emulators listen for it) and an adb server's smart socket
//! (`host:devices`, `host:transport:SERIAL`). Commands run through the shell v2 service, which carries
//! stdout, stderr and the exit status apart. Every read and write is bounded by the caller's deadline,
//! and a peer that closes the connection is an error, never a loop. A device that asks for
//! authorization is answered with boxd's key (`BOXD_ADB_KEY`, src/adb/key.rs), as adb answers it.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::key::AdbKey;

const A_CNXN: u32 = 0x4e58_4e43;
const A_OPEN: u32 = 0x4e45_504f;
const A_OKAY: u32 = 0x5941_4b4f;
const A_CLSE: u32 = 0x4553_4c43;
const A_WRTE: u32 = 0x4554_5257;
const A_AUTH: u32 = 0x4854_5541;
const A_STLS: u32 = 0x534c_5453;
/// `AUTH`'s first argument: what the message carries (adb/protocol.txt).
const AUTH_TOKEN: u32 = 1;
const AUTH_SIGNATURE: u32 = 2;
const AUTH_RSAPUBLICKEY: u32 = 3;
/// The transport version that lets either side skip payload checksums (adbd since Android 9); boxd still
/// sends them, for older devices.
const VERSION: u32 = 0x0100_0001;
/// The largest message payload boxd accepts (what adbd offers today).
const MAX_PAYLOAD: u32 = 256 * 1024;
/// A device's command output beyond this is refused (a full-HD PNG is a few MiB).
pub const MAX_OUTPUT: usize = 64 * 1024 * 1024;

/// What a device command printed and how it ended.
#[derive(Debug, Default)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Option<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The connection failed or closed. `opened` says whether the device had accepted the command, so a
    /// caller knows whether retrying could run it twice.
    #[error("{message}")]
    Io { message: String, opened: bool },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The device or server answered, and refused (a `FAIL`, an authorization request, a closed service).
    #[error("{0}")]
    Refused(String),
    #[error("the command printed more than {MAX_OUTPUT} bytes")]
    TooLarge,
}

impl WireError {
    fn io(err: std::io::Error, timeout: Duration, opened: bool) -> WireError {
        match err.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => WireError::Timeout(timeout),
            _ => WireError::Io {
                message: err.to_string(),
                opened,
            },
        }
    }

    pub fn opened(&self) -> bool {
        !matches!(self, WireError::Io { opened: false, .. })
    }
}

/// A deadline and the span it was made from (for the error text).
#[derive(Clone, Copy)]
pub struct Deadline {
    at: Instant,
    span: Duration,
}

impl Deadline {
    pub fn after(span: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + span,
            span,
        }
    }

    fn remaining(&self) -> Result<Duration, WireError> {
        self.at
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or(WireError::Timeout(self.span))
    }
}

fn connect(address: &str, deadline: Deadline) -> Result<TcpStream, WireError> {
    let addresses = address.to_socket_addrs().map_err(|err| WireError::Io {
        message: format!("cannot resolve {address}: {err}"),
        opened: false,
    })?;
    let mut last = None;
    for candidate in addresses {
        match TcpStream::connect_timeout(&candidate, deadline.remaining()?) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(err) => last = Some(err),
        }
    }
    Err(match last {
        Some(err) => WireError::io(err, deadline.span, false),
        None => WireError::Io {
            message: format!("{address} resolves to no address"),
            opened: false,
        },
    })
}

fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Deadline,
    opened: bool,
) -> Result<(), WireError> {
    let mut filled = 0;
    while filled < buf.len() {
        stream
            .set_read_timeout(Some(deadline.remaining()?))
            .map_err(|err| WireError::io(err, deadline.span, opened))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(WireError::Io {
                    message: "the connection was closed".into(),
                    opened,
                });
            }
            Ok(read) => filled += read,
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(WireError::io(err, deadline.span, opened)),
        }
    }
    Ok(())
}

fn write_all(
    stream: &mut TcpStream,
    data: &[u8],
    deadline: Deadline,
    opened: bool,
) -> Result<(), WireError> {
    stream
        .set_write_timeout(Some(deadline.remaining()?))
        .map_err(|err| WireError::io(err, deadline.span, opened))?;
    stream
        .write_all(data)
        .map_err(|err| WireError::io(err, deadline.span, opened))
}

/// Decodes the shell v2 stream: packets of `id: u8, length: u32 LE, data` (1 stdout, 2 stderr, 3 exit).
/// Linear in what it is fed: whole packets are read in place and the consumed bytes dropped once per
/// feed (not once per packet, which made a stream of tiny packets quadratic); and every packet counts
/// toward [`MAX_OUTPUT`] with its header, so a device sending empty packets without end is cut off too.
#[derive(Default)]
struct ShellPackets {
    pending: Vec<u8>,
    output: Output,
    /// Bytes of whole packets decoded so far, headers included.
    counted: usize,
}

impl ShellPackets {
    fn feed(&mut self, data: &[u8]) -> Result<(), WireError> {
        self.pending.extend_from_slice(data);
        let mut start: usize = 0;
        let outcome = loop {
            let Some(header) = self.pending.get(start..start.saturating_add(5)) else {
                break Ok(());
            };
            let id = header[0];
            let length = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
            let Some(size) = length.checked_add(5) else {
                break Err(WireError::TooLarge);
            };
            match self.counted.checked_add(size) {
                Some(total) if total <= MAX_OUTPUT => {}
                _ => break Err(WireError::TooLarge),
            }
            let end = start.saturating_add(size);
            let Some(payload) = self.pending.get(start + 5..end) else {
                // An incomplete packet: the rest comes with the next feed.
                break Ok(());
            };
            match id {
                1 => self.output.stdout.extend_from_slice(payload),
                2 => self.output.stderr.extend_from_slice(payload),
                3 => self.output.exit = payload.first().copied(),
                _ => {}
            }
            self.counted += size;
            start = end;
        };
        self.pending.drain(..start);
        outcome
    }
}

fn shell_service(command: &str) -> String {
    format!("shell,v2,raw:{command}")
}

/// A connection to adbd itself (no adb server in between).
pub struct Direct {
    stream: TcpStream,
    /// The device's largest payload: an `OPEN` (the command line) must fit in it.
    max_payload: usize,
    next_id: u32,
    /// The device's `CNXN` banner (`device::ro.product.model=...;features=...`).
    pub banner: String,
}

impl Direct {
    /// Connects and completes adbd's handshake. A device that asks for authorization (`AUTH TOKEN`) is
    /// answered with `key`'s signature; if it asks again (it does not know the key), it is offered
    /// the public key once, and then has until `deadline` to come online (adbd stays silent while it
    /// does not trust a key, so the deadline is what ends the wait).
    pub fn connect(
        address: &str,
        key: Option<&AdbKey>,
        deadline: Deadline,
    ) -> Result<Direct, WireError> {
        let mut stream = connect(address, deadline)?;
        send(
            &mut stream,
            A_CNXN,
            VERSION,
            MAX_PAYLOAD,
            b"host::boxd\0",
            deadline,
            false,
        )?;
        let mut signed = false;
        let mut offered = false;
        let (device_max, data) = loop {
            let (command, arg0, arg1, data) = match receive(&mut stream, deadline, false) {
                Ok(message) => message,
                // Silence or a close after the public key was offered: the device did not take it.
                Err(err @ (WireError::Timeout(_) | WireError::Io { .. })) if offered => {
                    return Err(untrusted(address, key, &err.to_string()));
                }
                Err(err) => return Err(err),
            };
            match command {
                A_CNXN => break (arg1, data),
                A_AUTH => {
                    let Some(key) = key else {
                        return Err(WireError::Refused(format!(
                            "the device at {address} asks for ADB authorization (an RSA key it trusts): reach it through an adb server that holds such a key (ADB_SERVER_SOCKET), or run it with ro.adb.secure=0, or give boxd a key the device trusts (BOXD_ADB_KEY)"
                        )));
                    };
                    if arg0 != AUTH_TOKEN {
                        return Err(WireError::Refused(format!(
                            "the device at {address} sent an AUTH message of type {arg0}, not a token to sign"
                        )));
                    }
                    if offered {
                        // adbd asks for another signature only after refusing one: the offered key
                        // was not accepted either.
                        return Err(untrusted(
                            address,
                            Some(key),
                            "it asked for a signature again",
                        ));
                    }
                    if !signed {
                        let signature = key.sign(&data).map_err(|err| {
                            WireError::Refused(format!("the device at {address}: {err}"))
                        })?;
                        send(
                            &mut stream,
                            A_AUTH,
                            AUTH_SIGNATURE,
                            0,
                            &signature,
                            deadline,
                            false,
                        )?;
                        signed = true;
                    } else {
                        // The signature was refused: offer the public key, once, as adb does; a
                        // device that accepts new keys (a person tapping "Allow") comes online.
                        let mut payload = key.public_line().as_bytes().to_vec();
                        payload.push(0);
                        send(
                            &mut stream,
                            A_AUTH,
                            AUTH_RSAPUBLICKEY,
                            0,
                            &payload,
                            deadline,
                            false,
                        )?;
                        offered = true;
                        tracing::warn!(
                            device = %address,
                            "the device refused boxd's signature; offered boxd's public key and waiting for the device to accept it"
                        );
                    }
                }
                A_STLS => {
                    return Err(WireError::Refused(format!(
                        "the device at {address} asks for TLS (wireless debugging pairing): reach it through a paired adb server (ADB_SERVER_SOCKET)"
                    )));
                }
                other => {
                    return Err(WireError::Refused(format!(
                        "{address} is not an adb device (answered 0x{other:08x} to CNXN)"
                    )));
                }
            }
        };
        let banner = String::from_utf8_lossy(&data)
            .trim_end_matches('\0')
            .to_owned();
        Ok(Direct {
            stream,
            max_payload: (device_max.min(MAX_PAYLOAD) as usize).max(1),
            next_id: 1,
            banner,
        })
    }

    /// Runs `command` through the device's shell v2 service and collects what it printed.
    pub fn shell(&mut self, command: &str, deadline: Deadline) -> Result<Output, WireError> {
        let mut service = shell_service(command).into_bytes();
        service.push(0);
        if service.len() > self.max_payload {
            return Err(WireError::Refused(format!(
                "the command is {} bytes; the device takes at most {}",
                service.len(),
                self.max_payload
            )));
        }
        let local = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        send(
            &mut self.stream,
            A_OPEN,
            local,
            0,
            &service,
            deadline,
            false,
        )?;
        let mut remote = None;
        let mut packets = ShellPackets::default();
        loop {
            let opened = remote.is_some();
            let (command, arg0, arg1, data) = receive(&mut self.stream, deadline, opened)?;
            if arg1 != local {
                // A late message of an earlier stream: not this command's.
                continue;
            }
            match command {
                A_OKAY => remote = Some(arg0),
                A_WRTE => {
                    let from = remote.unwrap_or(arg0);
                    remote = Some(from);
                    send(&mut self.stream, A_OKAY, local, from, &[], deadline, true)?;
                    packets.feed(&data)?;
                }
                A_CLSE => {
                    if remote.is_none() {
                        return Err(WireError::Refused(
                            "the device refused the shell v2 service (Android 7 or later is needed)"
                                .into(),
                        ));
                    }
                    return Ok(packets.output);
                }
                _ => {}
            }
        }
    }
}

/// The device refused boxd's key: what it said, and how to make it trust the key.
fn untrusted(address: &str, key: Option<&AdbKey>, how: &str) -> WireError {
    let line = key.map(AdbKey::public_line).unwrap_or_default();
    WireError::Refused(format!(
        "the device at {address} does not trust boxd's ADB key (BOXD_ADB_KEY): it refused the signature and did not accept the public key ({how}); install the key on the device by adding this line to its /data/misc/adb/adb_keys: {line}"
    ))
}

fn send(
    stream: &mut TcpStream,
    command: u32,
    arg0: u32,
    arg1: u32,
    data: &[u8],
    deadline: Deadline,
    opened: bool,
) -> Result<(), WireError> {
    let checksum = data
        .iter()
        .fold(0u32, |sum, byte| sum.wrapping_add(u32::from(*byte)));
    let length = u32::try_from(data.len()).map_err(|_| WireError::TooLarge)?;
    let mut message = Vec::with_capacity(24 + data.len());
    for word in [command, arg0, arg1, length, checksum, !command] {
        message.extend_from_slice(&word.to_le_bytes());
    }
    message.extend_from_slice(data);
    write_all(stream, &message, deadline, opened)
}

fn receive(
    stream: &mut TcpStream,
    deadline: Deadline,
    opened: bool,
) -> Result<(u32, u32, u32, Vec<u8>), WireError> {
    let mut header = [0u8; 24];
    read_full(stream, &mut header, deadline, opened)?;
    let word = |index: usize| {
        let at = index * 4;
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let (command, arg0, arg1, length, magic) = (word(0), word(1), word(2), word(3), word(5));
    if magic != !command {
        return Err(WireError::Io {
            message: "the device sent a malformed message".into(),
            opened,
        });
    }
    if length > MAX_PAYLOAD {
        return Err(WireError::Io {
            message: format!("the device sent a {length}-byte message (at most {MAX_PAYLOAD})"),
            opened,
        });
    }
    let mut data = vec![0u8; length as usize];
    read_full(stream, &mut data, deadline, opened)?;
    Ok((command, arg0, arg1, data))
}

/// An adb server (`adb start-server`), reached at `host:port`; one connection per request, as adb does.
#[derive(Clone)]
pub struct Server {
    pub address: String,
}

impl Server {
    /// `ADB_SERVER_SOCKET`'s forms `tcp:HOST:PORT` and `tcp:PORT`.
    pub fn from_socket_spec(spec: &str) -> Result<Server, String> {
        let rest = spec.strip_prefix("tcp:").ok_or_else(|| {
            format!("ADB_SERVER_SOCKET must be tcp:HOST:PORT or tcp:PORT, got {spec:?}")
        })?;
        let address = match rest.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() && !host.is_empty() => {
                rest.to_owned()
            }
            None if rest.parse::<u16>().is_ok() => format!("127.0.0.1:{rest}"),
            _ => {
                return Err(format!(
                    "ADB_SERVER_SOCKET must be tcp:HOST:PORT or tcp:PORT, got {spec:?}"
                ));
            }
        };
        Ok(Server { address })
    }

    fn open(&self, request: &str, deadline: Deadline) -> Result<TcpStream, WireError> {
        let mut stream = connect(&self.address, deadline).map_err(|err| match err {
            WireError::Io { message, opened } => WireError::Io {
                message: format!("adb server at {} unreachable: {message}", self.address),
                opened,
            },
            other => other,
        })?;
        self.request(&mut stream, request, deadline)?;
        Ok(stream)
    }

    fn request(
        &self,
        stream: &mut TcpStream,
        request: &str,
        deadline: Deadline,
    ) -> Result<(), WireError> {
        if request.len() > 0xffff {
            return Err(WireError::Refused(format!(
                "the command is {} bytes; an adb server takes at most 65535",
                request.len()
            )));
        }
        let framed = format!("{:04x}{request}", request.len());
        write_all(stream, framed.as_bytes(), deadline, false)?;
        let mut status = [0u8; 4];
        read_full(stream, &mut status, deadline, false)?;
        match &status {
            b"OKAY" => Ok(()),
            b"FAIL" => {
                let message = read_counted(stream, deadline)?;
                Err(WireError::Refused(message))
            }
            other => Err(WireError::Io {
                message: format!(
                    "the adb server answered {:?}",
                    String::from_utf8_lossy(other)
                ),
                opened: false,
            }),
        }
    }

    /// Every device the server knows, with its state (`device`, `offline`, `unauthorized`, ...).
    pub fn devices(&self, deadline: Deadline) -> Result<Vec<(String, String)>, WireError> {
        let mut stream = self.open("host:devices", deadline)?;
        let listing = read_counted(&mut stream, deadline)?;
        Ok(listing
            .lines()
            .filter_map(|line| {
                let (serial, state) = line.split_once('\t')?;
                Some((serial.trim().to_owned(), state.trim().to_owned()))
            })
            .collect())
    }

    pub fn shell(
        &self,
        serial: &str,
        command: &str,
        deadline: Deadline,
    ) -> Result<Output, WireError> {
        // The device gone from the server is a lost device (to pick again), not a refused command.
        let mut stream = self
            .open(&format!("host:transport:{serial}"), deadline)
            .map_err(|err| match err {
                WireError::Refused(reason) => WireError::Io {
                    message: format!("the adb server at {}: {reason}", self.address),
                    opened: false,
                },
                other => other,
            })?;
        self.request(&mut stream, &shell_service(command), deadline)
            .map_err(|err| match err {
                WireError::Refused(reason) => WireError::Refused(format!(
                    "device {serial} refused the shell v2 service ({reason}); Android 7 or later is needed"
                )),
                other => other,
            })?;
        let mut packets = ShellPackets::default();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            stream
                .set_read_timeout(Some(deadline.remaining()?))
                .map_err(|err| WireError::io(err, deadline.span, true))?;
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(packets.output),
                Ok(read) => packets.feed(&chunk[..read])?,
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(WireError::io(err, deadline.span, true)),
            }
        }
    }
}

fn read_counted(stream: &mut TcpStream, deadline: Deadline) -> Result<String, WireError> {
    let mut length = [0u8; 4];
    read_full(stream, &mut length, deadline, false)?;
    let length = std::str::from_utf8(&length)
        .ok()
        .and_then(|hex| usize::from_str_radix(hex, 16).ok())
        .ok_or_else(|| WireError::Io {
            message: "the adb server sent a malformed length".into(),
            opened: false,
        })?;
    let mut body = vec![0u8; length];
    read_full(stream, &mut body, deadline, false)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_packets_split_anywhere_decode_the_same() {
        let mut stream = Vec::new();
        for (id, data) in [
            (1u8, &b"out"[..]),
            (2, b"err"),
            (1, b"put"),
            (3, &[7u8][..]),
        ] {
            stream.push(id);
            stream.extend_from_slice(&(data.len() as u32).to_le_bytes());
            stream.extend_from_slice(data);
        }
        for split in 0..stream.len() {
            let mut packets = ShellPackets::default();
            packets.feed(&stream[..split]).unwrap();
            packets.feed(&stream[split..]).unwrap();
            assert_eq!(packets.output.stdout, b"output");
            assert_eq!(packets.output.stderr, b"err");
            assert_eq!(packets.output.exit, Some(7));
        }
    }

    fn packets(count: usize, id: u8, payload: &[u8]) -> Vec<u8> {
        let mut stream = Vec::with_capacity(count * (5 + payload.len()));
        for _ in 0..count {
            stream.push(id);
            stream.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            stream.extend_from_slice(payload);
        }
        stream
    }

    #[test]
    fn many_tiny_packets_decode_in_linear_time() {
        // 200 000 one-byte packets in one read: dropping each packet's bytes from the front of the
        // buffer (as before) moves ~120 GB; consumed once per feed, it is a few milliseconds.
        let stream = packets(200_000, 1, b"x");
        let started = Instant::now();
        let mut decoder = ShellPackets::default();
        decoder.feed(&stream).unwrap();
        assert_eq!(decoder.output.stdout.len(), 200_000);
        assert!(decoder.pending.is_empty());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn empty_packets_count_toward_the_output_cap() {
        let chunk = packets(200_000, 1, b"");
        let mut decoder = ShellPackets::default();
        let mut fed = 0usize;
        let refused = loop {
            match decoder.feed(&chunk) {
                Ok(()) => fed += chunk.len(),
                Err(err) => break err,
            }
            assert!(fed <= MAX_OUTPUT, "{fed} bytes of empty packets accepted");
        };
        assert!(matches!(refused, WireError::TooLarge), "{refused:?}");
        assert!(decoder.output.stdout.is_empty());
    }

    #[test]
    fn a_huge_packet_length_is_refused_not_allocated() {
        let mut packets = ShellPackets::default();
        let mut header = vec![1u8];
        header.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(packets.feed(&header), Err(WireError::TooLarge)));
    }

    #[test]
    fn a_silent_device_times_out_and_a_closing_one_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let held = std::thread::spawn(move || {
            let silent = listener.accept().unwrap();
            let closing = listener.accept().unwrap();
            drop(closing);
            std::thread::sleep(Duration::from_millis(500));
            drop(silent);
        });
        let started = Instant::now();
        let silent = Direct::connect(&address, None, Deadline::after(Duration::from_millis(200)));
        assert!(matches!(silent, Err(WireError::Timeout(_))));
        assert!(started.elapsed() < Duration::from_secs(2));
        let closing = Direct::connect(&address, None, Deadline::after(Duration::from_secs(5)));
        assert!(
            matches!(closing, Err(WireError::Io { opened: false, .. })),
            "{:?}",
            closing.err()
        );
        held.join().unwrap();
    }

    #[test]
    fn server_socket_specs() {
        assert_eq!(
            Server::from_socket_spec("tcp:127.0.0.1:5037")
                .unwrap()
                .address,
            "127.0.0.1:5037"
        );
        assert_eq!(
            Server::from_socket_spec("tcp:5038").unwrap().address,
            "127.0.0.1:5038"
        );
        assert!(Server::from_socket_spec("localfilesystem:/x").is_err());
        assert!(Server::from_socket_spec("tcp:host:port").is_err());
    }
}
