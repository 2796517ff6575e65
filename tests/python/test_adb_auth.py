"""boxd authenticating to a device that requires ADB authorization (ro.adb.secure=1), with the key it is
given in BOXD_ADB_KEY, against the project's device stand-in (tests/adb/device.py --auth --keys FILE):
the device trusts boxd's key and boxd's taps land; a device that trusts no key refuses boxd with an error
that says so and names the line to install; and tenant code in that same boxd, with Debian's `adb` and a
key of its own, stays `unauthorized` at the device boxd drives, and cannot have boxd answer the
"Allow USB debugging?" dialog its key raises.

Keys are made at test time (openssl), never kept in the repository. The public key line is computed here
independently of boxd, from Android's android_pubkey.c layout, and checked against what boxd logs and
against `adb keygen`'s own `adbkey.pub`."""
import base64
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest
from agentscope_runtime.sandbox.box.mobile.mobile_sandbox import MobileSandbox
from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.model import ContainerModel

from conftest import ROOT, TOKEN, Boxd
from test_mobile import FakeDevice, free_port, readiness, texts, wait_for

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test keys")

UNTRUSTED = "does not trust boxd's ADB key"


def make_key(path, pkcs1=False):
    """A fresh 2048-bit RSA key in PEM: PKCS#8 (`BEGIN PRIVATE KEY`, as adb's own adbkey), or PKCS#1."""
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", str(path)], check=True, capture_output=True, timeout=60)
    if pkcs1:
        subprocess.run(["openssl", "rsa", "-in", str(path), "-traditional", "-out", str(path)],
                       check=True, capture_output=True, timeout=30)
    return path.read_text()


def android_public_key(path):
    """The key's public half as Android stores it (android_pubkey_encode): modulus size in words,
    -1/n mod 2^32, n and (2^2048)^2 mod n little-endian, the exponent; base64."""
    text = subprocess.run(["openssl", "rsa", "-in", str(path), "-noout", "-text"], check=True,
                          capture_output=True, text=True, timeout=30).stdout
    modulus = subprocess.run(["openssl", "rsa", "-in", str(path), "-noout", "-modulus"], check=True,
                             capture_output=True, text=True, timeout=30).stdout
    n = int(modulus.strip().split("=", 1)[1], 16)
    e = int(re.search(r"publicExponent: (\d+)", text).group(1))
    n0inv = (-pow(n, -1, 2**32)) % 2**32
    rr = pow(2, 4096, n)
    blob = struct.pack("<II", 64, n0inv) + n.to_bytes(256, "little") + rr.to_bytes(256, "little") + struct.pack("<I", e)
    return base64.b64encode(blob).decode()


def logged_public_key(server):
    """The adb_keys line boxd logs at the family's start (only its base64 part)."""
    def find():
        for line in server.log_lines:
            match = re.search(r"/data/misc/adb/adb_keys: (\S+) boxd", line)
            if match:
                return match.group(1)
        return None
    return wait_for(find, 10, "boxd logs its public key")


def mobile_of(server, timeout=60):
    model = ContainerModel(
        session_id="session-test", container_id="container-test", container_name="boxd-test",
        url=f"http://127.0.0.1:{server.port}/", ports=[server.port], runtime_token=TOKEN, timeout=120,
    )
    client = SandboxHttpClient(model)
    client.timeout = timeout
    sandbox = MobileSandbox.__new__(MobileSandbox)
    sandbox.call_tool = client.call_tool
    return sandbox, client


def start_boxd(tmp_path, device_port, key_pem):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return Boxd(workspace, "--tools", "adb,shell", "--adb-connect", f"127.0.0.1:{device_port}",
                env={"BOXD_ADB_KEY": key_pem})


@pytest.mark.parametrize("pkcs1", [False, True], ids=["pkcs8", "pkcs1"])
def test_a_device_that_trusts_boxds_key_takes_its_taps(tmp_path, pkcs1):
    key = tmp_path / "boxd.pem"
    pem = make_key(key, pkcs1=pkcs1)
    assert ("BEGIN RSA PRIVATE KEY" in pem) == pkcs1
    public = android_public_key(key)
    allowed = tmp_path / "adb_keys"
    allowed.write_text(f"{public} operator@host\n")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    server = start_boxd(tmp_path, device.port, pem)
    try:
        assert logged_public_key(server) == public
        assert not any("PRIVATE KEY" in line for line in server.log_lines)
        wait_for(lambda: readiness(server)["status"] == "ready", 20, "the device is ready")
        mobile, _ = mobile_of(server)
        assert texts(mobile.mobile_tap([10, 20])) == ["Tapped at (10, 20)"]
        assert texts(mobile.mobile_key_event("HOME")) == ["Sent key event: HOME"]
        assert device.lines() == ["input tap 10 20", "input keyevent 3"]
        assert allowed.read_text() == f"{public} operator@host\n"
    finally:
        server.stop()
        device.stop()


def test_a_device_that_accepts_new_keys_is_offered_boxds_public_key(tmp_path):
    """The signature is refused (the key is unknown), boxd offers its public key, the device (a person
    tapping "Allow") trusts it and keeps it: the blob boxd sends is Android's."""
    key = tmp_path / "boxd.pem"
    pem = make_key(key)
    allowed = tmp_path / "adb_keys"
    allowed.write_text("")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed), "--accept-new-keys"])
    server = start_boxd(tmp_path, device.port, pem)
    try:
        wait_for(lambda: readiness(server)["status"] == "ready", 20, "the device is ready")
        mobile, _ = mobile_of(server)
        assert texts(mobile.mobile_tap([5, 6])) == ["Tapped at (5, 6)"]
        assert allowed.read_text() == f"{android_public_key(key)} boxd\n"
    finally:
        server.stop()
        device.stop()


def test_a_device_that_trusts_no_key_refuses_boxd_with_a_clear_error(tmp_path):
    key = tmp_path / "boxd.pem"
    pem = make_key(key)
    public = android_public_key(key)
    allowed = tmp_path / "adb_keys"
    allowed.write_text("")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    server = start_boxd(tmp_path, device.port, pem)
    try:
        state = wait_for(lambda: (s := readiness(server))["status"] == "failed" and s, 30, "the family failed")
        assert UNTRUSTED in state["reason"], state
        assert f"/data/misc/adb/adb_keys: {public} boxd" in state["reason"], state
        mobile, _ = mobile_of(server)
        refused = mobile.mobile_tap([1, 2])
        assert refused["isError"] is True, refused
        assert "503" in texts(refused)[0] and UNTRUSTED in texts(refused)[0], refused
        assert device.lines() == [] and allowed.read_text() == ""
    finally:
        server.stop()
        device.stop()


def test_without_a_key_an_authorizing_device_gets_todays_error(tmp_path):
    allowed = tmp_path / "adb_keys"
    allowed.write_text("")
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "adb", "--adb-connect", f"127.0.0.1:{device.port}")
    try:
        state = wait_for(lambda: (s := readiness(server))["status"] == "failed" and s, 20, "the family failed")
        assert "asks for ADB authorization" in state["reason"] and "BOXD_ADB_KEY" in state["reason"], state
        assert not any("/data/misc/adb/adb_keys" in line for line in server.log_lines)
    finally:
        server.stop()
        device.stop()


def test_a_bad_key_stops_boxd_at_start_naming_the_variable_not_the_key(tmp_path):
    binary = os.environ.get("BOXD_BIN", str(ROOT / "target" / "debug" / "boxd"))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    secretish = "c2VjcmV0LWtleS1ib2R5LXRoYXQtbXVzdC1ub3QtYmUtcHJpbnRlZA"
    for bad in [f"-----BEGIN PRIVATE KEY-----\n{secretish}\n-----END PRIVATE KEY-----\n", secretish]:
        started = subprocess.run(
            [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--workspace", str(workspace),
             "--python", sys.executable, "--tools", "adb", "--adb-connect", "127.0.0.1:1"],
            env={**os.environ, "SECRET_TOKEN": TOKEN, "BOXD_ADB_KEY": bad},
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        )
        assert started.returncode != 0
        assert "BOXD_ADB_KEY" in started.stderr, started.stderr
        assert secretish not in started.stderr + started.stdout


@pytest.mark.skipif(shutil.which("adb") is None, reason="Debian's adb is not installed (scripts/setup.sh)")
def test_adb_keygens_key_works_and_boxd_encodes_its_public_key_as_adb_does(tmp_path):
    """An operator's `adb keygen adbkey`: adbkey is BOXD_ADB_KEY, adbkey.pub goes to the device."""
    home = tmp_path / "home"
    home.mkdir()
    adbkey = tmp_path / "adbkey"
    subprocess.run(["adb", "keygen", str(adbkey)], env={**os.environ, "HOME": str(home)}, check=True,
                   capture_output=True, timeout=60)
    adb_public = (tmp_path / "adbkey.pub").read_text().split()[0]
    assert adb_public == android_public_key(adbkey)
    allowed = tmp_path / "adb_keys"
    shutil.copy(tmp_path / "adbkey.pub", allowed)
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    server = start_boxd(tmp_path, device.port, adbkey.read_text())
    try:
        assert logged_public_key(server) == adb_public
        wait_for(lambda: readiness(server)["status"] == "ready", 20, "the device is ready")
        mobile, _ = mobile_of(server)
        assert texts(mobile.mobile_tap([3, 4])) == ["Tapped at (3, 4)"]
    finally:
        server.stop()
        device.stop()


@pytest.mark.skipif(shutil.which("adb") is None, reason="Debian's adb is not installed (scripts/setup.sh)")
def test_tenant_code_stays_unauthorized_and_cannot_have_boxd_allow_its_key(tmp_path):
    """The tenant can reach the device's port (same network), but its adb has a key of its own that the
    device does not trust: `adb shell` and `adb root` are refused, and boxd's key is in no environment
    the tenant sees. Its key makes the device show "Allow USB debugging?"; a tap, Enter, Tab or a swipe
    through boxd's own `adb` tool would answer it (the device stand-in lets a key in on any of them, as a
    device does on a touch of its button), so boxd refuses them all while the dialog has focus, saying
    why. Once whoever holds the device dismisses it, boxd's taps land again and the tenant is still out."""
    key = tmp_path / "boxd.pem"
    pem = make_key(key)
    allowed = tmp_path / "adb_keys"
    allowed.write_text(f"{android_public_key(key)} boxd\n")
    before = allowed.read_text()
    device = FakeDevice(tmp_path / "device", flags=["--auth", "--keys", str(allowed)])
    server = start_boxd(tmp_path, device.port, pem)
    adb_port = free_port()
    serial = f"127.0.0.1:{device.port}"
    tenant_home = tmp_path / "tenant-home"
    tenant_home.mkdir()
    tenant_env = {name: value for name, value in os.environ.items() if not name.startswith(("ANDROID_", "ADB_"))}
    tenant_env.update(HOME=str(tenant_home), ANDROID_ADB_SERVER_PORT=str(adb_port))

    def tenant_adb(*args):
        """The tenant's adb (its key, its server) from outside boxd, between the tool calls."""
        done = subprocess.run(["adb", *args], env=tenant_env, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    script = f"""
export HOME={tenant_home} ANDROID_ADB_SERVER_PORT={adb_port}
unset ADB_VENDOR_KEYS
adb start-server >/dev/null 2>&1
adb connect {serial}
for _ in $(seq 40); do adb devices | grep -q "^{serial}\tunauthorized" && break; sleep 0.25; done
adb devices
adb -s {serial} shell id; echo "shell exit $?"
adb -s {serial} root; echo "root exit $?"
echo "key variables: $(env | grep -c BOXD_ADB_KEY)"
"""
    try:
        wait_for(lambda: readiness(server)["status"] == "ready", 20, "the device is ready")
        mobile, client = mobile_of(server)
        result = client.run_shell_command(script)
        output = "".join(item["text"] for item in result["content"] if item.get("type") == "text")
        assert f"{serial}\tunauthorized" in output, output
        assert re.search(r"shell exit [1-9]", output) and re.search(r"root exit [1-9]", output), output
        assert "uid=" not in output and output.count("device unauthorized") >= 2, output
        assert "key variables: 0" in output, output
        assert (tenant_home / ".android" / "adbkey").exists()  # adb made and used a key of its own
        assert allowed.read_text() == before  # and the device did not take it

        # The key the tenant offered is what the device's dialog asks about.
        wait_for(device.dialog.exists, 10, "the device shows its authorization dialog")
        tenant_public = (tenant_home / ".android" / "adbkey.pub").read_text().split()[0]
        assert device.dialog.read_text().split()[0] == tenant_public
        attempts = [
            lambda: mobile.mobile_tap([540, 1200]),
            lambda: mobile.mobile_key_event("ENTER"),
            lambda: mobile.mobile_key_event("TAB"),
            lambda: mobile.mobile_key_event(23),
            lambda: mobile.mobile_input_text("\t\n"),
            lambda: mobile.mobile_input_text(" "),
            lambda: mobile.mobile_swipe([540, 1200], [540, 1201]),
            lambda: mobile.call_tool("adb", {"action": "long_press", "coordinate": [540, 1200]}),
            lambda: mobile.call_tool("adb", {"action": "double_tap", "coordinate": [540, 1200]}),
            lambda: mobile.call_tool("adb", {"action": "swipe_direction", "direction": "up"}),
        ]
        for attempt in attempts:
            refused = attempt()
            assert refused["isError"] is True, refused
            [reason] = texts(refused)
            assert "the device shows Android's debugging-authorization dialog" in reason, reason
            assert "com.android.systemui.usb.UsbDebuggingActivity" in reason, reason
            assert "whoever administers the device must allow or deny" in reason, reason
        assert device.lines() == []  # no input reached the device
        assert device.dialog.exists() and allowed.read_text() == before
        # Screenshots still work: what the screen shows is no answer to the dialog.
        assert mobile.mobile_get_screenshot()["isError"] is False
        listing = tenant_adb("devices")
        assert f"{serial}\tunauthorized" in listing, listing  # the tenant's server still waits
        shell = tenant_adb("-s", serial, "shell", "id")
        assert "uid=" not in shell and "unauthorized" in shell, shell

        device.dismiss_dialog()
        assert texts(mobile.mobile_tap([8, 9])) == ["Tapped at (8, 9)"]
        assert device.lines() == ["input tap 8 9"]
        shell = tenant_adb("-s", serial, "shell", "id")
        assert "uid=" not in shell, shell
        assert allowed.read_text() == before
    finally:
        subprocess.run(["adb", "-P", str(adb_port), "kill-server"], capture_output=True, timeout=15,
                       env={**os.environ, "HOME": str(tenant_home)})
        server.stop()
        device.stop()
