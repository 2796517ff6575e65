"""The `browser` family's bounds against hostile or huge pages (issue #34), through the SDK's own
`BrowserSandbox` methods on headless Debian Chromium, with pages served by the test: byte-bounded
event logs, a page too large to snapshot, download caps, screenshot/PDF names that are FIFOs, and a
resize the answer shows."""
import functools
import http.server
import os
import pathlib
import re
import shutil
import threading
import time

import pytest
from agentscope_runtime.sandbox.box.browser.browser_sandbox import BrowserSandbox

from conftest import Boxd

PAGES = pathlib.Path(__file__).resolve().parents[1] / "browser"

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")

MIB = 1 << 20


class Handler(http.server.SimpleHTTPRequestHandler):
    """The pages of tests/browser, plus `file?bytes=N&name=NAME`: N bytes sent as a download named NAME,
    in 64 KiB pieces."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path != "/file":
            return super().do_GET()
        fields = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        size, name = min(int(fields.get("bytes", "0")), 64 * MIB), fields.get("name", "file.bin")
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.end_headers()
        piece = b"z" * (64 * 1024)
        sent = 0
        try:
            while sent < size:
                chunk = piece[: min(len(piece), size - sent)]
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass


@pytest.fixture(scope="module")
def site():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(PAGES)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def start(tmp_path, *flags):
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return Boxd(workspace, "--tools", "browser", "--browser-headless", *flags)


@pytest.fixture
def boxd(tmp_path):
    server = start(tmp_path)
    yield server
    server.stop()


def sandbox(client):
    browser = BrowserSandbox.__new__(BrowserSandbox)
    browser.call_tool = client.call_tool
    return browser


@pytest.fixture
def browser(boxd):
    with boxd.client() as client:
        yield sandbox(client)


def text(result):
    return "\n".join(item["text"] for item in result["content"] if item["type"] == "text")


def ok(result):
    assert result["isError"] is False, str(result)[:4000]
    return text(result)


def failed(result):
    assert result["isError"] is True, str(result)[:4000]
    return text(result)


def ref(answer, role, name):
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(e\d+)\]', answer)
    assert match, f"no {role} {name!r} in:\n{answer[:4000]}"
    return match.group(1)


def rss(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def console_until(browser, marker, seconds=20):
    """The console messages once `marker` is among them (bounded in time)."""
    deadline = time.monotonic() + seconds
    console = ""
    for _ in range(400):
        console = ok(browser.browser_console_messages())
        if marker in console or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return console


def test_console_exception_request_and_dialog_text_are_bounded_in_bytes(browser, boxd, site):
    ok(browser.browser_navigate(f"{site}/page2.html"))
    before = rss(boxd.proc.pid)
    # 100 console messages of 1 MiB, a 1 MiB exception, a request whose URL is 1 MiB.
    page = ok(browser.browser_navigate(f"{site}/big-logs.html?bytes={MIB}&count=100"))
    console = console_until(browser, "done logging")
    assert "done logging" in console, console[-2000:]
    lines = console.split("\n")
    assert all(len(line) < 4200 for line in lines), max(len(line) for line in lines)
    assert re.search(r"^\[LOG\] 99 x+… \[cut: 1048579 bytes, kept 4096\]$", console, re.M), console[-5000:]
    assert re.search(r"^\[ERROR\] Error: e+… \[cut: \d+ bytes, kept 4096\]", console, re.M), console[-5000:]
    network = ok(browser.browser_network_requests())
    assert max(len(line) for line in network.split("\n")) < 4200
    assert "[GET] " in network and "… [cut: " in network, network[-2000:]
    # 100 MiB went through; boxd kept a few hundred KiB of it.
    grown = rss(boxd.proc.pid) - before
    assert grown < 48 * MIB, grown

    # A dialog's text is cut too (Chromium sends at most 10 KiB of it), and still answered.
    alert = ok(browser.browser_click("Big alert", ref(page, "button", "Big alert")))
    assert len(alert) < 8192 and re.search(r"d… \[cut: \d+ bytes, kept 4096\]", alert), alert[4000:4400]
    ok(browser.browser_handle_dialog(accept=True))


def test_each_tabs_console_log_is_bounded_in_total(browser, site):
    # 600 messages of 5000 bytes: each cut to 4 KiB, and the oldest dropped past 1 MiB in all.
    ok(browser.browser_navigate(f"{site}/big-logs.html?bytes=5000&count=600"))
    console = console_until(browser, "done logging")
    assert "done logging" in console
    assert len(console.encode()) <= MIB + 64 * 1024, len(console)
    assert "[LOG] 599 " in console and "[LOG] 0 " not in console


def test_a_page_too_large_to_snapshot_is_a_clear_error_and_the_browser_and_tabs_live_on(browser, boxd, site):
    ok(browser.browser_navigate(f"{site}/page2.html"))
    # 12 MiB of text: an accessibility tree of ~36 MiB, over the 32 MiB a snapshot takes (the message
    # bound's own skip is unit-tested in cdp.rs; a bigger page only makes Chromium work longer).
    huge = ok(browser.browser_tab_new(f"{site}/huge.html?mib=12"))
    assert "too large to snapshot" in huge, huge[:2000]
    assert "browser_take_screenshot" in huge
    again = ok(browser.browser_snapshot())
    assert "too large to snapshot" in again and "The browser had exited" not in again, again[:2000]
    # The browser and both tabs are still there; the huge page still works otherwise.
    shot = browser.browser_take_screenshot()
    assert shot["isError"] is False, str(shot)[:2000]
    listed = ok(browser.browser_tab_list())
    assert "[Page Two]" in listed and "[Huge]" in listed, listed
    back = ok(browser.browser_tab_select(1))
    assert "- Page Title: Page Two" in back and "The browser had exited" not in back, back


def downloaded(workspace):
    return sorted(path.name for path in workspace.iterdir())


def download_outcome(browser, answer, name, seconds=20):
    """The answer that says what became of download `name`: `answer` itself, or, when that only said it
    was still running ("Downloading file NAME ..."), the first later answer that does (a download's
    outcome is said once), bounded in time."""
    deadline = time.monotonic() + seconds
    while f"- Download of {name}" not in answer and f"- Downloaded file {name}" not in answer \
            and time.monotonic() < deadline:
        time.sleep(0.2)
        answer = ok(browser.browser_snapshot())
    return answer


def test_downloads_past_the_size_bound_are_stopped_and_deleted(tmp_path, site):
    server = start(tmp_path, "--browser-max-download-bytes", str(MIB))
    try:
        with server.client() as client:
            browser = sandbox(client)
            small = download_outcome(
                browser, ok(browser.browser_navigate(f"{site}/file?bytes=1000&name=small.bin")), "small.bin")
            assert f"- Downloaded file small.bin to {server.workspace / 'small.bin'}" in small, small
            big = download_outcome(
                browser, ok(browser.browser_navigate(f"{site}/file?bytes={8 * MIB}&name=big.bin")), "big.bin")
            assert "- Download of big.bin was stopped" in big and f"{MIB} bytes" in big, big
            assert "--browser-max-download-bytes" in big
            assert downloaded(server.workspace) == ["small.bin"]
    finally:
        server.stop()


def test_downloads_past_the_count_bound_are_refused(tmp_path, site):
    server = start(tmp_path, "--browser-max-downloads", "2")
    try:
        with server.client() as client:
            browser = sandbox(client)
            for name in ("one.txt", "two.txt"):
                assert f"- Downloaded file {name}" in ok(browser.browser_navigate(f"{site}/file?bytes=10&name={name}"))
            third = ok(browser.browser_navigate(f"{site}/file?bytes=10&name=three.txt"))
            assert "- Download of three.txt was refused" in third and "--browser-max-downloads" in third, third
            assert downloaded(server.workspace) == ["one.txt", "two.txt"]
    finally:
        server.stop()


def call_within(seconds, call):
    """`call()`'s answer, or an AssertionError when it takes longer than `seconds` (the call is left to
    finish in its thread)."""
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.setdefault("answer", call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert "answer" in outcome, f"no answer within {seconds} s"
    return outcome["answer"]


@pytest.mark.parametrize("tool, name", [("screenshot", "shot.png"), ("pdf", "page.pdf")])
def test_a_fifo_named_as_the_file_is_refused_without_blocking(browser, boxd, site, tool, name):
    fifo = boxd.workspace / name
    os.mkfifo(fifo)
    ok(browser.browser_navigate(f"{site}/page2.html"))
    try:
        save = {"screenshot": lambda: browser.browser_take_screenshot(filename=name),
                "pdf": lambda: browser.browser_pdf_save(filename=name)}[tool]
        refused = failed(call_within(10, save))
        assert "not a regular file" in refused, refused
        # The session is free: the next call answers.
        assert "- Page Title: Page Two" in ok(call_within(10, browser.browser_snapshot))
        assert fifo.is_fifo()
    finally:
        # Unblocks a writer the old code left waiting on the FIFO, so boxd can stop.
        descriptor = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.close(descriptor)


@pytest.mark.parametrize("executable", ["chromium", "/usr/bin/chromium"])
def test_resize_answers_with_the_page_after_it_saw_the_new_size(tmp_path, site, executable):
    # Headless, "chromium" is the headless shell, whose frames boxd paces; /usr/bin/chromium paces its own.
    server = start(tmp_path, "--browser-executable", executable)
    try:
        with server.client() as client:
            browser = sandbox(client)
            page = ok(browser.browser_navigate(f"{site}/resize.html"))
            assert "Size: 1024x768" in page, page
            for width, height in ((700, 500), (640, 480), (1280, 720)):
                resized = ok(browser.browser_resize(width, height))
                assert f"Size: {width}x{height}" in resized, resized
    finally:
        server.stop()
