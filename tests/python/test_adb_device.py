"""tests/adb/device.py itself: the device stand-in the mobile tests use, reached as a device is, by Debian's
`adb` (through its own server) and by a bare client speaking the ADB transport. Each test gives adb a
HOME of its own (its key lives in $HOME/.android/adbkey) and a server on a private port, killed at the end;
only 127.0.0.1 is used and every wait is bounded."""
import os
import pathlib
import shutil
import socket
import stat
import struct
import subprocess

import pytest

from test_mobile import FAKEBIN, FakeDevice, free_port, wait_for

pytestmark = pytest.mark.skipif(shutil.which("adb") is None, reason="Debian's adb is not installed (scripts/setup.sh)")


class Adb:
    """Debian's adb with a HOME, a key and a server of its own."""

    def __init__(self, directory: pathlib.Path):
        self.home = directory / "home"
        (self.home / ".android").mkdir(parents=True)
        (directory / "tmp").mkdir()
        self.port = free_port()
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(("ANDROID_", "ADB_"))}  # no vendor keys, no other user home
        self.env = {**env, "HOME": str(self.home), "TMPDIR": str(directory / "tmp"),
                    "ANDROID_ADB_SERVER_PORT": str(self.port)}
        self.key = self.home / ".android" / "adbkey"
        self.run("keygen", str(self.key))  # before the server starts: it loads its keys once
        self.run("start-server")

    def run(self, *args, check=True, timeout=30, **kwargs):
        return subprocess.run(["adb", "-P", str(self.port), *args], env=self.env, capture_output=True,
                              timeout=timeout, check=check, **kwargs)

    def state(self, serial):
        listing = self.run("devices", timeout=10).stdout.decode()
        for line in listing.splitlines()[1:]:
            name, _, state = line.partition("\t")
            if name == serial:
                return state
        return None

    def connect(self, device, expect="device"):
        serial = f"127.0.0.1:{device.port}"
        self.run("connect", serial, check=False, timeout=15)
        wait_for(lambda: self.state(serial) == expect, 10, f"{serial} is {expect}")
        return serial

    def kill(self):
        self.run("kill-server", check=False, timeout=15)


@pytest.fixture
def adb(tmp_path):
    client = Adb(tmp_path / "adb")
    yield client
    client.kill()


@pytest.fixture
def device(tmp_path):
    fake = FakeDevice(tmp_path / "device")
    yield fake
    fake.stop()


def test_shell_exit_codes_stderr_stdin_pty_and_exec(adb, device):
    serial = adb.connect(device)
    hello = adb.run("-s", serial, "shell", "echo hello")
    assert (hello.returncode, hello.stdout) == (0, b"hello\n")
    # The shell v2 protocol: the exit code and stderr come back apart.
    assert adb.run("-s", serial, "shell", "exit 3", check=False).returncode == 3
    both = adb.run("-s", serial, "shell", "echo out; echo err >&2; exit 7", check=False)
    assert (both.returncode, both.stdout, both.stderr) == (7, b"out\n", b"err\n")
    # The shell's stdin ends when adb's does (the close-stdin packet).
    assert adb.run("-s", serial, "shell", "cat; echo done", input=b"piped\n").stdout == b"piped\ndone\n"
    # shell v1 (-x): one merged stream, no exit code.
    legacy = adb.run("-s", serial, "shell", "-x", "echo out; echo err >&2; exit 7", check=False)
    assert (legacy.returncode, sorted(legacy.stdout.splitlines())) == (0, [b"err", b"out"])
    # A pty (-tt forces one without a local terminal): a terminal's line endings, the exit code still.
    terminal = adb.run("-s", serial, "shell", "-tt", "tty; echo pty; exit 5", check=False)
    assert terminal.returncode == 5
    assert terminal.stdout.startswith(b"/dev/pts/") and terminal.stdout.endswith(b"pty\r\n"), terminal.stdout
    # exec: raw bytes, as `adb exec-out` gets a screenshot.
    shot = adb.run("-s", serial, "exec-out", "screencap -p")
    assert shot.stdout == (FAKEBIN / "shot.png").read_bytes()
    # The shell runs fakebin's stand-ins with the device's switches.
    adb.run("-s", serial, "shell", "input tap 1 2")
    assert device.lines() == ["input tap 1 2"]


def test_push_and_pull_files_and_directories(adb, device, tmp_path):
    serial = adb.connect(device)
    local = tmp_path / "local"
    local.mkdir()
    blob = local / "blob.bin"
    blob.write_bytes(os.urandom(300_000))  # several 64 KiB sync chunks and several WRTEs each way
    blob.chmod(0o640)
    remote = tmp_path / "remote" / "new" / "dir"  # parents made by the device (fixed_push_mkdir)
    adb.run("-s", serial, "push", str(blob), f"{remote}/blob.bin")
    assert (remote / "blob.bin").read_bytes() == blob.read_bytes()
    # As adbd: the owner's permission bits copied to group and others.
    assert stat.S_IMODE((remote / "blob.bin").stat().st_mode) == 0o666
    back = tmp_path / "back.bin"
    adb.run("-s", serial, "pull", f"{remote}/blob.bin", str(back))
    assert back.read_bytes() == blob.read_bytes()

    tree = local / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "b.txt").write_text("b\n")
    adb.run("-s", serial, "push", str(tree), f"{remote}/")
    listing = adb.run("-s", serial, "ls", f"{remote}/tree").stdout.decode().split()
    assert {"a.txt", "sub"} <= set(listing)
    pulled = tmp_path / "pulled"
    adb.run("-s", serial, "pull", f"{remote}/tree", str(pulled))
    assert (pulled / "a.txt").read_text() == "a\n" and (pulled / "sub" / "b.txt").read_text() == "b\n"

    missing = adb.run("-s", serial, "pull", f"{remote}/missing", str(tmp_path / "nothing"), check=False)
    assert missing.returncode != 0 and not (tmp_path / "nothing").exists()


def test_auth_a_key_in_the_allowed_file_connects(adb, tmp_path):
    allowed = tmp_path / "adb_keys"
    allowed.write_text(pathlib.Path(f"{adb.key}.pub").read_text() + "\n")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    try:
        serial = adb.connect(device)
        assert adb.run("-s", serial, "shell", "echo signed").stdout == b"signed\n"
    finally:
        device.stop()


def test_auth_an_unknown_key_is_refused(adb, tmp_path):
    other = tmp_path / "other" / "adbkey"
    other.parent.mkdir()
    adb.run("keygen", str(other))
    allowed = tmp_path / "adb_keys"
    allowed.write_text(pathlib.Path(f"{other}.pub").read_text() + "\n")
    before = allowed.read_text()
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    try:
        serial = adb.connect(device, expect="unauthorized")
        refused = adb.run("-s", serial, "shell", "echo never", check=False, timeout=15)
        assert refused.returncode != 0 and b"never" not in refused.stdout
        assert b"unauthorized" in refused.stderr, refused.stderr
        assert adb.state(serial) == "unauthorized"
        assert allowed.read_text() == before  # the offered key was not added
    finally:
        device.stop()


def test_auth_an_unknown_key_raises_the_dialog_that_a_touch_or_enter_answers_allow(adb, tmp_path):
    """Without --accept-new-keys the offered key makes the device show "Allow USB debugging?": `dumpsys
    window` names SystemUI's dialog as the focused window, and a tap on the device (any touch, or Enter)
    allows the key, which lets the waiting host in and keeps the key. Deleting the dialog's file instead
    dismisses it: the host stays unauthorized and the launcher has focus again."""
    allowed = tmp_path / "adb_keys"
    allowed.write_text("")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    on_device = {**os.environ, "PATH": f"{FAKEBIN}:{os.environ['PATH']}", "FAKE_AUTH_DIALOG": str(device.dialog),
                 "FAKE_INPUT_LOG": str(device.log)}

    def focus():
        return subprocess.run(["dumpsys", "window", "displays"], env=on_device, capture_output=True, text=True,
                              timeout=10, check=True).stdout

    try:
        assert "com.android.launcher3" in focus() and not device.dialog.exists()
        serial = adb.connect(device, expect="unauthorized")
        wait_for(device.dialog.exists, 10, "the dialog shows")
        host_key = pathlib.Path(f"{adb.key}.pub").read_text().split()[0]
        assert device.dialog.read_text().split()[0] == host_key
        assert ("mCurrentFocus=Window{5f1c2a u0 com.android.systemui/com.android.systemui.usb.UsbDebuggingActivity}"
                in focus())
        # Dismissed: nobody let the key in.
        device.dismiss_dialog()
        assert "com.android.launcher3" in focus()
        refused = adb.run("-s", serial, "shell", "echo never", check=False, timeout=15)
        assert refused.returncode != 0 and b"unauthorized" in refused.stderr, refused.stderr
        assert allowed.read_text() == ""

        # Offered again (a new connection), then a tap on the device answers "Allow".
        adb.run("disconnect", serial, check=False)
        serial = adb.connect(device, expect="unauthorized")
        wait_for(device.dialog.exists, 10, "the dialog shows again")
        subprocess.run(["input", "tap", "540", "1200"], env=on_device, check=True, timeout=10)
        wait_for(lambda: adb.state(serial) == "device", 10, f"{serial} is let in")
        assert adb.run("-s", serial, "shell", "echo allowed").stdout == b"allowed\n"
        assert [line.split()[0] for line in allowed.read_text().splitlines()] == [host_key]
        assert not device.dialog.exists() and "com.android.launcher3" in focus()
        assert device.lines() == ["input tap 540 1200"]
    finally:
        device.stop()


def test_auth_an_unknown_key_is_trusted_and_kept_when_new_keys_are_accepted(adb, tmp_path):
    allowed = tmp_path / "adb_keys"
    allowed.write_text("")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed), "--accept-new-keys"])
    try:
        serial = adb.connect(device)
        assert adb.run("-s", serial, "shell", "echo trusted").stdout == b"trusted\n"
        host_key = pathlib.Path(f"{adb.key}.pub").read_text().split()[0]
        assert [line.split()[0] for line in allowed.read_text().splitlines()] == [host_key]
        # The kept key signs the next connection, with new keys no longer accepted.
        adb.run("disconnect", serial, check=False)
        device.stop()
        device.flags = ["--auth", "--keys", str(allowed)]
        device.start()
        serial = adb.connect(device)
        assert adb.run("-s", serial, "shell", "echo again").stdout == b"again\n"
    finally:
        device.stop()


# ---- the transport, byte by byte ----------------------------------------------------------------------

A_CNXN, A_OPEN, A_OKAY, A_CLSE, A_WRTE = (struct.unpack("<I", name)[0]
                                          for name in (b"CNXN", b"OPEN", b"OKAY", b"CLSE", b"WRTE"))


class Wire:
    """A bare ADB host: messages in and out, with a timeout on every read."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, command, arg0, arg1, payload=b""):
        header = struct.pack("<6I", command, arg0, arg1, len(payload), sum(payload) & 0xFFFFFFFF,
                             command ^ 0xFFFFFFFF)
        self.sock.sendall(header + payload)

    def exactly(self, size):
        data = b""
        while len(data) < size:
            piece = self.sock.recv(size - len(data))
            assert piece, "the device closed the connection"
            data += piece
        return data

    def receive(self):
        command, arg0, arg1, length, _, magic = struct.unpack("<6I", self.exactly(24))
        assert magic == command ^ 0xFFFFFFFF
        return command, arg0, arg1, self.exactly(length) if length else b""


def test_the_transport_negotiates_refuses_unknown_services_and_keeps_flow_control(device):
    wire = Wire(device.port)
    try:
        wire.send(A_CNXN, 0x01000000, 4096, b"host::\0")
        command, version, max_payload, banner = wire.receive()
        assert (command, version, max_payload) == (A_CNXN, 0x01000001, 4096)
        assert banner.startswith(b"device::") and b"shell_v2" in banner
        wire.send(A_OPEN, 1, 0, b"no-such-service:\0")
        assert wire.receive()[:3] == (A_CLSE, 0, 1)

        # framebuffer: the DDMS header and 108x192 RGBA pixels, in WRTEs of at most the host's 4096
        # bytes, the next one only after the host's OKAY.
        wire.send(A_OPEN, 2, 0, b"framebuffer:\0")
        command, local, remote, _ = wire.receive()
        assert (command, remote) == (A_OKAY, 2)
        received = b""
        for _ in range(100):
            command, _, _, payload = wire.receive()
            if command == A_CLSE:
                break
            assert command == A_WRTE and len(payload) <= 4096
            received += payload
            if len(received) == 4096:  # nothing more until this one is OKAYed
                wire.sock.settimeout(0.3)
                with pytest.raises(socket.timeout):
                    wire.sock.recv(1)
                wire.sock.settimeout(10)
            wire.send(A_OKAY, 2, local)
        header = struct.unpack("<14I", received[:56])
        assert header[:6] == (2, 32, 0, 108 * 192 * 4, 108, 192)
        assert len(received) == 56 + 108 * 192 * 4
    finally:
        wire.sock.close()
