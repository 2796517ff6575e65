//! How `boxd serve` gets from `boxd init` what only it may hold: the secrets (token, pool secret, device
//! key) and the public listener. Tenant code runs as root, may kill serve at will and watch for the next
//! one, so the hand-over is built so that nothing can be read from it by another process:
//!
//! 1. **No dumpable moment.** init starts serve with its real group set apart from its effective group
//!    ([`set_group_apart`], between fork and exec): the kernel then makes the new program non-dumpable
//!    from its first instruction, so `/proc/<serve>/fd`, `mem` and `ptrace` are closed to root without
//!    `CAP_SYS_PTRACE` before serve runs any code. serve's first statement puts its group back
//!    ([`restore_group`]) and calls `PR_SET_DUMPABLE 0` anyway. (A mere `prctl` as the first statement
//!    leaves the microseconds from the exec to it, enough for a `PTRACE_SEIZE` spun on the next pid.)
//! 2. **A socket, not a pipe.** The only descriptor serve inherits for this is one end of a
//!    `SOCK_SEQPACKET` socket pair ([`HANDOVER_FD`]); `open` of a socket's `/proc/<pid>/fd` link fails,
//!    and nothing secret is ever written to it.
//! 3. **Asked for, then checked.** serve makes a fresh socket pair (after it is non-dumpable) and sends
//!    one end to init. init answers on that end only if the kernel-supplied credentials of the message
//!    name the process it started, and that process is not traced; the secrets and the listener go
//!    there, so a descriptor stolen earlier could not read them either.
//!
//! 4. **A claim outlives serve.** In pool mode serve keeps the inherited end (close-on-exec) and, once
//!    `POST /init` claims it, passes init a socket carrying the session token and the environment the
//!    claim set ([`ClaimRecord`]); init checks the sender as above and hands the record to every later
//!    serve, so a tenant that kills serve does not reopen `POST /init` to the pool secret.
//!
//! The kernel also marks a program started this way "secure" (`AT_SECURE`), and glibc then drops a few
//! variables from its environment (`TMPDIR`, `LD_LIBRARY_PATH`, ...): init sends serve's whole intended
//! environment with the secrets, and serve puts back what was dropped, so its children see what the
//! image set.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::secrets::{SECRET_VARIABLES, Secrets};

/// Where serve finds its end of the hand-over channel.
pub const HANDOVER_FD: RawFd = 3;
/// What serve sends to ask (the bytes only name the protocol; the credentials and the socket matter).
const REQUEST: &[u8] = b"boxd serve: hand-over v1";
/// The most the answer may carry: secrets (64 KiB at most) and serve's environment.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// What serve sends with the socket that carries a claim.
const CLAIM_REPORT: &[u8] = b"boxd serve: claimed v1";
/// The most a claim may take as JSON: a session token (4 KiB) and `POST /init`'s environment (256 KiB,
/// up to six times that escaped).
const MAX_CLAIM_BYTES: usize = 2 * 1024 * 1024;
/// Messages init reads from one serve after its answer: serve sends one claim at most.
const MAX_REPORTS: usize = 8;
/// How long either side waits for the other: serve asks within milliseconds of its exec.
const PATIENCE: Duration = Duration::from_secs(20);
/// The real group serve starts with (set apart from its effective one): `nogroup`, or one below when
/// that is the effective group itself.
const APART_GROUP: libc::gid_t = 65534;

#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("the request came from pid {got}, not from the boxd serve started as pid {expected}")]
    WrongPeer { got: i32, expected: i32 },
    #[error("the request carried no credentials or no socket")]
    Malformed,
    #[error("boxd serve (pid {pid}) is traced by pid {tracer}: no secrets for a traced process")]
    Traced { pid: i32, tracer: i32 },
    #[error("boxd init closed the hand-over without an answer (it refused; its log says why)")]
    Refused,
    #[error("the answer is not valid: {0}")]
    Invalid(String),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> HandoverError {
    move |source| HandoverError::Io { what, source }
}

/// What init hands over, as JSON. The environment's names and values are bytes (base64 would be
/// needless here: they are kept as byte arrays, a few KiB).
#[derive(Serialize, Deserialize)]
struct Answer {
    secrets: Secrets,
    environment: Vec<(Vec<u8>, Vec<u8>)>,
    #[serde(default)]
    claim: Option<ClaimRecord>,
}

/// What a pool-mode `POST /init` set: the session token and the environment of serve's children.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub token: String,
    pub env: Vec<(String, String)>,
}

/// What serve received.
pub struct Received {
    pub secrets: Secrets,
    /// The public listener, when init bound one (it always does).
    pub listener: Option<std::net::TcpListener>,
    /// The claim an earlier serve reported, in pool mode.
    pub claim: Option<ClaimRecord>,
    /// Where to report a claim made by this serve.
    pub claims: ClaimReporter,
}

/// What init holds to answer every serve it starts.
pub struct Offer {
    secrets: Secrets,
    environment: Vec<(Vec<u8>, Vec<u8>)>,
    /// The first claim a serve reported: a pod serves one claim.
    claim: Mutex<Option<ClaimRecord>>,
}

impl Offer {
    pub fn new(secrets: &Secrets, environment: &[(OsString, OsString)]) -> Result<Offer, String> {
        if let Some(unknown) = secrets
            .keys()
            .find(|name| !SECRET_VARIABLES.contains(&name.as_str()))
        {
            return Err(format!("unknown secret {unknown}"));
        }
        let offer = Offer {
            secrets: secrets.clone(),
            environment: environment
                .iter()
                .map(|(name, value)| (name.as_bytes().to_vec(), value.as_bytes().to_vec()))
                .collect(),
            claim: Mutex::new(None),
        };
        // Checked once here; a claim adds at most MAX_CLAIM_BYTES later.
        let answer = offer.answer().map_err(|err| err.to_string())?;
        if answer.len().saturating_add(MAX_CLAIM_BYTES) > MAX_ANSWER_BYTES {
            return Err(format!(
                "the secrets and boxd's environment are longer than {} bytes",
                MAX_ANSWER_BYTES.saturating_sub(MAX_CLAIM_BYTES)
            ));
        }
        Ok(offer)
    }

    fn claim(&self) -> std::sync::MutexGuard<'_, Option<ClaimRecord>> {
        self.claim
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn answer(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&Answer {
            secrets: self.secrets.clone(),
            environment: self.environment.clone(),
            claim: self.claim().clone(),
        })
    }

    /// Keeps `record` for every later serve, unless a claim is kept already.
    fn remember(&self, record: ClaimRecord) {
        let mut claim = self.claim();
        if claim.is_none() {
            *claim = Some(record);
        }
    }
}

/// serve's end of the hand-over channel, kept to report a claim to init.
pub struct ClaimReporter {
    channel: OwnedFd,
}

impl ClaimReporter {
    /// Passes init a socket and writes `record` into it (blocking, bounded by [`PATIENCE`]).
    pub fn report(&self, record: &ClaimRecord) -> Result<(), HandoverError> {
        let bytes =
            serde_json::to_vec(record).map_err(|err| HandoverError::Invalid(err.to_string()))?;
        if bytes.len() > MAX_CLAIM_BYTES {
            return Err(HandoverError::Invalid(format!(
                "the claim is longer than {MAX_CLAIM_BYTES} bytes"
            )));
        }
        let (mine, theirs) =
            socket_pair(libc::SOCK_STREAM).map_err(io("cannot make the claim's socket"))?;
        set_timeouts(mine.as_raw_fd()).map_err(io("cannot bound the claim's report"))?;
        send_with_descriptor(self.channel.as_raw_fd(), CLAIM_REPORT, theirs.as_raw_fd())
            .map_err(io("cannot pass boxd init the claim's socket"))?;
        drop(theirs);
        UnixStream::from(mine)
            .write_all(&bytes)
            .map_err(io("cannot send boxd init the claim"))
    }
}

/// The channel of one serve start: init's end (credentials passed) and serve's end (to place at
/// [`HANDOVER_FD`]), both close-on-exec.
pub fn channel() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (init_end, serve_end) = socket_pair(libc::SOCK_SEQPACKET)?;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with a pointer to a local int of the size given.
    let set = unsafe {
        libc::setsockopt(
            init_end.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&raw const on).cast(),
            socklen_of::<libc::c_int>(),
        )
    };
    if set == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((init_end, serve_end))
}

/// In init's child, between fork and exec: the real group set apart from the effective one, which makes
/// the program about to be executed non-dumpable from its start (see the module's comment). Without
/// `CAP_SETGID` (init not root) this fails and is ignored: then nobody else runs as root either.
pub fn set_group_apart() {
    // SAFETY: getegid and setresgid are async-signal-safe and take integers.
    unsafe {
        let effective = libc::getegid();
        let apart = if effective == APART_GROUP {
            APART_GROUP.wrapping_sub(1)
        } else {
            APART_GROUP
        };
        libc::setresgid(apart, effective, effective);
    }
}

/// serve's first statement: non-dumpable (whoever started it), and the real group back to the effective
/// one if init set it apart.
pub fn restore_group() -> std::io::Result<()> {
    // SAFETY: prctl, getgid, getegid and setresgid with integer arguments only.
    unsafe {
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) == -1 {
            return Err(std::io::Error::last_os_error());
        }
        let effective = libc::getegid();
        if libc::getgid() != effective && libc::setresgid(effective, effective, effective) == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// init's side, for the serve started as `pid` with `channel` (init's end): waits for its request,
/// checks who sent it, and answers with the secrets and a copy of `listener`. On a refusal the caller
/// stops that serve.
pub fn answer(
    channel: &OwnedFd,
    pid: libc::pid_t,
    offer: &Offer,
    listener: &std::net::TcpListener,
) -> Result<(), HandoverError> {
    set_timeouts(channel.as_raw_fd()).map_err(io("cannot bound the wait"))?;
    let mut request = [0u8; 64];
    let received = receive(channel.as_raw_fd(), &mut request)
        .map_err(io("cannot read boxd serve's request"))?;
    if received.length == 0 && received.credentials.is_none() {
        // serve exited (or was killed) before asking.
        return Err(HandoverError::Refused);
    }
    sent_by(received.credentials, pid)?;
    let Some(reply) = received.descriptors.first() else {
        return Err(HandoverError::Malformed);
    };
    if request.get(..received.length) != Some(REQUEST) || !is_socket(reply) {
        return Err(HandoverError::Malformed);
    }
    let tracer = tracer_of(pid).map_err(io("cannot read boxd serve's status"))?;
    if tracer != 0 {
        return Err(HandoverError::Traced { pid, tracer });
    }
    set_timeouts(reply.as_raw_fd()).map_err(io("cannot bound the answer"))?;
    let answer = offer
        .answer()
        .map_err(|err| HandoverError::Invalid(err.to_string()))?;
    send_with_descriptor(reply.as_raw_fd(), &answer, listener.as_raw_fd())
        .map_err(io("cannot answer boxd serve"))
}

/// init's side after [`answer`]: keeps the claim the serve started as `pid` reports (checked as its
/// request was), until that serve's end closes; returns why it stopped listening.
pub fn follow_claims(
    channel: &OwnedFd,
    pid: libc::pid_t,
    offer: &Offer,
) -> Result<(), HandoverError> {
    // No deadline now: a claim comes whenever a client makes one, or never.
    clear_read_timeout(channel.as_raw_fd()).map_err(io("cannot wait for a claim"))?;
    let mut message = [0u8; 64];
    for _ in 0..MAX_REPORTS {
        let received = match receive(channel.as_raw_fd(), &mut message) {
            Ok(received) => received,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                return Err(HandoverError::Io {
                    what: "cannot read a claim",
                    source: err,
                });
            }
        };
        if received.length == 0 && received.credentials.is_none() && received.descriptors.is_empty()
        {
            return Ok(()); // serve exited
        }
        sent_by(received.credentials, pid)?;
        let is_report = message.get(..received.length) == Some(CLAIM_REPORT);
        let Some(stream) = received.descriptors.into_iter().next() else {
            return Err(HandoverError::Malformed);
        };
        if !is_report || !is_socket(&stream) {
            return Err(HandoverError::Malformed);
        }
        set_timeouts(stream.as_raw_fd()).map_err(io("cannot bound the claim's read"))?;
        let bytes = read_all(
            &mut UnixStream::from(stream),
            MAX_CLAIM_BYTES.saturating_add(1),
        );
        if bytes.len() > MAX_CLAIM_BYTES {
            return Err(HandoverError::Invalid(format!(
                "a claim longer than {MAX_CLAIM_BYTES} bytes"
            )));
        }
        let record = serde_json::from_slice(&bytes)
            .map_err(|err| HandoverError::Invalid(format!("a claim: {err}")))?;
        offer.remember(record);
    }
    Err(HandoverError::Invalid(format!(
        "more than {MAX_REPORTS} messages after the answer"
    )))
}

/// Whether a message's kernel-supplied credentials name the serve started as `pid`.
fn sent_by(credentials: Option<libc::ucred>, pid: libc::pid_t) -> Result<(), HandoverError> {
    let credentials = credentials.ok_or(HandoverError::Malformed)?;
    if credentials.pid != pid {
        return Err(HandoverError::WrongPeer {
            got: credentials.pid,
            expected: pid,
        });
    }
    Ok(())
}

/// serve's side: asks init on `fd` and takes what it answers; `fd` is closed.
pub fn request(fd: RawFd) -> Result<Received, HandoverError> {
    // SAFETY: init placed this descriptor for this process alone; nothing else owns it.
    let channel = unsafe { OwnedFd::from_raw_fd(fd) };
    // Made now, in a non-dumpable process: no other process can hold a copy of `mine`.
    let (mine, theirs) =
        socket_pair(libc::SOCK_STREAM).map_err(io("cannot make the answer's socket"))?;
    set_timeouts(mine.as_raw_fd()).map_err(io("cannot bound the wait"))?;
    send_with_descriptor(channel.as_raw_fd(), REQUEST, theirs.as_raw_fd())
        .map_err(io("cannot ask boxd init for the secrets"))?;
    drop(theirs);
    // Kept to report a claim, and out of every child's reach.
    set_close_on_exec(channel.as_raw_fd()).map_err(io("cannot keep the channel from children"))?;
    let mut answer = Vec::new();
    let mut listener = None;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let received = receive(mine.as_raw_fd(), &mut chunk)
            .map_err(io("cannot read the secrets from boxd init"))?;
        for descriptor in received.descriptors {
            if listener.is_none() {
                listener = Some(std::net::TcpListener::from(descriptor));
            }
        }
        if received.length == 0 {
            break;
        }
        answer.extend_from_slice(chunk.get(..received.length).unwrap_or_default());
        if answer.len() > MAX_ANSWER_BYTES {
            return Err(HandoverError::Invalid(format!(
                "longer than {MAX_ANSWER_BYTES} bytes"
            )));
        }
    }
    if answer.is_empty() {
        return Err(HandoverError::Refused);
    }
    let answer: Answer =
        serde_json::from_slice(&answer).map_err(|err| HandoverError::Invalid(err.to_string()))?;
    if let Some(unknown) = answer
        .secrets
        .keys()
        .find(|name| !SECRET_VARIABLES.contains(&name.as_str()))
    {
        return Err(HandoverError::Invalid(format!("unknown secret {unknown}")));
    }
    restore_environment(answer.environment);
    Ok(Received {
        secrets: answer.secrets,
        listener,
        claim: answer.claim,
        claims: ClaimReporter { channel },
    })
}

/// Puts back the variables of serve's intended environment that are missing from its own (glibc drops
/// some from a "secure" program's).
fn restore_environment(environment: Vec<(Vec<u8>, Vec<u8>)>) {
    for (name, value) in environment {
        let name = OsString::from_vec(name);
        if name.is_empty()
            || name.as_bytes().contains(&b'=')
            || name.as_bytes().contains(&0)
            || value.contains(&0)
            || std::env::var_os(&name).is_some()
        {
            continue;
        }
        // SAFETY: called from `main` before any other thread exists (the hand-over is serve's first
        // step), so nothing reads the environment concurrently.
        unsafe { std::env::set_var(&name, OsString::from_vec(value)) };
    }
}

fn socket_pair(kind: libc::c_int) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } == -1
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned from here on.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_timeouts(fd: RawFd) -> std::io::Result<()> {
    // A UnixStream view only to set the socket's timeouts; the descriptor stays the caller's.
    // SAFETY: `fd` is a socket the caller owns; ManuallyDrop keeps this view from closing it.
    let view = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
    view.set_read_timeout(Some(PATIENCE))?;
    view.set_write_timeout(Some(PATIENCE))
}

fn clear_read_timeout(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: as in `set_timeouts`.
    let view = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
    view.set_read_timeout(None)
}

fn set_close_on_exec(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl with integer arguments on a descriptor the caller owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn socklen_of<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

fn is_socket(fd: &OwnedFd) -> bool {
    use std::os::unix::fs::FileTypeExt;
    // SAFETY: a File view to fstat a descriptor the caller owns; ManuallyDrop keeps it open.
    let view = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd.as_raw_fd()) });
    view.metadata()
        .is_ok_and(|meta| meta.file_type().is_socket())
}

/// `TracerPid` of `/proc/<pid>/status`.
fn tracer_of(pid: libc::pid_t) -> std::io::Result<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("TracerPid:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no TracerPid line"))
}

/// Sends `bytes` and one descriptor (with the first bytes), all of `bytes` (a stream may take them in
/// parts).
fn send_with_descriptor(fd: RawFd, bytes: &[u8], passed: RawFd) -> std::io::Result<()> {
    let descriptor_size = u32::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(u32::MAX);
    // Aligned for cmsghdr; one descriptor's control message is 24 bytes on Linux.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the sendmsg call, and the
    // control message is written within `control` (CMSG_SPACE of one int fits 64 bytes).
    let sent = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &raw mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = libc::CMSG_SPACE(descriptor_size) as usize;
        let header = libc::CMSG_FIRSTHDR(&raw const message);
        if header.is_null() {
            return Err(std::io::Error::other("no room for the control message"));
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(descriptor_size) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), passed);
        libc::sendmsg(fd, &raw const message, libc::MSG_NOSIGNAL)
    };
    let sent = usize::try_from(sent).map_err(|_| std::io::Error::last_os_error())?;
    if let Some(rest) = bytes.get(sent..).filter(|rest| !rest.is_empty()) {
        // The descriptor went with the first part; the rest is plain bytes.
        // SAFETY: a UnixStream view of the caller's socket; ManuallyDrop keeps it open.
        let mut view = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
        view.write_all(rest)?;
    }
    Ok(())
}

struct Message {
    length: usize,
    credentials: Option<libc::ucred>,
    descriptors: Vec<OwnedFd>,
}

/// One `recvmsg` into `buffer`, with the credentials and descriptors that came with it (descriptors
/// close-on-exec). A control part cut short (descriptors lost) is an error.
fn receive(fd: RawFd, buffer: &mut [u8]) -> std::io::Result<Message> {
    // Aligned for cmsghdr: room for credentials and a few descriptors.
    let mut control = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers name live locals for the duration of the call.
    let (received, message) = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &raw mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control);
        let received = libc::recvmsg(fd, &raw mut message, libc::MSG_CMSG_CLOEXEC);
        (received, message)
    };
    let length = usize::try_from(received).map_err(|_| std::io::Error::last_os_error())?;
    let mut credentials = None;
    let mut descriptors = Vec::new();
    // SAFETY: the CMSG_* walk stays within the control buffer recvmsg filled (msg_controllen), and each
    // payload is read unaligned with the size its header gives.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&raw const message);
        while !header.is_null() {
            let data = libc::CMSG_DATA(header);
            let payload =
                ((*header).cmsg_len as usize).saturating_sub(data as usize - header as usize);
            match ((*header).cmsg_level, (*header).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    let count = payload / std::mem::size_of::<libc::c_int>();
                    for index in 0..count {
                        let passed =
                            std::ptr::read_unaligned(data.cast::<libc::c_int>().add(index));
                        descriptors.push(OwnedFd::from_raw_fd(passed));
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS)
                    if payload >= std::mem::size_of::<libc::ucred>() =>
                {
                    credentials = Some(std::ptr::read_unaligned(data.cast::<libc::ucred>()));
                }
                _ => {}
            }
            header = libc::CMSG_NXTHDR(&raw const message, header);
        }
    }
    if message.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(std::io::Error::other("control data cut short"));
    }
    Ok(Message {
        length,
        credentials,
        descriptors,
    })
}

/// Reads a whole stream to its end, at most `limit` bytes.
fn read_all(stream: &mut UnixStream, limit: usize) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let _ = stream
        .take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel's two ends, a listener and an offer of `secrets`, and this process's pid.
    fn hand_over_setup(
        secrets: &Secrets,
    ) -> (OwnedFd, OwnedFd, std::net::TcpListener, Offer, libc::pid_t) {
        let Ok((init_end, serve_end)) = channel() else {
            panic!("channel");
        };
        let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
            panic!("listener");
        };
        let Ok(offer) = Offer::new(secrets, &[]) else {
            panic!("offer");
        };
        // SAFETY: getpid only reads an id.
        let me = unsafe { libc::getpid() };
        (init_end, serve_end, listener, offer, me)
    }

    #[test]
    fn a_request_from_another_process_gets_nothing() {
        let secrets = Secrets::from([("SECRET_TOKEN".to_string(), "t0ken".to_string())]);
        let (init_end, serve_end, listener, offer, me) = hand_over_setup(&secrets);
        // This process asks, but init expects another pid: refused, nothing sent.
        let Ok((mine, theirs)) = socket_pair(libc::SOCK_STREAM) else {
            panic!("pair");
        };
        assert!(send_with_descriptor(serve_end.as_raw_fd(), REQUEST, theirs.as_raw_fd()).is_ok());
        drop(theirs);
        let refused = answer(&init_end, me.wrapping_add(1), &offer, &listener);
        assert!(
            matches!(refused, Err(HandoverError::WrongPeer { .. })),
            "{refused:?}"
        );
        let mut mine = UnixStream::from(mine);
        assert!(read_all(&mut mine, 1024).is_empty());
    }

    #[test]
    fn the_process_that_asks_gets_the_secrets_and_the_listener() {
        let secrets = Secrets::from([("SECRET_TOKEN".to_string(), "t0ken".to_string())]);
        let (init_end, serve_end, listener, offer, me) = hand_over_setup(&secrets);
        let init = std::thread::spawn(move || answer(&init_end, me, &offer, &listener).is_ok());
        let fd = serve_end.as_raw_fd();
        std::mem::forget(serve_end);
        let received = request(fd);
        assert!(init.join().unwrap_or(false));
        let Ok(received) = received else {
            panic!("request failed");
        };
        assert_eq!(received.secrets, secrets);
        assert!(received.listener.is_some_and(|l| l.local_addr().is_ok()));
    }

    /// What closes the window the restart race used (issue #45, item 1): a program started with its
    /// real group set apart is non-dumpable from its first instruction, before it runs any code of its
    /// own. (Setting groups needs CAP_SETGID: as another user, `set_group_apart` changes nothing, and
    /// nobody else runs as that user's root either.)
    #[test]
    fn a_program_started_with_its_group_apart_is_never_dumpable() {
        use std::os::unix::process::CommandExt;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let dumpable_at_start = |apart: bool| {
            // PR_GET_DUMPABLE is 3: the first thing the new program does, in C through ctypes.
            let mut command = std::process::Command::new("/usr/bin/python3");
            command.args([
                "-S",
                "-c",
                "import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))",
            ]);
            if apart {
                // SAFETY: set_group_apart calls only getegid and setresgid (async-signal-safe).
                unsafe {
                    command.pre_exec(|| {
                        set_group_apart();
                        Ok(())
                    });
                }
            }
            let output = command.output().map(|output| output.stdout);
            String::from_utf8_lossy(&output.unwrap_or_default())
                .trim()
                .to_string()
        };
        assert_eq!(dumpable_at_start(false), "1", "a plain start is dumpable");
        let expected = if root { "0" } else { "1" };
        assert_eq!(dumpable_at_start(true), expected);
    }

    #[test]
    fn a_reported_claim_is_handed_to_the_next_serve() {
        let secrets = Secrets::from([("BOXD_POOL_SECRET".to_string(), "p00l".to_string())]);
        let (init_end, serve_end, listener, offer, me) = hand_over_setup(&secrets);
        let offer = std::sync::Arc::new(offer);
        let init = {
            let offer = std::sync::Arc::clone(&offer);
            std::thread::spawn(move || {
                answer(&init_end, me, &offer, &listener).is_ok()
                    && follow_claims(&init_end, me, &offer).is_ok()
            })
        };
        let fd = serve_end.as_raw_fd();
        std::mem::forget(serve_end);
        let Ok(received) = request(fd) else {
            panic!("request failed");
        };
        assert_eq!(received.claim, None, "nothing claimed yet");
        let record = ClaimRecord {
            token: "session-token-0123456789".into(),
            env: vec![("MARK".into(), "a \"quoted\"\nvalue".into())],
        };
        assert!(received.claims.report(&record).is_ok());
        drop(received);
        assert!(
            init.join().unwrap_or(false),
            "init followed until serve's end closed"
        );
        let Ok(next) = serde_json::from_slice::<Answer>(&offer.answer().unwrap_or_default()) else {
            panic!("the next answer");
        };
        assert_eq!(next.claim, Some(record));
    }
}
