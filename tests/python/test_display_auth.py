"""The display and the VNC server belong to root (issue #45, item 3): the desktop images' own service scripts
(images/gui/rootfs/etc/boxd/services) start a real Xvfb and x11vnc here, as `boxd init` starts them, and an
unprivileged uid (`nobody`, as the browser's user is in the images) tries what a renderer exploit would:
- without a cookie, the display refuses it;
- headed Chromium (as that uid) draws on a nested X server of its own (Xephyr, a window on the desktop): its
  cookie opens that server only, the desktop's display refuses it;
- with an *untrusted* cookie (what boxd gives Chromium where Xephyr is missing), XTEST is hidden and its
  FakeInput refused (the pointer does not move), and GetImage of the root window is refused;
- the VNC server has no TCP port and its Unix socket refuses that uid; boxd's `/websockify` (token) and
  `/websockify-view` still reach it.
And what must keep working: headed Chromium renders, its window is on the desktop (a `computer` screenshot),
CDP screenshots and input work, and the `computer` family's X input (clicks and keys) reaches the page."""
import base64
import http.server
import io
import os
import pathlib
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import requests
import websocket
from agentscope_runtime.sandbox.box.browser.browser_sandbox import BrowserSandbox
from agentscope_runtime.sandbox.box.gui.gui_sandbox import GuiSandbox

import x11_wire
from conftest import ROOT, TOKEN, Boxd

SERVICES = ROOT / "images" / "gui" / "rootfs" / "etc" / "boxd" / "services"
IMAGE_BIN = ROOT / "images" / "gui" / "rootfs" / "usr" / "local" / "bin"
UNPRIVILEGED = pwd.getpwnam("nobody")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root"),
    pytest.mark.skipif(shutil.which("xauth") is None, reason="xauth is not installed"),
]


def wait_for(condition, what, timeout=20.0, step=0.05):
    """Polls `condition` until it returns something true (bounded in time and count); that value."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / step) + 1):
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout} s")


def free_display():
    for number in range(40, 100):
        if not os.path.exists(f"/tmp/.X11-unix/X{number}") and not os.path.exists(f"/tmp/.X{number}-lock"):
            return number
    raise RuntimeError("no free display number in 40..99")


def accepts(path):
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(path))
        return True
    except OSError:
        return False


class ImageDesktop:
    """Xvfb (10-xvfb) and, when installed, x11vnc (30-vnc), started by the images' own scripts, with the
    images' variables pointed at a directory of the test's. The directory above theirs is open to everyone,
    as /run/boxd is: what keeps other users out is the scripts' doing."""

    def __init__(self):
        self.number = free_display()
        self.display = f":{self.number}"
        self.base = pathlib.Path(tempfile.mkdtemp(prefix="boxd-display-"))
        self.base.chmod(0o755)
        self.authority = self.base / "x" / "xauthority"
        self.stream = self.base / "vnc" / "rfb.sock"
        path = os.pathsep.join([str(IMAGE_BIN), str(pathlib.Path(os.environ["BOXD_BIN"]).parent)
                                if os.environ.get("BOXD_BIN") else str(ROOT / "target" / "debug"),
                                os.environ.get("PATH", "")])
        self.env = {**os.environ, "DISPLAY": self.display, "XAUTHORITY": str(self.authority),
                    "BOXD_DESKTOP_STREAM": str(self.stream), "PATH": path}
        self.processes = []
        self.vnc = None
        try:
            self.processes.append(self.service("10-xvfb"))
            wait_for(lambda: accepts(f"/tmp/.X11-unix/X{self.number}"), "Xvfb listens")
            if shutil.which("x11vnc"):
                self.vnc = self.service("30-vnc")
                self.processes.append(self.vnc)
                wait_for(lambda: accepts(self.stream), "x11vnc listens", timeout=30)
        except BaseException:
            self.stop()
            raise

    def service(self, name):
        return subprocess.Popen([str(SERVICES / name)], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def cookie(self):
        return x11_wire.read_xauthority(self.authority, self.number)

    def stop(self):
        for process in reversed(self.processes):
            # The whole session: a service script that did not exec its server leaves it as a child.
            try:
                os.killpg(process.pid, 15)
            except ProcessLookupError:
                pass
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(5)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def desktop():
    screen = ImageDesktop()
    yield screen
    screen.stop()


PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import x11_wire
display, cookie_file, xtest_opcode = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
report = {}
try:
    cookie = x11_wire.read_xauthority(cookie_file, display) if cookie_file else None
except OSError as error:
    report["cookie"] = str(error)
    cookie = None
try:
    connection = x11_wire.Connection(display, cookie)
except (x11_wire.Refused, OSError) as error:
    report["connect"] = str(error)
    print(json.dumps(report)); sys.exit()
report["connect"] = "ok"
report["xtest_present"] = connection.query_extension("XTEST")[0]
connection.fake_motion(xtest_opcode, 7, 9)
try:
    connection.sync(); report["fake_input"] = "ok"
except x11_wire.Refused as error:
    report["fake_input"] = str(error)
try:
    connection.get_image(0, 0, 16, 16); report["get_image"] = "ok"
except x11_wire.Refused as error:
    report["get_image"] = str(error)
print(json.dumps(report))
"""


# Debian's Python for the other user's probes: the test venv's may sit where that user cannot enter.
PROBE_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
_PROBE_DIR = []


def probe_dir() -> str:
    """A world-readable copy of x11_wire.py: the other user may not enter the clone (under /root, say)."""
    if not _PROBE_DIR:
        directory = pathlib.Path(tempfile.mkdtemp(prefix="boxd-x11-probe-"))
        directory.chmod(0o755)
        copy = directory / "x11_wire.py"
        shutil.copyfile(pathlib.Path(__file__).parent / "x11_wire.py", copy)
        copy.chmod(0o644)
        _PROBE_DIR.append(str(directory))
    return _PROBE_DIR[0]


def probe_as(user, display, cookie_file, xtest_opcode):
    """What a client of `user` (a pwd entry, or None for root) gets on `display` with `cookie_file` (or none)."""
    import json
    switch = [] if user is None else ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    done = subprocess.run([*switch, PROBE_PYTHON, "-c", PROBE, probe_dir(), str(display),
                           str(cookie_file or ""), str(xtest_opcode)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def trusted(desktop):
    return x11_wire.Connection(desktop.number, desktop.cookie())


def test_the_display_refuses_a_client_without_the_cookie(desktop):
    assert oct(desktop.authority.parent.stat().st_mode & 0o777) == "0o700"
    assert desktop.authority.stat().st_uid == 0
    with trusted(desktop) as root:
        present, xtest = root.query_extension("XTEST")
        assert present, "root's cookie is trusted: boxd's `computer` family has XTEST"
        assert len(root.get_image(0, 0, 4, 4)) == 4 * 4 * 4
    for user in (UNPRIVILEGED, None):
        answer = probe_as(user, desktop.number, None, xtest)
        assert answer["connect"] != "ok" and "uthoriz" in answer["connect"], answer
    # The cookie itself is root's alone.
    stolen = probe_as(UNPRIVILEGED, desktop.number, desktop.authority, xtest)
    assert "Permission denied" in stolen.get("cookie", ""), stolen
    assert stolen["connect"] != "ok", stolen


def test_an_untrusted_cookie_has_no_xtest_and_cannot_read_root_windows(desktop, tmp_path):
    # Made as boxd makes the browser's (src/browser/launch.rs: xauth generate ... untrusted timeout 0).
    directory = pathlib.Path(tempfile.mkdtemp(prefix="boxd-untrusted-"))
    directory.chmod(0o711)
    cookie = directory / "xauthority"
    try:
        subprocess.run(["xauth", "-q", "-f", str(cookie), "generate", desktop.display, ".", "untrusted", "timeout",
                        "0"], env=desktop.env, check=True, timeout=10, capture_output=True)
        os.chown(cookie, UNPRIVILEGED.pw_uid, UNPRIVILEGED.pw_gid)
        assert_untrusted(desktop, cookie)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def assert_untrusted(desktop, cookie):
    """A client of the unprivileged user with `cookie` connects, but gets neither XTEST nor root's pixels."""
    with trusted(desktop) as root:
        _, xtest = root.query_extension("XTEST")
        before = root.pointer()
        answer = probe_as(UNPRIVILEGED, desktop.number, cookie, xtest)
        assert answer["connect"] == "ok", answer
        assert answer["xtest_present"] is False, answer
        assert answer["fake_input"].startswith("X error 1 "), answer  # BadRequest: no such extension for it
        assert answer["get_image"].startswith("X error 10 "), answer  # BadAccess
        assert root.pointer() == before, "the refused FakeInput moved nothing"
        # The same probe with root's cookie does all three: what is refused above is the cookie's doing.
        control = probe_as(None, desktop.number, desktop.authority, xtest)
        assert control == {"connect": "ok", "xtest_present": True, "fake_input": "ok", "get_image": "ok"}, control
        assert root.pointer() == (7, 9)


def listening_tcp_inodes():
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    inodes.add(fields[9])
    return inodes


def socket_inodes(pid):
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match:
            found.add(match.group(1))
    return found


def x11vnc_pid(desktop):
    """x11vnc's pid: the service script execs it."""
    return desktop.vnc.pid


@pytest.mark.skipif(shutil.which("x11vnc") is None, reason="x11vnc is not installed")
def test_vnc_is_reachable_only_through_boxd(desktop, tmp_path):
    assert oct(desktop.stream.parent.stat().st_mode & 0o777) == "0o700"
    # No TCP listener at all (x11vnc would take 5900, v4 or v6, by default).
    leaked = socket_inodes(x11vnc_pid(desktop)) & listening_tcp_inodes()
    assert not leaked, f"x11vnc listens on TCP: {leaked}"
    # The unprivileged user cannot open the socket; root (boxd) can.
    done = subprocess.run(["setpriv", f"--reuid={UNPRIVILEGED.pw_uid}", f"--regid={UNPRIVILEGED.pw_gid}",
                           "--clear-groups", PROBE_PYTHON, "-c",
                           "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                           "try:\n s.connect(sys.argv[1]); print('connected', s.recv(12))\n"
                           "except OSError as e: print(type(e).__name__)", str(desktop.stream)],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "PermissionError", done
    with socket.socket(socket.AF_UNIX) as vnc:
        vnc.settimeout(10)
        vnc.connect(str(desktop.stream))
        assert vnc.recv(12) == b"RFB 003.008\n"

    # boxd relays the token holder's WebSocket (noVNC's, desktop_url's) and the view-only one there.
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "vnc_lite.html").write_text("<html>viewer</html>")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "shell", "--desktop-pages", str(pages), "--desktop-stream", str(desktop.stream))
    try:
        for path in ("/websockify", "/websockify-view"):
            refused = requests.get(f"http://127.0.0.1:{server.port}{path}", timeout=10,
                                   headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                            "Sec-WebSocket-Version": "13",
                                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
            assert refused.status_code == 403, path
            stream = websocket.create_connection(f"ws://127.0.0.1:{server.port}{path}", timeout=10,
                                                 subprotocols=["binary"],
                                                 header=[f"Authorization: Bearer {TOKEN}"])
            try:
                assert stream.recv() == b"RFB 003.008\n", path
                stream.send_binary(b"RFB 003.008\n")
                assert stream.recv()[:2] == b"\x01\x01", path  # one security type: None (the socket is the lock)
            finally:
                stream.close()
    finally:
        server.stop()


PAGE = b"""<!doctype html><title>Display</title>
<body style="margin:0"><input aria-label="Typed" autofocus
 style="position:fixed;inset:0;width:100vw;height:100vh;border:0;background:#ff00ff;font-size:40px"
 oninput="document.title='Got: '+this.value"></body>"""


class Page(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


def magenta_pixels(image):
    """How many pixels of `image` (RGB) are the page's magenta (a JPEG's too)."""
    data = image.tobytes()
    return sum(1 for at in range(0, len(data) - 2, 3) if data[at] > 230 and data[at + 1] < 25 and data[at + 2] > 230)


def png(result):
    from PIL import Image
    item = [item for item in result["content"] if item["type"] == "image"][0]
    return Image.open(io.BytesIO(base64.b64decode(item["data"]))).convert("RGB")


def chromium_environment(uid):
    """The environment of the headed browser's main process (the one with the DevTools pipe), run as `uid`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            arguments = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            if b"--remote-debugging-pipe" not in arguments or any(a.startswith(b"--type=") for a in arguments):
                continue
            pairs = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        return dict(pair.decode(errors="replace").split("=", 1) for pair in pairs if b"=" in pair)
    return None


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")
@pytest.mark.skipif(shutil.which("Xephyr") is None, reason="Xephyr (xserver-xephyr) is not installed")
def test_headed_chromium_draws_on_a_nested_display_of_its_own(desktop, tmp_path):
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "browser,computer", "--display", desktop.display,
                  "--browser-user", UNPRIVILEGED.pw_name, env=desktop.env)
    try:
        with server.client() as client:
            browser = BrowserSandbox.__new__(BrowserSandbox)
            browser.call_tool = client.call_tool
            computer = GuiSandbox.__new__(GuiSandbox)
            computer.call_tool = client.call_tool
            answer = browser.browser_navigate(f"http://127.0.0.1:{site.server_address[1]}/")
            assert answer["isError"] is False, answer

            # The browser runs on a display of its own with a cookie of its own, readable by its user only,
            # which the desktop's display refuses.
            environment = chromium_environment(UNPRIVILEGED.pw_uid)
            assert environment is not None, "no headed Chromium runs as the browser's user"
            assert environment["DISPLAY"] != desktop.display, environment["DISPLAY"]
            cookie = pathlib.Path(environment["XAUTHORITY"])
            assert cookie != desktop.authority
            status = cookie.stat()
            assert (status.st_uid, status.st_mode & 0o777) == (UNPRIVILEGED.pw_uid, 0o400)
            with trusted(desktop) as root:
                _, xtest = root.query_extension("XTEST")
            answer = probe_as(UNPRIVILEGED, desktop.number, cookie, xtest)
            assert answer["connect"] != "ok" and "MIT-MAGIC-COOKIE" in answer["connect"], answer

            # It renders: in its own screenshot (CDP), and on the desktop (X, the `computer` family).
            assert magenta_pixels(png(browser.browser_take_screenshot(raw=True))) > 100_000
            wait_for(lambda: magenta_pixels(png(computer.computer_use("get_screenshot"))) > 100_000,
                     "the browser's window shows on the desktop", timeout=15, step=0.2)
            # X input from boxd (XTEST, root's cookie) reaches the page, and CDP input too.
            screen = png(computer.computer_use("get_screenshot"))
            x, y = next((x, y) for y in range(200, 800, 10) for x in range(100, 1280, 10)
                        if magenta_pixels(screen.crop((x, y, x + 1, y + 1))))
            assert computer.computer_use("left_click", [x, y])["isError"] is False
            assert computer.computer_use("type", text="X input")["isError"] is False

            def title():
                tabs = browser.browser_tab_list()
                return "Got: X input" in "".join(item.get("text", "") for item in tabs["content"])

            wait_for(title, "the typed text reaches the page", timeout=15, step=0.2)
            snapshot = "".join(item.get("text", "") for item in browser.browser_snapshot()["content"])
            typed = re.search(r'textbox "Typed"[^\n]*\[ref=(e\d+)\]', snapshot)
            assert typed, snapshot
            answer = browser.browser_type("Typed", typed.group(1), "CDP input")  # fills the box
            assert answer["isError"] is False, answer
            assert "Got: CDP input" in "".join(item.get("text", "") for item in browser.browser_tab_list()["content"])
    finally:
        server.stop()
        site.shutdown()
