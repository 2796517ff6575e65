"""The `adb` tool through the SDK's own `MobileSandbox` methods, against the project's device stand-in
(tests/adb/device.py: the device side of the real ADB protocol) whose shell runs tests/adb/fakebin's
stand-ins for Android's
`input`, `wm`, `screencap`, `getprop`, `settings`, `am`, `pm`, `monkey` and `uiautomator`. What reached
the device is read from the fake's input log: the exact commands, and nothing at all for bad arguments."""
import base64
import io
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests
from agentscope_runtime.sandbox.box.mobile.mobile_sandbox import MobileSandbox

from conftest import ROOT, TOKEN, Boxd

DEVICE = ROOT / "tests" / "adb" / "device.py"
FAKEBIN = ROOT / "tests" / "adb" / "fakebin"
ADB_KEYBOARD = "com.android.adbkeyboard/.AdbIME"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class FakeDevice:
    """tests/adb/device.py on a port of its own, with its own input log and switches; `flags` are the
    device's own (--auth, --keys FILE, --accept-new-keys)."""

    def __init__(self, directory: pathlib.Path, port=None, flags=()):
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "input.log"
        self.fail = directory / "input-fails"
        self.slow = directory / "input-slow"
        self.ime = directory / "ime"
        self.ui_fails = directory / "ui-fails"
        self.screenshot = directory / "screen.png"
        # The "Allow USB debugging?" dialog shows while this file exists (see tests/adb/README.md).
        self.dialog = directory / "auth-dialog"
        self.focus = directory / "focus"
        # `uiautomator dump` writes under $TMPDIR (unset on a device: /data/local/tmp).
        self.tmp = directory / "tmp"
        self.tmp.mkdir(exist_ok=True)
        self.port = port or free_port()
        self.flags = list(flags)
        self.start()

    def start(self):
        env = {
            **os.environ,
            "FAKEBIN": str(FAKEBIN),
            "FAKE_INPUT_LOG": str(self.log),
            "FAKE_INPUT_FAIL": str(self.fail),
            "FAKE_INPUT_SLOW": str(self.slow),
            "FAKE_IME_FILE": str(self.ime),
            "FAKE_UI_FAILS": str(self.ui_fails),
            "FAKE_SCREENSHOT": str(self.screenshot),
            "FAKE_AUTH_DIALOG": str(self.dialog),
            "FAKE_FOCUS": str(self.focus),
            "TMPDIR": str(self.tmp),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(DEVICE), str(self.port), *self.flags],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        listening = threading.Event()

        def wait_for_banner():
            if "listening" in (self.proc.stdout.readline() or ""):
                listening.set()

        threading.Thread(target=wait_for_banner, daemon=True).start()
        if not listening.wait(10):
            self.stop()
            raise RuntimeError("the device stand-in did not start within 10 s")

    def lines(self):
        return self.log.read_text().splitlines() if self.log.exists() else []

    def dismiss_dialog(self):
        """Whoever holds the device answers its authorization dialog "Deny" (on the device itself, not
        through boxd or adb)."""
        self.dialog.unlink()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def device(tmp_path):
    fake = FakeDevice(tmp_path / "device")
    yield fake
    fake.stop()


@pytest.fixture
def boxd(device, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "adb", "--adb-connect", f"127.0.0.1:{device.port}")
    yield server
    server.stop()


@pytest.fixture
def mobile(boxd):
    with boxd.client() as client:
        sandbox = MobileSandbox.__new__(MobileSandbox)
        sandbox.call_tool = client.call_tool
        yield sandbox


def adb(mobile, action, **arguments):
    """An action the SDK has no method for, through its own call_tool."""
    return mobile.call_tool("adb", {"action": action, **arguments})


def texts(result):
    return [item["text"] for item in result["content"] if item["type"] == "text"]


def readiness(server):
    answer = requests.get(
        f"http://127.0.0.1:{server.port}/readyz",
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10,
    )
    return answer.json()["families"]["adb"]


def running_with_arguments(arguments):
    """Whether a process of this machine has these arguments at the end of its command line (a script
    run by its interpreter has the interpreter and the script's path before them)."""
    wanted = b"\0".join(argument.encode() for argument in arguments[1:]) + b"\0"
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parts = command_line.split(b"\0")
        if command_line.endswith(wanted) and any(part.endswith(arguments[0].encode()) for part in parts):
            return True
    return False


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {seconds} s")


def test_upstream_actions_texts_and_device_commands(mobile, device):
    assert texts(mobile.mobile_tap([100, 200])) == ["Tapped at (100, 200)"]
    assert texts(mobile.mobile_swipe([10, 20], [30, 40])) == ["Swiped from (10, 20) to (30, 40)"]
    assert texts(mobile.mobile_swipe([1, 2], [3, 4], duration=750)) == ["Swiped from (1, 2) to (3, 4)"]
    assert texts(mobile.mobile_key_event(3)) == ["Sent key event: 3"]
    assert texts(mobile.mobile_key_event("4")) == ["Sent key event: 4"]
    assert texts(mobile.mobile_input_text("hello")) == ["Input text: hello"]
    assert texts(mobile.mobile_get_screen_resolution()) == ['{"width":1080,"height":1920}']
    assert device.lines() == [
        "input tap 100 200",
        "input swipe 10 20 30 40 300",
        "input swipe 1 2 3 4 750",
        "input keyevent 3",
        "input keyevent 4",
        "input text hello",
    ]
    shot = mobile.mobile_get_screenshot()
    assert shot["isError"] is False
    [image] = shot["content"]
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]) == (FAKEBIN / "shot.png").read_bytes()
    # adb_use, the generic dispatcher, sends the same arguments.
    assert texts(mobile.adb_use("tap", coordinate=[5, 6])) == ["Tapped at (5, 6)"]
    assert device.lines()[-1] == "input tap 5 6"


def test_key_names_as_the_sdk_documents_them(mobile, device):
    for name, code in [("HOME", 3), ("BACK", 4), ("ENTER", 66), ("KEYCODE_VOLUME_UP", 24),
                       ("app_switch", 187), ("DEL", 67)]:
        result = mobile.mobile_key_event(name)
        assert result["isError"] is False, result
        assert texts(result) == [f"Sent key event: {name}"]
        assert device.lines()[-1] == f"input keyevent {code}"


def test_hostile_text_is_typed_literally_and_never_run(mobile, device, tmp_path):
    canary = tmp_path / "canary"
    hostile = [
        f"it's \"quoted\"; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"'; touch {canary}; echo '",
        f"a && touch {canary} || b | c > {canary}.out & $HOME",
    ]
    for text in hostile:
        assert texts(mobile.mobile_input_text(text)) == [f"Input text: {text}"]
        assert device.lines()[-1] == f"input text {text}"
    # A newline is the Enter key; `%s` (a space to `input text`) is typed as it reads.
    before = len(device.lines())
    text = f"first line\nsecond; touch {canary}\n100%sure"
    assert texts(mobile.mobile_input_text(text)) == [f"Input text: {text}"]
    assert device.lines()[before:] == [
        "input text first line", "input keyevent 66", f"input text second; touch {canary}",
        "input keyevent 66", "input text 100%", "input text sure",
    ]
    assert not canary.exists() and not pathlib.Path(f"{canary}.out").exists()


def test_non_ascii_text_needs_adbkeyboard_and_is_typed_whole_with_it(mobile, device):
    text = "héllo wörld 你好 😀 'x' $(id)"
    refused = mobile.mobile_input_text(text)
    assert refused["isError"] is True
    [reason] = texts(refused)
    assert "ADBKeyboard" in reason and ADB_KEYBOARD in reason and "Nothing was typed" in reason
    assert device.lines() == []
    device.ime.write_text(ADB_KEYBOARD + "\n")
    assert texts(mobile.mobile_input_text(text)) == [f"Input text: {text}"]
    [broadcast] = device.lines()
    # Addressed to the IME's package alone: an implicit broadcast reaches any app that listens for it.
    prefix = "am broadcast -a ADB_INPUT_B64 -p com.android.adbkeyboard --es msg "
    assert broadcast.startswith(prefix)
    assert base64.b64decode(broadcast[len(prefix):]).decode() == text


def test_bad_arguments_answer_is_error_and_reach_nothing(mobile, boxd, device):
    cases = [
        (lambda: mobile.mobile_tap([1]), "coordinate must be [x, y]"),
        (lambda: mobile.mobile_tap([-5, 10]), "coordinate must be [x, y]"),
        (lambda: mobile.mobile_tap([1.5, 10]), "coordinate must be [x, y]"),
        (lambda: mobile.mobile_tap(None), "coordinate is required for tap"),
        (lambda: mobile.mobile_swipe([1, 2], None), "end is required for swipe"),
        (lambda: mobile.mobile_swipe([1, 2], [3, 4], duration=-1), "duration must be"),
        (lambda: mobile.mobile_swipe([1, 2], [3, 4], duration="fast"), "duration must be"),
        (lambda: mobile.mobile_key_event("HOMEWARD"), "Invalid key: HOMEWARD"),
        (lambda: mobile.mobile_key_event(-3), "Invalid key code: -3"),
        (lambda: mobile.mobile_input_text(""), "text must not be empty"),
        (lambda: mobile.adb_use("input_text"), "text is required for input_text"),
        (lambda: mobile.adb_use("key_event"), "code is required for key_event"),
        (lambda: mobile.adb_use("fly"), "Unknown action: fly"),
        (lambda: mobile.mobile_input_text("bell\x07"), "U+0007"),
    ]
    for call, needle in cases:
        result = call()
        assert result["isError"] is True, (needle, result)
        assert needle in texts(result)[0], (needle, texts(result))
    assert device.lines() == []
    assert readiness(boxd)["status"] == "ready"


def test_a_command_the_device_refuses_is_an_error_with_its_reason(mobile, device):
    device.fail.touch()
    result = mobile.mobile_tap([1, 2])
    assert result["isError"] is True
    [reason] = texts(result)
    assert "`input tap 1 2` failed on the device (exit 1)" in reason and "INJECT_EVENTS" in reason
    device.fail.unlink()
    assert texts(mobile.mobile_tap([1, 2])) == ["Tapped at (1, 2)"]


DIALOG_REFUSED = "the device shows Android's debugging-authorization dialog"


def test_no_input_reaches_the_device_while_a_debugging_authorization_dialog_has_focus(mobile, device):
    """Each action that injects input checks, in the same device command, which window and app have
    focus (`dumpsys window`); while it is one of SystemUI's USB or wireless debugging prompts, in either
    form dumpsys names it, nothing is sent and the answer says why. Reading the screen still works; a
    dump that names no focus at all stops input too (it cannot be vouched for)."""
    device.ime.write_text(ADB_KEYBOARD + "\n")
    injections = [
        lambda: mobile.mobile_tap([540, 1200]),
        lambda: mobile.mobile_swipe([1, 2], [3, 4]),
        lambda: mobile.mobile_key_event("ENTER"),
        lambda: mobile.mobile_input_text("ok\n"),
        lambda: mobile.mobile_input_text("héllo"),  # the IME's broadcast
        lambda: adb(mobile, "long_press", coordinate=[540, 1200]),
        lambda: adb(mobile, "double_tap", coordinate=[540, 1200]),
        lambda: adb(mobile, "swipe_direction", direction="left"),
    ]
    for focus in [
        "  mCurrentFocus=Window{3c1 u0 com.android.systemui/com.android.systemui.wifi.WifiDebuggingActivity}",
        "  mCurrentFocus=null\n  mFocusedApp=ActivityRecord{9a u0 com.android.systemui/.UsbDebuggingActivityAlias t4}",
        "  mCurrentFocus=Window{3c1 u10 com.android.systemui/com.android.systemui.usb.UsbDebuggingSecondaryUserActivity}",
    ]:
        device.focus.write_text(focus + "\n")
        for inject in injections:
            refused = inject()
            assert refused["isError"] is True, refused
            [reason] = texts(refused)
            assert DIALOG_REFUSED in reason and "Nothing was sent" in reason, reason
            assert " ".join(focus.split()) in reason, reason
    assert mobile.mobile_get_screenshot()["isError"] is False
    assert texts(mobile.mobile_get_screen_resolution()) == ['{"width":1080,"height":1920}']
    assert adb(mobile, "list_elements")["isError"] is False
    assert adb(mobile, "launch_app", package="com.example.shop")["isError"] is False
    dump = device.tmp / "boxd-window-dump.xml"
    assert device.lines() == [f"uiautomator dump {dump}",
                              "monkey -p com.example.shop -c android.intent.category.LAUNCHER 1"]

    device.focus.write_text("  mLastFocus=null\n")
    unreadable = mobile.mobile_tap([5, 6])
    assert unreadable["isError"] is True, unreadable
    assert "could not read which window has focus" in texts(unreadable)[0], unreadable
    assert len(device.lines()) == 2

    device.focus.unlink()
    assert texts(mobile.mobile_tap([5, 6])) == ["Tapped at (5, 6)"]
    assert device.lines()[2:] == ["input tap 5 6"]


def test_a_lost_device_fails_the_family_with_its_address_and_comes_back(mobile, boxd, device):
    assert texts(mobile.mobile_tap([1, 1])) == ["Tapped at (1, 1)"]
    device.stop()
    lost = mobile.mobile_tap([2, 2])
    assert lost["isError"] is True and "503" in texts(lost)[0]
    state = wait_for(lambda: (s := readiness(boxd))["status"] == "failed" and s, 10, "the family failed")
    assert f"127.0.0.1:{device.port}" in state["reason"]
    device.start()
    wait_for(lambda: readiness(boxd)["status"] == "ready", 15, "the family came back")
    assert texts(mobile.mobile_tap([3, 3])) == ["Tapped at (3, 3)"]
    assert device.lines() == ["input tap 1 1", "input tap 3 3"]


def test_the_schema_is_valid_json_schema(boxd):
    import jsonschema

    with boxd.client() as client:
        tools = client.list_tools(tool_type="adb-control")["adb-control"]
    parameters = tools["adb"]["json_schema"]["function"]["parameters"]
    jsonschema.Draft202012Validator.check_schema(parameters)
    validator = jsonschema.Draft202012Validator(parameters)
    for good in [{"action": "key_event", "code": "HOME"}, {"action": "key_event", "code": 3},
                 {"action": "swipe", "start": [1, 2], "end": [3, 4], "duration": 300}]:
        validator.validate(good)
    assert not validator.is_valid({"action": "tap", "coordinate": [1, 2, 3]})
    assert parameters["required"] == ["action"]


@pytest.mark.skipif(shutil.which("adb") is None, reason="Debian's adb is not installed (scripts/setup.sh)")
def test_through_an_adb_server_android_serial_else_the_only_device_else_a_listing(tmp_path):
    server_port = free_port()
    adb = ["adb", "-P", str(server_port)]
    first = FakeDevice(tmp_path / "first")
    second = FakeDevice(tmp_path / "second")
    servers = []
    try:
        subprocess.run([*adb, "start-server"], check=True, timeout=30, capture_output=True)
        subprocess.run([*adb, "connect", f"127.0.0.1:{first.port}"], check=True, timeout=15, capture_output=True)
        socket_spec = f"tcp:127.0.0.1:{server_port}"

        def start(*extra):
            workspace = tmp_path / f"workspace{len(servers)}"
            workspace.mkdir()
            server = Boxd(workspace, "--tools", "adb", "--adb-server", socket_spec, *extra)
            servers.append(server)
            return server

        only = start()
        with only.client() as client:
            sandbox = MobileSandbox.__new__(MobileSandbox)
            sandbox.call_tool = client.call_tool
            assert texts(sandbox.mobile_tap([7, 7])) == ["Tapped at (7, 7)"]
        assert first.lines() == ["input tap 7 7"]

        subprocess.run([*adb, "connect", f"127.0.0.1:{second.port}"], check=True, timeout=15, capture_output=True)
        wait_for(
            lambda: subprocess.run([*adb, "devices"], capture_output=True, text=True, timeout=10)
            .stdout.count("\tdevice") == 2, 10, "the adb server lists both devices",
        )
        several = start()
        state = wait_for(lambda: (s := readiness(several))["status"] == "failed" and s, 15, "the family failed")
        assert "ANDROID_SERIAL" in state["reason"]
        assert f"127.0.0.1:{first.port} (device)" in state["reason"]
        assert f"127.0.0.1:{second.port} (device)" in state["reason"]

        chosen = start("--adb-serial", f"127.0.0.1:{second.port}")
        with chosen.client() as client:
            sandbox = MobileSandbox.__new__(MobileSandbox)
            sandbox.call_tool = client.call_tool
            assert texts(sandbox.mobile_key_event("BACK")) == ["Sent key event: BACK"]
        assert second.lines() == ["input keyevent 4"]
        assert first.lines() == ["input tap 7 7"]
    finally:
        for server in servers:
            server.stop()
        subprocess.run([*adb, "kill-server"], timeout=15, capture_output=True)
        first.stop()
        second.stop()


def test_list_elements_is_a_short_list_with_centers_to_tap(mobile, device):
    result = adb(mobile, "list_elements")
    assert result["isError"] is False, result
    [listing] = texts(result)
    header, *lines = listing.splitlines()
    assert header == "6 elements on screen (app: com.example.shop). Tap an element at its center."
    elements = [json.loads(line) for line in lines]
    assert elements == [
        {"text": "Fish & Chips — café", "resource-id": "com.example.shop:id/title",
         "class": "android.widget.TextView", "bounds": [48, 99, 700, 180], "center": [374, 139]},
        {"content-desc": "Cart, 2 items", "resource-id": "com.example.shop:id/cart",
         "class": "android.widget.ImageButton", "clickable": True, "bounds": [936, 81, 1068, 198],
         "center": [1002, 139]},
        {"resource-id": "com.example.shop:id/list", "class": "androidx.recyclerview.widget.RecyclerView",
         "scrollable": True, "bounds": [0, 213, 1080, 1500], "center": [540, 856]},
        {"text": "Add to basket", "resource-id": "com.example.shop:id/add", "class": "android.widget.Button",
         "clickable": True, "long-clickable": True, "bounds": [40, 240, 1040, 380], "center": [540, 310]},
        {"resource-id": "com.example.shop:id/search", "class": "android.widget.EditText", "clickable": True,
         "long-clickable": True, "focused": True, "bounds": [40, 1550, 1040, 1700], "center": [540, 1625]},
        {"text": "Gift wrap", "resource-id": "com.example.shop:id/gift", "class": "android.widget.CheckBox",
         "clickable": True, "checked": False, "bounds": [40, 1720, 600, 1800], "center": [320, 1760]},
    ]
    dump = device.tmp / "boxd-window-dump.xml"
    assert device.lines() == [f"uiautomator dump {dump}"]
    assert not dump.exists()


def test_list_elements_retries_a_failing_dump_a_bounded_number_of_times(mobile, device):
    dump = device.tmp / "boxd-window-dump.xml"
    device.ui_fails.write_text("2")
    result = adb(mobile, "list_elements")
    assert result["isError"] is False, result
    assert texts(result)[0].startswith("6 elements on screen")
    assert device.lines() == [f"uiautomator dump {dump}"] * 3
    device.ui_fails.write_text("100")
    started = time.monotonic()
    failed = adb(mobile, "list_elements")
    assert time.monotonic() - started < 20
    assert failed["isError"] is True
    [reason] = texts(failed)
    assert "The UI could not be read (4 tries within 45 s)" in reason and "null root node" in reason, reason
    assert device.lines() == [f"uiautomator dump {dump}"] * 7


def test_long_press_double_tap_and_directional_swipes(mobile, device):
    assert texts(adb(mobile, "long_press", coordinate=[100, 200])) == ["Long-pressed at (100, 200) for 500 ms"]
    assert texts(adb(mobile, "long_press", coordinate=[1, 2], duration=1200)) == [
        "Long-pressed at (1, 2) for 1200 ms"]
    assert texts(adb(mobile, "double_tap", coordinate=[30, 40])) == ["Double-tapped at (30, 40)"]
    assert texts(adb(mobile, "swipe_direction", direction="up")) == ["Swiped up from (540, 960) to (540, 384)"]
    assert texts(adb(mobile, "swipe_direction", direction="left", coordinate=[100, 500], distance=0.5)) == [
        "Swiped left from (100, 500) to (0, 500)"]
    assert texts(adb(mobile, "swipe_direction", direction="down", coordinate=[10, 20], distance=0.1,
                     duration=800)) == ["Swiped down from (10, 20) to (10, 212)"]
    assert device.lines() == [
        "input swipe 100 200 100 200 500",
        "input swipe 1 2 1 2 1200",
        "input tap 30 40",
        "input tap 30 40",
        "input swipe 540 960 540 384 300",
        "input swipe 100 500 0 500 300",
        "input swipe 10 20 10 212 800",
    ]


def test_apps_are_listed_launched_and_stopped(mobile, device):
    assert texts(adb(mobile, "list_apps")) == [
        "2 third-party apps installed (system apps are not listed):\ncom.example.shop\norg.mozilla.firefox"]
    assert texts(adb(mobile, "launch_app", package="com.example.shop")) == ["Launched com.example.shop"]
    missing = adb(mobile, "launch_app", package="com.example.missing")
    assert missing["isError"] is True
    assert "com.example.missing is not installed or has no launcher activity" in texts(missing)[0]
    assert texts(adb(mobile, "terminate_app", package="org.mozilla.firefox")) == ["Stopped org.mozilla.firefox"]
    assert device.lines() == [
        "pm list packages -3",
        "monkey -p com.example.shop -c android.intent.category.LAUNCHER 1",
        "monkey -p com.example.missing -c android.intent.category.LAUNCHER 1",
        "am force-stop org.mozilla.firefox",
    ]


def test_urls_are_opened_literally_and_hostile_names_never_reach_the_device(mobile, device, tmp_path):
    canary = tmp_path / "canary"
    urls = [
        "https://example.com/search?q=fish&chips=1",
        f"https://example.com/$(touch {canary})",
        f"https://example.com/`touch {canary}`",
        f"https://example.com/it's'; touch {canary}; echo '",
        f"myapp://open?x=1;touch {canary}|cat>{canary}",
    ]
    for url in urls:
        result = adb(mobile, "open_url", url=url)
        assert texts(result) == [f"Opened {url}"], result
        assert device.lines()[-1] == f"am start -a android.intent.action.VIEW -d {url}"
    unhandled = adb(mobile, "open_url", url="nohandler:thing")
    assert unhandled["isError"] is True
    assert texts(unhandled)[0].startswith("No app on the device opened nohandler:thing: Error: Activity not started")
    before = len(device.lines())
    for action, arguments, needle in [
        ("launch_app", {"package": f"com.x; touch {canary}"}, "package must be an Android package name"),
        ("launch_app", {"package": f"$(touch {canary})"}, "package must be an Android package name"),
        ("terminate_app", {"package": "com.x'"}, "package must be an Android package name"),
        ("terminate_app", {}, "package is required for terminate_app"),
        ("open_url", {"url": "javascript:alert(1)"}, "does not open javascript: URLs"),
        ("open_url", {"url": "file:///data/data/x"}, "does not open file: URLs"),
        ("open_url", {"url": f"https://x.com/\ntouch {canary}"}, "U+000A"),
        ("open_url", {"url": "example.com"}, "url must start with a scheme"),
        ("swipe_direction", {"direction": "north"}, "direction must be up, down, left or right"),
        ("swipe_direction", {"direction": "up", "distance": 2}, "distance must be a fraction"),
        ("long_press", {"coordinate": [1, 2], "duration": -1}, "duration must be"),
        ("double_tap", {}, "coordinate is required for double_tap"),
        ("get_screenshot", {"max_size": 8}, "max_size must be"),
    ]:
        result = adb(mobile, action, **arguments)
        assert result["isError"] is True, (action, arguments, result)
        assert needle in texts(result)[0], (needle, texts(result))
    assert len(device.lines()) == before
    assert not canary.exists() and not pathlib.Path(f"{canary}.out").exists()


def png(width, height):
    from PIL import Image

    image = Image.new("RGB", (width, height), (20, 120, 220))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def test_a_scaled_screenshot_states_its_scale_and_later_coordinates_are_mapped_back(mobile, device):
    from PIL import Image

    device.screenshot.write_bytes(png(1080, 1920))
    shot = adb(mobile, "get_screenshot", max_size=960)
    assert shot["isError"] is False, shot
    image, numbers, sentence = shot["content"]
    assert Image.open(io.BytesIO(base64.b64decode(image["data"]))).size == (540, 960)
    assert json.loads(numbers["text"]) == {"width": 540, "height": 960, "screen_width": 1080,
                                           "screen_height": 1920, "scale": 0.5}
    assert sentence["text"] == (
        "The screen is 1080x1920; this image is 540x960. Give coordinates in this image's pixels: from now on "
        "they are multiplied by 2 to reach the device, until a screenshot without max_size.")
    assert texts(mobile.mobile_tap([100, 200])) == ["Tapped at (100, 200) (screenshot pixels; on the device (200, 400))"]
    assert texts(mobile.mobile_swipe([10, 20], [30, 40])) == [
        "Swiped from (10, 20) to (30, 40) (screenshot pixels; on the device (20, 40) to (60, 80))"]
    assert texts(adb(mobile, "swipe_direction", direction="right", coordinate=[100, 100], distance=0.5)) == [
        "Swiped right from (100, 100) to (370, 100) (screenshot pixels; on the device (200, 200) to (740, 200))"]
    listing = texts(adb(mobile, "list_elements"))[0]
    assert "coordinates are in the last screenshot's pixels (540x960)" in listing.splitlines()[0]
    assert '"bounds":[468,41,534,99],"center":[501,70]' in listing
    resolution = mobile.mobile_get_screen_resolution()
    assert texts(resolution)[0] == '{"width":1080,"height":1920}'
    # A screen that already fits is sent whole and says so; then device pixels again.
    fits = adb(mobile, "get_screenshot", max_size=4096)
    assert json.loads(fits["content"][1]["text"])["scale"] == 1
    assert "coordinates are device pixels" in fits["content"][2]["text"]
    assert base64.b64decode(fits["content"][0]["data"]) == device.screenshot.read_bytes()
    assert texts(mobile.mobile_tap([100, 200])) == ["Tapped at (100, 200)"]
    # The SDK's own screenshot (no max_size) also returns to device pixels.
    adb(mobile, "get_screenshot", max_size=540)
    assert mobile.mobile_get_screenshot()["content"][0]["type"] == "image"
    assert texts(mobile.mobile_tap([7, 8])) == ["Tapped at (7, 8)"]
    assert [line for line in device.lines() if line.startswith("input")] == [
        "input tap 200 400",
        "input swipe 20 40 60 80 300",
        "input swipe 200 200 740 200 300",
        "input tap 100 200",
        "input tap 7 8",
    ]


def test_a_command_whose_wait_ran_out_or_whose_caller_left_is_withdrawn_and_never_runs(boxd, device):
    """A tap queued behind a long swipe: its caller gone (the client's own timeout), or boxd's wait for
    its turn run out (a truthful 504, not 429 "busy"), it never reaches the device, even once the swipe
    is done: a retried tap lands once."""
    from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
    from agentscope_runtime.sandbox.model import ContainerModel

    def sandbox(timeout):
        model = ContainerModel(
            session_id="session-test", container_id="container-test", container_name="boxd-test",
            url=f"http://127.0.0.1:{boxd.port}/", ports=[boxd.port], runtime_token=TOKEN, timeout=120,
        )
        client = SandboxHttpClient(model)
        client.timeout = timeout  # what requests is given per call
        mobile = MobileSandbox.__new__(MobileSandbox)
        mobile.call_tool = client.call_tool
        return mobile

    device.slow.touch()
    swiped = {}
    swipe = threading.Thread(
        target=lambda: swiped.update(sandbox(90).mobile_swipe([1, 1], [2, 2], duration=38_000)))
    swipe.start()
    wait_for(lambda: device.proc.poll() is None and readiness(boxd)["status"] == "ready", 5, "ready")
    # The swipe holds the device before the taps queue behind it: its `input` runs there (the device
    # stand-in's shell runs it as a process of this machine).
    wait_for(lambda: running_with_arguments(["input", "swipe", "1", "1", "2", "2", "38000"]), 20,
             "the swipe running on the device")
    # This caller gives up after 2 s (its HTTP client's timeout) and goes away.
    gone = sandbox(2).mobile_tap([11, 11])
    assert gone["isError"] is True and "timed out" in texts(gone)[0], gone
    started = time.monotonic()
    waited = sandbox(90).mobile_tap([22, 22])
    elapsed = time.monotonic() - started
    assert waited["isError"] is True, (elapsed, waited)
    [reason] = texts(waited)
    assert "504" in reason and "withdrawn and did not run" in reason, reason
    assert 25 < elapsed < 36, elapsed
    swipe.join(60)
    assert texts(swiped) == ["Swiped from (1, 1) to (2, 2)"], swiped
    device.slow.unlink()
    time.sleep(1)
    assert texts(sandbox(20).mobile_tap([33, 33])) == ["Tapped at (33, 33)"]
    assert device.lines() == ["input swipe 1 1 2 2 38000", "input tap 33 33"]
    assert readiness(boxd)["status"] == "ready"
