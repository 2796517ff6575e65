"""Who the `browser` family's Chromium runs as, and whether its own sandbox is on (issue #33): as root, boxd
starts it as `--browser-user` with Chromium's namespace and seccomp sandbox when the kernel lets that user
create user namespaces, and says in /readyz and its log when it falls back to `--no-sandbox`. Checked on the
real processes (/proc), not on what boxd says of them."""
import functools
import http.server
import os
import pathlib
import re
import shutil
import subprocess
import threading
import time

import pytest
import requests
from agentscope_runtime.sandbox.box.browser.browser_sandbox import BrowserSandbox

from conftest import TOKEN, Boxd

PAGES = pathlib.Path(__file__).resolve().parents[1] / "browser"
IS_ROOT = os.geteuid() == 0
# The unprivileged user a root test run gives Chromium (every Debian system has it).
BROWSER_USER = "nobody"

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")


@pytest.fixture(scope="module")
def site():
    handler = functools.partial(Quiet, directory=str(PAGES))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


REPORT = b"name,value\nanswer,42\n"


class Quiet(http.server.SimpleHTTPRequestHandler):
    """The pages of tests/browser, and `attachment`: a CSV file sent as a download."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path != "/attachment":
            return super().do_GET()
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Disposition", 'attachment; filename="report.csv"')
        self.send_header("Content-Length", str(len(REPORT)))
        self.end_headers()
        self.wfile.write(REPORT)


def user_namespaces_allowed():
    """What Chromium's namespace sandbox needs, tried the way it does it, as the user it will run as."""
    as_user = []
    if IS_ROOT:
        import pwd
        entry = pwd.getpwnam(BROWSER_USER)
        as_user = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    done = subprocess.run([*as_user, "unshare", "--user", "--pid", "--net", "--fork", "true"],
                          capture_output=True, timeout=10)
    return done.returncode == 0


def sandbox(boxd):
    with boxd.client() as client:
        box = BrowserSandbox.__new__(BrowserSandbox)
        box.call_tool = client.call_tool
        yield box


def readyz(boxd):
    answer = requests.get(f"http://127.0.0.1:{boxd.port}/readyz",
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
    return answer["families"]["browser"]


def text(result):
    assert result["isError"] is False, result
    return "\n".join(item["text"] for item in result["content"] if item["type"] == "text")


def ref(answer, role, name):
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(e\d+)\]', answer)
    assert match, f"no {role} {name!r} in:\n{answer}"
    return match.group(1)


def status_of(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return fields


def chromium_of(boxd):
    """(pid, --type or "browser", status) of every process of this boxd's browser: the one started with
    this boxd's profile, and everything below it."""
    marker = f"boxd-browser-{boxd.proc.pid}-".encode()
    table = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            table[int(entry.name)] = (argv, status_of(entry.name))
        except OSError:
            continue
    roots = {pid for pid, (argv, status) in table.items()
             if int(status["PPid"][0]) == boxd.proc.pid and any(marker in arg for arg in argv)}
    found = []
    for pid, (argv, status) in table.items():
        ancestor, hops = pid, 0
        while ancestor not in roots and ancestor in table and hops < 64:
            ancestor, hops = int(table[ancestor][1]["PPid"][0]), hops + 1
        if ancestor in roots:
            # Chromium rewrites its children's command lines (one string, spaces between arguments).
            kind = re.search(rb"(?:^|[\0 ])--type=([\w-]+)", b"\0".join(argv))
            kind = kind.group(1).decode() if kind else "browser"
            found.append((pid, kind, status))
    return found


def test_the_renderer_runs_unprivileged_in_chromiums_sandbox_and_reads_uploads(tmp_path, site):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # The workspace is closed to other users (pytest's temporary directory is 0700 besides): the browser
    # gets copies of what it uploads, and its downloads are boxd's files.
    workspace.chmod(0o700)
    (workspace / "secret.txt").write_text("only boxd can read this")
    (workspace / "secret.txt").chmod(0o600)
    user = ["--browser-user", BROWSER_USER] if IS_ROOT else []
    server = Boxd(workspace, "--tools", "browser", "--browser-headless", *user)
    try:
        box = next(sandbox(server))
        page = text(box.browser_navigate(f"{site}/upload-read.html"))
        chooser = text(box.browser_click("Upload", ref(page, "button", "Upload")))
        assert "[File chooser]" in chooser
        text(box.browser_file_upload([str(workspace / "secret.txt")]))
        assert "Read: only boxd can read this" in text(box.browser_snapshot())
        if IS_ROOT:
            # The copies sit in boxd's directories beside the profile, which the browser's user cannot
            # rename or replace; only the copy itself is that user's.
            import tempfile
            staged = list(pathlib.Path(tempfile.gettempdir()).glob(f"boxd-browser-{server.proc.pid}-*-uploads"))
            assert len(staged) == 1, staged
            copies = list(staged[0].glob("*/*/secret.txt"))
            assert len(copies) == 1, copies
            for directory in (staged[0], copies[0].parent, copies[0].parent.parent):
                assert directory.stat().st_uid == 0 and directory.stat().st_mode & 0o777 == 0o711, directory
            assert copies[0].stat().st_uid == pwd_uid(BROWSER_USER)
            assert copies[0].stat().st_mode & 0o777 == 0o400

        processes = chromium_of(server)
        browser = [status for _, kind, status in processes if kind == "browser"]
        renderers = [status for _, kind, status in processes if kind == "renderer"]
        assert browser and renderers, [(pid, kind, status["Uid"], status["NSpid"]) for pid, kind, status in processes]
        expected_uid = pwd_uid(BROWSER_USER) if IS_ROOT else os.geteuid()
        for _, kind, status in processes:
            real, effective, saved, filesystem = map(int, status["Uid"])
            assert {real, effective, saved, filesystem} == {expected_uid}, (kind, status["Uid"])
            assert status["Groups"] != ["0"], (kind, status["Groups"])
        health = readyz(server)
        assert health["status"] == "ready"
        if user_namespaces_allowed():
            assert "with its own sandbox" in health["reason"], health
            # The namespace sandbox: each renderer in a PID namespace of its own, below the browser's.
            # The seccomp-bpf sandbox: a filter of Chromium's on top of the browser's.
            for renderer in renderers:
                assert len(renderer["NSpid"]) > len(browser[0]["NSpid"]), (renderer["NSpid"], browser[0]["NSpid"])
                assert int(renderer["Seccomp_filters"][0]) > int(browser[0]["Seccomp_filters"][0]), renderer
            assert any("with its own sandbox" in line for line in server.log_lines)
        else:
            assert "--no-sandbox" in health["reason"] and "user namespaces" in health["reason"], health
    finally:
        server.stop()


def pwd_uid(name):
    import pwd
    return pwd.getpwnam(name).pw_uid


def test_downloads_of_a_browser_under_its_own_user_are_boxds_files(tmp_path, site):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    user = ["--browser-user", BROWSER_USER] if IS_ROOT else []
    server = Boxd(workspace, "--tools", "browser", "--browser-headless", *user)
    try:
        box = next(sandbox(server))
        page = text(box.browser_navigate(f"{site}/download.html"))
        said = text(box.browser_click("report link", ref(page, "link", "Get the report")))
        assert f"- Downloaded file report.csv to {workspace / 'report.csv'}" in said, said
        saved = workspace / "report.csv"
        assert saved.read_bytes() == REPORT
        assert saved.stat().st_uid == os.geteuid() and saved.stat().st_nlink == 1

        # A change of user clears the parent-death signal: it is set after the switch, so the browser
        # still dies with a SIGKILLed boxd (and its own children with it).
        pids = [pid for pid, _, _ in chromium_of(server)]
        assert pids
        server.proc.kill()
        server.proc.wait(10)
        deadline = time.monotonic() + 10
        while any(runs(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(runs(pid) for pid in pids), [pid for pid in pids if runs(pid)]
    finally:
        server.stop()


def runs(pid):
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not IS_ROOT, reason="the fallback as root: boxd unprivileged runs Chromium as itself")
def test_root_without_a_browser_user_falls_back_to_no_sandbox_and_says_so(tmp_path, site):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "browser", "--browser-headless", env={"BOXD_BROWSER_USER": ""})
    try:
        box = next(sandbox(server))
        assert "Second page" in text(box.browser_navigate(f"{site}/page2.html"))
        health = readyz(server)
        assert health["status"] == "ready"
        assert "--no-sandbox" in health["reason"] and "boxd runs as root" in health["reason"], health
        assert any("--no-sandbox" in line and "WARN" in line for line in server.log_lines), server.log_lines
        processes = chromium_of(server)
        browser = [status for _, kind, status in processes if kind == "browser"]
        assert browser and int(browser[0]["Uid"][1]) == 0
    finally:
        server.stop()
