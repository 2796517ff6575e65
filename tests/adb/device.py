#!/usr/bin/env python3
"""boxd's Android device stand-in: the device side of the ADB transport over TCP (what adbd speaks to
`adb connect HOST:PORT` and to boxd's `--adb-connect HOST:PORT`), with the host's `sh` as the device shell.

No emulator runs on the machines boxd is tested on and Debian ships no adbd, so this is the device the
mobile tests reach. It is written from AOSP's protocol descriptions (adb/protocol.txt, SERVICES.TXT,
SYNC.TXT, shell_protocol.h), not from adbd's code:

- transport: CNXN (version and largest payload negotiated: the smaller of both sides' offers), optional
  RSA authentication (AUTH TOKEN -> SIGNATURE, else the host's RSAPUBLICKEY, trusted only when allowed),
  OPEN/OKAY/WRTE/CLSE with one WRTE in flight per stream and direction;
- services: `shell:` (v1: raw with stderr merged into stdout, a pty when no command), `shell,v2,...:`
  (the shell protocol: stdout, stderr and exit status apart; raw or pty; stdin, close-stdin and window
  size from the host), `exec:` (raw, merged, no protocol), `sync:` (STAT, STA2, LST2, LIST, LIS2, SEND,
  RECV, QUIT) and `framebuffer:` (from `screencap`'s raw output, as adbd does).

Commands run under `sh` on this host in `/`, with the stand-ins of Android's tools (`fakebin/` beside this
file, or the directory in $FAKEBIN) first on PATH; the stand-ins read the FAKE_* switches from the
environment this process was started with.

    python3 device.py PORT [--auth] [--keys FILE] [--accept-new-keys] [--host 127.0.0.1] [--verbose]

Authentication is off by default (a device with ro.adb.secure=0). With --auth the device asks the host to
sign a random 20-byte token and checks the signature against the keys in --keys (Android's adb_keys
format: one `adbkey.pub` line per key, re-read at each check as adbd does). A host whose key is not there
sends its public key; --accept-new-keys trusts it at once (as if someone always tapped "Allow"),
appending it to --keys. Without it the device shows its "Allow USB debugging?" dialog and the host stays
unauthorized until it is answered: the dialog is the file $FAKE_AUTH_DIALOG (default: one in a private
temporary directory) holding the key's line, which the stand-in `dumpsys window` reports as the focused
window; the stand-in `input` answers it "Allow" (renames it to FILE.allowed) with a tap, a swipe, or
Enter, as a real dialog takes a touch on its button, and the device then trusts the key (appended to
--keys) and lets the waiting connection in; deleting the file dismisses it (the key stays untrusted).
Signatures are checked here in pure Python: RSA with the public exponent,
then the PKCS#1 v1.5 padding around SHA-1's DigestInfo and the token, as adbd's RSA_verify(NID_sha1).

It prints `device listening on HOST:PORT` once it accepts connections (PORT 0 picks a free port).
"""
import argparse
import base64
import binascii
import collections
import fcntl
import hmac
import os
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass


def command_word(name: str) -> int:
    """A message's command: its four ASCII letters read as a little-endian word ("CNXN" -> 0x4e584e43)."""
    return struct.unpack("<I", name.encode("ascii"))[0]


A_CNXN, A_AUTH, A_OPEN = command_word("CNXN"), command_word("AUTH"), command_word("OPEN")
A_OKAY, A_WRTE, A_CLSE = command_word("OKAY"), command_word("WRTE"), command_word("CLSE")
COMMAND_NAMES = {A_CNXN: "CNXN", A_AUTH: "AUTH", A_OPEN: "OPEN", A_OKAY: "OKAY", A_WRTE: "WRTE", A_CLSE: "CLSE"}

HEADER = struct.Struct("<6I")  # command, arg0, arg1, payload length, payload checksum, command ^ 0xffffffff
VERSION_MIN = 0x01000000
# From this version on, either side may leave the payload checksum 0 (and must not check it).
VERSION_SKIP_CHECKSUM = 0x01000001
VERSION = VERSION_SKIP_CHECKSUM
# The largest payload this device offers (adbd's since Android 9); a host offering less wins.
MAX_PAYLOAD = 1024 * 1024
FEATURES = ("shell_v2", "cmd", "stat_v2", "ls_v2", "fixed_push_mkdir")
BANNER = ("device::ro.product.name=boxd_device;ro.product.model=boxd_test_device;"
          "ro.product.device=boxd_device;features=" + ",".join(FEATURES)).encode() + b"\0"

AUTH_TOKEN, AUTH_SIGNATURE, AUTH_RSAPUBLICKEY = 1, 2, 3
TOKEN_SIZE = 20
# A host that keeps sending wrong signatures is dropped after this many (adbd only slows down).
MAX_AUTH_FAILURES = 64
# Android's public key blob: modulus size in words, n0inv, modulus, R^2 mod n (both 256 bytes,
# little-endian), exponent; 2048-bit keys only, as adbd.
ANDROID_PUBKEY_MODULUS_BYTES = 256
ANDROID_PUBKEY_ENCODED_SIZE = 4 + 4 + 2 * ANDROID_PUBKEY_MODULUS_BYTES + 4
# DER of DigestInfo{sha1, NULL} up to the digest: what PKCS#1 v1.5 puts before a SHA-1 digest.
SHA1_DIGEST_INFO_PREFIX = bytes.fromhex("3021300906052b0e03021a05000414")

# The shell protocol's packet ids (shell_protocol.h): one id byte, a little-endian length, the data.
SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN, SHELL_WINDOW_SIZE = range(6)
SHELL_PACKET = struct.Struct("<BI")

# How often the device looks whether its authorization dialog was answered, and how long it shows at
# most (a real one waits for its answer; this one goes away unanswered, so no thread polls forever).
DIALOG_POLL_SECONDS = 0.05
DIALOG_SECONDS = 300

SYNC_DATA_MAX = 64 * 1024
SYNC_PATH_MAX = 1024

# How long a stream may wait for the host (an OKAY for its last WRTE, the next request in sync) and how
# long a command may run on after its output closed: past these the stream is closed, never waited on.
STALL_SECONDS = 300
# Host data that arrived and was not yet taken by the service; the host sends one WRTE and waits for its
# OKAY, so more than a few is a host not keeping flow control.
MAX_PENDING_WRITES = 8
READ_CHUNK = 64 * 1024

FAKEBIN = os.environ.get("FAKEBIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakebin")
VERBOSE = False


def log(*parts):
    if VERBOSE:
        print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def checksum(payload: bytes) -> int:
    return sum(payload) & 0xFFFFFFFF


# ---- RSA authentication -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublicKey:
    modulus: int
    exponent: int
    line: str  # as it appears in adb_keys: base64 blob, optionally a space and user@host


def decode_public_key(line: str):
    """An `adbkey.pub` line as a PublicKey, or None when it is not a 2048-bit Android public key."""
    fields = line.strip().split(None, 1)
    if not fields:
        return None
    try:
        blob = base64.b64decode(fields[0], validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(blob) != ANDROID_PUBKEY_ENCODED_SIZE:
        return None
    (words,) = struct.unpack_from("<I", blob, 0)
    if words * 4 != ANDROID_PUBKEY_MODULUS_BYTES:
        return None
    modulus = int.from_bytes(blob[8:8 + ANDROID_PUBKEY_MODULUS_BYTES], "little")
    (exponent,) = struct.unpack_from("<I", blob, ANDROID_PUBKEY_ENCODED_SIZE - 4)
    if modulus.bit_length() != ANDROID_PUBKEY_MODULUS_BYTES * 8 or modulus % 2 == 0 or exponent < 3:
        return None
    return PublicKey(modulus, exponent, line.strip())


def signature_matches(key: PublicKey, token: bytes, signature: bytes) -> bool:
    """Whether `signature` is the host's PKCS#1 v1.5 SHA-1 signature of `token` (the token stands as the
    digest itself, as the host's RSA_sign(NID_sha1, token) makes it)."""
    size = ANDROID_PUBKEY_MODULUS_BYTES
    if len(token) != TOKEN_SIZE or len(signature) != size:
        return False
    value = int.from_bytes(signature, "big")
    if value >= key.modulus:
        return False
    recovered = pow(value, key.exponent, key.modulus).to_bytes(size, "big")
    suffix = SHA1_DIGEST_INFO_PREFIX + token
    expected = b"\x00\x01" + b"\xff" * (size - 3 - len(suffix)) + b"\x00" + suffix
    return hmac.compare_digest(recovered, expected)


class Keys:
    """The public keys this device trusts: --keys (re-read at each check) and those accepted since."""

    def __init__(self, path, accept_new):
        self.path = path
        self.accept_new = accept_new
        self.accepted = []  # accepted without a --keys file to keep them in
        self.lock = threading.Lock()

    def trusted(self):
        lines = []
        if self.path:
            try:
                with open(self.path, encoding="utf-8", errors="replace") as keys_file:
                    lines = keys_file.read().split("\n")
            except FileNotFoundError:
                pass
        keys = [key for key in map(decode_public_key, lines) if key]
        with self.lock:
            return keys + list(self.accepted)

    def verify(self, token, signature):
        return any(signature_matches(key, token, signature) for key in self.trusted())

    def offered(self, payload: bytes):
        """The host's own public key (AUTH RSAPUBLICKEY) as a PublicKey, or None when it is not one."""
        key = decode_public_key(payload.rstrip(b"\0").decode("utf-8", "replace"))
        if key is None:
            log("auth: the host offered something that is not a public key")
        return key

    def trust(self, key: PublicKey):
        """Keeps `key` among the trusted ones: appended to --keys, else remembered while this runs."""
        with self.lock:
            if self.path:
                with open(self.path, "a", encoding="utf-8") as keys_file:
                    keys_file.write(key.line + "\n")
            else:
                self.accepted.append(key)
        log("auth: trusted the host's new key")


class AuthDialog:
    """Android's "Allow USB debugging?" dialog, which adbd has SystemUI show for a key it does not know.
    It shows while the file `path` exists (holding the key's line): the stand-in `dumpsys window` then
    reports SystemUI's UsbDebuggingActivity as the focused window. The stand-in `input` answers it
    "Allow" by renaming the file to `path.allowed`; whoever deletes the file dismisses it. One shows at a
    time: a newer offer takes the place of the older one (whose host stays unauthorized)."""

    def __init__(self, path, keys):
        self.path = path
        self.allowed = path + ".allowed"
        self.keys = keys
        self.lock = threading.Lock()
        self.waiting = None  # (key, connection) the dialog asks about
        self.watching = False

    def ask(self, key, connection):
        with self.lock:
            for stale in (self.allowed, self.path + ".new"):
                try:
                    os.unlink(stale)
                except FileNotFoundError:
                    pass
            with open(self.path + ".new", "w", encoding="utf-8") as shown:
                shown.write(key.line + "\n")
            os.replace(self.path + ".new", self.path)
            self.waiting = (key, connection)
            log("auth: the device shows its authorization dialog for the host's new key")
            if not self.watching:
                self.watching = True
                threading.Thread(target=self.watch, daemon=True, name="auth-dialog").start()

    def watch(self):
        """Until the dialog is answered, dismissed or shown for DIALOG_SECONDS."""
        deadline = time.monotonic() + DIALOG_SECONDS
        while True:
            time.sleep(DIALOG_POLL_SECONDS)
            with self.lock:
                answered = None
                if os.path.exists(self.allowed):
                    answered, self.waiting = self.waiting, None
                    os.unlink(self.allowed)
                elif not os.path.exists(self.path):
                    log("auth: the authorization dialog was dismissed")
                    self.waiting = None
                elif time.monotonic() > deadline:
                    log("auth: the authorization dialog went away unanswered")
                    self.waiting = None
                    os.unlink(self.path)
                if self.waiting is None:
                    self.watching = False
                    break
        if answered:
            key, connection = answered
            log("auth: the authorization dialog was answered: Allow")
            self.keys.trust(key)
            connection.allowed(key)


# ---- streams --------------------------------------------------------------------------------------------


class StreamClosed(Exception):
    """The host closed the stream (or the connection went away) while the service still used it."""


class Stream:
    """One OPENed service: host data arrives through `deliver` and is OKAYed when the service takes it;
    device data leaves through `write`, one WRTE at a time, each after the host's OKAY of the previous."""

    def __init__(self, connection, local_id, remote_id, service):
        self.connection = connection
        self.local_id = local_id
        self.remote_id = remote_id
        self.service = service
        self.changed = threading.Condition()
        self.inbox = collections.deque()
        self.buffer = bytearray()
        self.may_write = True  # a WRTE may go out (the OPEN's OKAY counts as the host's go-ahead)
        self.closed = False
        self.on_close = []  # called once when the host closes the stream (to stop a running command)
        self.write_lock = threading.Lock()

    # host -> device
    def deliver(self, payload):
        with self.changed:
            if self.closed:
                return
            if len(self.inbox) >= MAX_PENDING_WRITES:
                log(f"stream {self.local_id}: the host wrote without waiting for OKAY; closing")
                overflowed = True
            else:
                overflowed = False
                self.inbox.append(payload)
                self.changed.notify_all()
        if overflowed:
            self.close()

    def _next_piece(self, timeout):
        """The next WRTE's payload, OKAYed now so the host may send another; b"" once closed."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.inbox or self.closed, timeout):
                raise TimeoutError(f"the host sent nothing on stream {self.local_id} for {timeout} s")
            if not self.inbox:
                return b""
            data = self.inbox.popleft()
        self.connection.send(A_OKAY, self.local_id, self.remote_id)
        return data

    def read_some(self, timeout=None):
        """What the host sent and the service has not read yet (b"" once the stream is closed)."""
        if self.buffer:
            data, self.buffer = bytes(self.buffer), bytearray()
            return data
        return self._next_piece(timeout)

    def read_exact(self, size, timeout=STALL_SECONDS):
        """Exactly `size` bytes; StreamClosed when the stream closes first."""
        while len(self.buffer) < size:
            piece = self._next_piece(timeout)
            if not piece:
                raise StreamClosed
            self.buffer += piece
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    # device -> host
    def write(self, data):
        view = memoryview(data)
        with self.write_lock:
            while view:
                chunk, view = bytes(view[:self.connection.max_payload]), view[self.connection.max_payload:]
                with self.changed:
                    if not self.changed.wait_for(lambda: self.may_write or self.closed, STALL_SECONDS):
                        raise StreamClosed
                    if self.closed:
                        raise StreamClosed
                    self.may_write = False
                self.connection.send(A_WRTE, self.local_id, self.remote_id, chunk)

    def okayed(self):
        with self.changed:
            self.may_write = True
            self.changed.notify_all()

    def when_closed_by_host(self, stop):
        """Calls `stop` when the host closes the stream, at once if it already has."""
        with self.changed:
            self.on_close.append(stop)
            already = self.closed
        if already:
            stop()

    def closed_by_host(self):
        with self.changed:
            if self.closed:
                return
            self.closed = True
            self.changed.notify_all()
        for stop in self.on_close:
            stop()

    def close(self):
        """The service is done: CLSE to the host (once), and the stream is forgotten."""
        with self.changed:
            already = self.closed
            self.closed = True
            self.changed.notify_all()
        self.connection.forget(self.local_id)
        if not already:
            self.connection.send(A_CLSE, self.local_id, self.remote_id)


# ---- the connection ---------------------------------------------------------------------------------


class Connection:
    def __init__(self, sock, keys, auth_required, dialog):
        self.sock = sock
        self.keys = keys
        self.auth_required = auth_required
        self.dialog = dialog
        # The transport's state (online, the token, the key offered), which the dialog's answer also
        # changes, from its own thread.
        self.state_lock = threading.RLock()
        self.offered_key = None
        self.send_lock = threading.Lock()
        self.streams = {}
        self.streams_lock = threading.Lock()
        self.next_id = 1
        self.version = VERSION_MIN
        self.max_payload = 4096  # until CNXN says otherwise
        self.online = False
        self.token = None
        self.auth_failures = 0

    def send(self, command, arg0, arg1, payload=b""):
        header = HEADER.pack(command, arg0, arg1, len(payload), checksum(payload), command ^ 0xFFFFFFFF)
        try:
            with self.send_lock:
                self.sock.sendall(header + payload)
        except OSError:
            pass  # the reader sees the connection end and closes every stream

    def forget(self, local_id):
        with self.streams_lock:
            self.streams.pop(local_id, None)

    def receive_exactly(self, size):
        data = bytearray()
        while len(data) < size:
            piece = self.sock.recv(size - len(data))
            if not piece:
                raise EOFError
            data += piece
        return bytes(data)

    def serve(self):
        try:
            while True:
                command, arg0, arg1, length, check, magic = HEADER.unpack(self.receive_exactly(HEADER.size))
                if magic != command ^ 0xFFFFFFFF or length > MAX_PAYLOAD:
                    log("a malformed message; closing the connection")
                    return
                payload = self.receive_exactly(length) if length else b""
                if self.version < VERSION_SKIP_CHECKSUM and check != checksum(payload):
                    log("a payload with a wrong checksum; closing the connection")
                    return
                log("<-", COMMAND_NAMES.get(command, hex(command)), arg0, arg1, payload[:80])
                with self.state_lock:
                    if not self.handle(command, arg0, arg1, payload):
                        return
        except (EOFError, OSError):
            pass
        finally:
            self.drop_streams()
            self.sock.close()
            log("connection closed")

    def handle(self, command, arg0, arg1, payload):
        """One message from the host; False ends the connection."""
        if command == A_CNXN:
            self.drop_streams()  # a host reconnecting starts afresh
            self.version = min(arg0, VERSION)
            self.max_payload = max(1, min(arg1, MAX_PAYLOAD))
            self.online = False
            self.offered_key = None
            if self.auth_required:
                self.ask_for_signature()
            else:
                self.come_online()
        elif command == A_AUTH:
            return self.handle_auth(arg0, payload)
        elif not self.online:
            pass  # before CNXN (and authorization) adbd ignores everything else
        elif command == A_OPEN:
            self.open(arg0, payload)
        elif command == A_WRTE:
            stream = self.streams.get(arg1)
            if stream and stream.remote_id == arg0:
                stream.deliver(payload)
        elif command == A_OKAY:
            stream = self.streams.get(arg1)
            if stream:
                stream.okayed()
        elif command == A_CLSE:
            with self.streams_lock:
                stream = self.streams.pop(arg1, None)
            if stream:
                stream.closed_by_host()
        return True

    def come_online(self):
        self.online = True
        self.token = None
        self.offered_key = None
        self.send(A_CNXN, VERSION, self.max_payload, BANNER)

    def allowed(self, key):
        """The dialog asking about `key` was answered "Allow": the host that offered it, still waiting on
        this connection, comes online (adbd sends its CNXN then)."""
        with self.state_lock:
            if not self.online and self.offered_key == key:
                self.come_online()

    def ask_for_signature(self):
        self.token = secrets.token_bytes(TOKEN_SIZE)  # a new one each time, as adbd
        self.send(A_AUTH, AUTH_TOKEN, 0, self.token)

    def handle_auth(self, kind, payload):
        if self.online or self.token is None:
            return True
        if kind == AUTH_SIGNATURE:
            if self.keys.verify(self.token, payload):
                log("auth: signature verified")
                self.come_online()
                return True
            self.auth_failures += 1
            if self.auth_failures > MAX_AUTH_FAILURES:
                log("auth: too many wrong signatures; closing the connection")
                return False
            self.ask_for_signature()  # the host tries its next key, then offers its public key
        elif kind == AUTH_RSAPUBLICKEY:
            key = self.keys.offered(payload)
            if key is None:
                return True
            if self.keys.accept_new:
                self.keys.trust(key)
                self.come_online()
            else:
                # Unauthorized until someone answers the dialog, or the host reconnects with a trusted key.
                self.offered_key = key
                self.dialog.ask(key, self)
        return True

    def open(self, remote_id, payload):
        name = payload.split(b"\0", 1)[0].decode("utf-8", "replace")
        service = find_service(name)
        if service is None or remote_id == 0:
            log("unsupported service", repr(name))
            self.send(A_CLSE, 0, remote_id)
            return
        with self.streams_lock:
            local_id = self.next_id
            self.next_id = self.next_id + 1 if self.next_id < 0x7FFFFFFF else 1
            stream = Stream(self, local_id, remote_id, name)
            self.streams[local_id] = stream
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(target=run_service, args=(service, stream), daemon=True,
                         name=f"stream-{local_id}").start()

    def drop_streams(self):
        with self.streams_lock:
            streams, self.streams = list(self.streams.values()), {}
        for stream in streams:
            stream.closed_by_host()


# ---- services -----------------------------------------------------------------------------------------


def child_environment(term=None):
    env = dict(os.environ)
    env["PATH"] = FAKEBIN + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    if term:
        env["TERM"] = term
    return env


class Children:
    """Every command still running, so that stopping the device stops them too."""

    lock = threading.Lock()
    running = set()

    @classmethod
    def add(cls, process):
        with cls.lock:
            cls.running.add(process)

    @classmethod
    def remove(cls, process):
        with cls.lock:
            cls.running.discard(process)

    @classmethod
    def stop_all(cls):
        with cls.lock:
            processes = list(cls.running)
        for process in processes:
            signal_group(process, signal.SIGKILL)


def signal_group(process, signum):
    try:
        os.killpg(process.pid, signum)  # each command leads its own session (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


def take_controlling_terminal():
    """In the child, after setsid: its pty (stdin) becomes its controlling terminal, so ^C and job
    control reach it as on a device. Only an ioctl runs here between fork and exec."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@dataclass
class ShellRequest:
    command: str
    protocol: bool  # the shell v2 protocol (packets) rather than raw bytes
    pty: bool
    term: str = None


def parse_shell(name):
    """`shell[,ARG...]:COMMAND` (SERVICES.TXT): v2 selects the shell protocol, raw/pty the terminal
    (default: a pty for an interactive shell, raw for a command), TERM=... the terminal type."""
    head, _, command = name.partition(":")
    options = head.split(",")[1:]
    term = next((option[5:] for option in options if option.startswith("TERM=")), None)
    if "pty" in options:
        pty = True
    elif "raw" in options:
        pty = False
    else:
        pty = command == ""
    return ShellRequest(command, "v2" in options, pty, term)


def exit_byte(returncode):
    """The exit packet's byte: a command killed by a signal ends with 128 + the signal, as sh says."""
    return bytes([(128 - returncode if returncode < 0 else returncode) & 0xFF])


def run_command(stream, request: ShellRequest, merge_stderr):
    """Runs the request's command and carries its input and output over the stream until it ends."""
    argv = ["sh", "-c", request.command] if request.command else ["sh", "-i"]
    env = child_environment(request.term)
    master = None
    if request.pty:
        master, slave = os.openpty()
        try:
            process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd="/",
                                       start_new_session=True, preexec_fn=take_controlling_terminal)
        except OSError:
            os.close(master)
            raise
        finally:
            os.close(slave)
        outputs = [(master, SHELL_STDOUT)]  # a terminal has one output: stderr arrives as stdout
    else:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                                   env=env, cwd="/", start_new_session=True)
        outputs = [(process.stdout.fileno(), SHELL_STDOUT)]
        if not merge_stderr:
            outputs.append((process.stderr.fileno(), SHELL_STDERR))
    Children.add(process)
    # The host closing the stream hangs the command up, as closing a device shell's terminal does.
    stream.when_closed_by_host(lambda: signal_group(process, signal.SIGHUP))

    def frame(packet_id, data):
        return SHELL_PACKET.pack(packet_id, len(data)) + data if request.protocol else data

    def write_stdin(data):
        if master is not None:
            os.write(master, data)
        elif process.stdin and not process.stdin.closed:
            process.stdin.write(data)
            process.stdin.flush()

    def close_stdin():
        # A terminal stays open (^D is the shell's business); a pipe is closed, so the command sees EOF.
        if master is None and process.stdin and not process.stdin.closed:
            process.stdin.close()

    def pump_input():
        """Host -> command: raw bytes, or shell protocol packets (stdin, close-stdin, window size),
        until the stream closes; input after the command stopped reading is dropped."""
        try:
            while True:
                if request.protocol:
                    packet_id, length = SHELL_PACKET.unpack(stream.read_exact(SHELL_PACKET.size, None))
                    data = stream.read_exact(length, None)
                else:
                    packet_id, data = SHELL_STDIN, stream.read_some()
                    if not data:
                        return
                try:
                    if packet_id == SHELL_STDIN:
                        write_stdin(data)
                    elif packet_id == SHELL_CLOSE_STDIN:
                        close_stdin()
                    elif packet_id == SHELL_WINDOW_SIZE and master is not None:
                        set_window_size(master, data)
                except (OSError, ValueError):
                    pass  # the command is gone or closed its input
        except StreamClosed:
            pass
        finally:
            try:
                close_stdin()
            except OSError:
                pass

    def pump_output(fd, packet_id):
        """Command -> host, until the command's side closes (EIO on a pty whose writers are gone)."""
        try:
            while True:
                try:
                    data = os.read(fd, READ_CHUNK)
                except OSError:
                    return
                if not data:
                    return
                stream.write(frame(packet_id, data))
        except StreamClosed:
            signal_group(process, signal.SIGKILL)  # nobody is left to read what it prints

    input_pump = threading.Thread(target=pump_input, daemon=True, name=f"stdin-{stream.local_id}")
    input_pump.start()
    extra_outputs = [threading.Thread(target=pump_output, args=output, daemon=True) for output in outputs[1:]]
    for thread in extra_outputs:
        thread.start()
    try:
        pump_output(*outputs[0])
        for thread in extra_outputs:
            thread.join()
        try:
            returncode = process.wait(STALL_SECONDS)
        except subprocess.TimeoutExpired:  # its output closed long ago and it still runs
            signal_group(process, signal.SIGKILL)
            returncode = process.wait()
        if request.protocol and not stream.closed:
            stream.write(frame(SHELL_EXIT, exit_byte(returncode)))
    finally:
        if process.poll() is None:
            signal_group(process, signal.SIGKILL)
            process.wait()
        Children.remove(process)
        # Closing the stream ends the input pump; only then are the descriptors it writes to closed
        # (closing them under it could let a new file reuse the number).
        stream.close()
        input_pump.join(5)
        if not input_pump.is_alive():
            if master is not None:
                os.close(master)
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe:
                    try:
                        pipe.close()
                    except OSError:
                        pass


def set_window_size(master, data):
    """`ROWSxCOLS,XPIXELSxYPIXELS` (the shell protocol's window-size packet) onto the pty."""
    try:
        characters, _, pixels = data.rstrip(b"\0").decode().partition(",")
        rows, columns = (int(number) for number in characters.split("x"))
        width, height = (int(number) for number in pixels.split("x")) if pixels else (0, 0)
    except ValueError:
        return
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("<4H", rows, columns, width, height))


def shell_service(stream, name):
    request = parse_shell(name)
    # Without the shell protocol stderr has nowhere else to go: it joins stdout, as on adbd.
    run_command(stream, request, merge_stderr=not request.protocol)


def exec_service(stream, name):
    run_command(stream, ShellRequest(name[len("exec:"):], protocol=False, pty=False), merge_stderr=True)


def framebuffer_service(stream, _name):
    """adbd's framebuffer: `screencap`'s raw output (width, height, format, colour space, pixels) behind
    the DDMS raw image header, version 2; RGBA_8888 only, which is what the stand-in prints."""
    capture = subprocess.run(["screencap"], stdout=subprocess.PIPE, env=child_environment(),
                             timeout=STALL_SECONDS, check=False).stdout
    if len(capture) < 16:
        return
    width, height, pixel_format, colour_space = struct.unpack_from("<4I", capture)
    if pixel_format != 1:
        return
    size = width * height * 4
    header = struct.pack("<14I", 2, 32, colour_space, size, width, height, 0, 8, 16, 8, 8, 8, 24, 8)
    stream.write(header + capture[16:16 + size])


def sync_fail(stream, message):
    data = message.encode()
    stream.write(b"FAIL" + struct.pack("<I", len(data)) + data)


def stat_v2(path, follow):
    """STA2/LST2's answer: errno, dev, ino, mode, nlink, uid, gid, size, atime, mtime, ctime."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except OSError as error:
        return struct.pack("<I2Q4IQ3q", error.errno or 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return struct.pack("<I2Q4IQ3q", 0, info.st_dev, info.st_ino, info.st_mode, info.st_nlink, info.st_uid,
                       info.st_gid, info.st_size, int(info.st_atime), int(info.st_mtime), int(info.st_ctime))


def sync_list(stream, path, v2):
    """DENT (mode, size, mtime, name length) or DNT2 (the stat_v2 fields, name length) per entry,
    `.` and `..` included as readdir gives them, then DONE with the entry's size in zeros."""
    try:
        names = [".", ".."] + sorted(os.listdir(path))
    except OSError:
        names = []
    for name in names:
        encoded = name.encode("utf-8", "surrogateescape")
        full = os.path.join(path, name)
        if v2:
            stream.write(b"DNT2" + stat_v2(full, follow=False) + struct.pack("<I", len(encoded)) + encoded)
            continue
        try:
            info = os.lstat(full)
        except OSError:
            continue
        stream.write(b"DENT" + struct.pack("<4I", info.st_mode & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF,
                                           int(info.st_mtime) & 0xFFFFFFFF, len(encoded)) + encoded)
    stream.write(b"DONE" + bytes(struct.calcsize("<I2Q4IQ3qI") if v2 else 16))


def sync_next_chunk(stream):
    """One of SEND's chunks: ("DATA", bytes) or ("DONE", mtime); anything else is a broken request."""
    chunk_id = stream.read_exact(4)
    (length,) = struct.unpack("<I", stream.read_exact(4))
    if chunk_id == b"DONE":
        return "DONE", length
    if chunk_id != b"DATA" or length > SYNC_DATA_MAX:
        raise ValueError("invalid data message")
    return "DATA", stream.read_exact(length)


def sync_discard_until_done(stream):
    """After a FAIL, adbd still reads the DATA the host had already sent, up to DONE."""
    while sync_next_chunk(stream)[0] != "DONE":
        pass


def prepare_target(path):
    """The parents of `path` made (the fixed_push_mkdir feature) and what was there removed, unless it
    is a directory a file cannot replace anyway."""
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)


def parse_unsigned(text):
    """A number as C's strtoul(text, 0) reads one: 0x... hex, 0... octal, else decimal."""
    text = text.strip()
    if text.lower().startswith("0x"):
        return int(text[2:], 16)
    if len(text) > 1 and text.startswith("0"):
        return int(text[1:], 8)
    return int(text, 10)


def sync_send(stream, spec):
    """SEND `PATH,MODE`, then DATA chunks, then DONE carrying the mtime; OKAY or FAIL."""
    path, comma, mode_text = spec.rpartition(",")
    if not comma:
        sync_fail(stream, "missing , in SEND")
        return False
    try:
        mode = parse_unsigned(mode_text)
    except ValueError:
        sync_fail(stream, "bad mode")
        return False
    try:
        if stat.S_ISLNK(mode):
            kind, target = sync_next_chunk(stream)
            kind_done, mtime = sync_next_chunk(stream)
            if kind != "DATA" or kind_done != "DONE":
                raise ValueError("invalid data message")
            prepare_target(path)
            os.symlink(target.rstrip(b"\0").decode("utf-8", "surrogateescape"), path)
        else:
            # As adbd: the owner's permission bits are copied to group and others.
            permissions = mode & 0o777
            permissions |= (permissions >> 3) & 0o070
            permissions |= (permissions >> 3) & 0o007
            try:
                prepare_target(path)
                target = open(path, "wb")
            except OSError as error:
                sync_fail(stream, f"couldn't create file: {error.strerror}")
                sync_discard_until_done(stream)
                return False
            with target:
                while True:
                    kind, value = sync_next_chunk(stream)
                    if kind == "DONE":
                        mtime = value
                        break
                    target.write(value)
            os.chmod(path, permissions)
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    except ValueError as error:
        sync_fail(stream, str(error))
        return False
    except OSError as error:
        sync_fail(stream, f"{path}: {error.strerror}")
        return False
    stream.write(b"OKAY" + struct.pack("<I", 0))
    return True


def sync_send_file(stream, path):
    try:
        with open(path, "rb") as source:
            while True:
                data = source.read(SYNC_DATA_MAX)
                if not data:
                    break
                stream.write(b"DATA" + struct.pack("<I", len(data)) + data)
    except OSError as error:
        sync_fail(stream, f"open failed: {error.strerror}")
        return False
    stream.write(b"DONE" + struct.pack("<I", 0))
    return True


def sync_service(stream, _name):
    """SYNC.TXT: requests of a 4-byte id, a little-endian length and a path, until QUIT or an error."""
    while True:
        request = stream.read_exact(4)
        (length,) = struct.unpack("<I", stream.read_exact(4))
        if length > SYNC_PATH_MAX:
            sync_fail(stream, "path too long")
            return
        path = stream.read_exact(length).decode("utf-8", "surrogateescape")
        log("sync", request, path)
        if request == b"STAT":
            try:
                info = os.lstat(path)
                fields = (info.st_mode, info.st_size, int(info.st_mtime))
            except OSError:
                fields = (0, 0, 0)
            stream.write(b"STAT" + struct.pack("<3I", *(field & 0xFFFFFFFF for field in fields)))
        elif request in (b"STA2", b"LST2"):
            stream.write(request + stat_v2(path, follow=request == b"STA2"))
        elif request in (b"LIST", b"LIS2"):
            sync_list(stream, path, v2=request == b"LIS2")
        elif request == b"SEND":
            if not sync_send(stream, path):
                return
        elif request == b"RECV":
            if not sync_send_file(stream, path):
                return
        elif request == b"QUIT":
            return
        else:
            sync_fail(stream, f"unknown command {request!r}")
            return


def find_service(name):
    if name.startswith("shell:") or name.startswith("shell,"):
        return shell_service
    if name.startswith("exec:"):
        return exec_service
    if name == "sync:":
        return sync_service
    if name.startswith("framebuffer:"):
        return framebuffer_service
    return None


def run_service(service, stream):
    try:
        service(stream, stream.service)
    except (StreamClosed, TimeoutError, EOFError):
        pass
    except Exception as error:  # one broken service must not take the device down
        log("service", repr(stream.service), "failed:", repr(error))
    finally:
        stream.close()


# ---- main ---------------------------------------------------------------------------------------------


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int, help="TCP port (0: any free one; it is printed)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--auth", action="store_true",
                        help="require RSA authentication, as a device with ro.adb.secure=1")
    parser.add_argument("--keys", help="trusted public keys, adb_keys format (one adbkey.pub line each)")
    parser.add_argument("--accept-new-keys", action="store_true",
                        help="trust a key the host offers (AUTH RSAPUBLICKEY), adding it to --keys")
    parser.add_argument("--verbose", action="store_true", help="log the protocol to stderr")
    args = parser.parse_args()
    VERBOSE = args.verbose
    keys = Keys(args.keys, args.accept_new_keys)
    # The dialog's file, where the stand-ins (children of this process) find it too.
    private = None
    if not os.environ.get("FAKE_AUTH_DIALOG"):
        private = tempfile.mkdtemp(prefix="fake-adbd-")
        os.environ["FAKE_AUTH_DIALOG"] = os.path.join(private, "auth-dialog")
    dialog = AuthDialog(os.environ["FAKE_AUTH_DIALOG"], keys)

    def stop(_signum, _frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((args.host, args.port))
        listener.listen(16)
        host, port = listener.getsockname()
        print(f"device listening on {host}:{port} (auth {'on' if args.auth else 'off'})", flush=True)
        while True:
            connection, peer = listener.accept()
            log("connection from", peer)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=Connection(connection, keys, args.auth, dialog).serve, daemon=True).start()
    finally:
        listener.close()
        Children.stop_all()
        if private:
            shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    main()
