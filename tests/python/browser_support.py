"""What the browser family's Python tests share: a page server on loopback, a boxd with the browser
family, and reading a tool's answer. Each test module keeps only its own pages and fixtures' shape."""

import contextlib
import http.server
import os
import pathlib
import signal
import threading

from conftest import Boxd


class Pages(http.server.SimpleHTTPRequestHandler):
    """Files of `directory` (given with `functools.partial`), or what a subclass's `do_GET` builds and
    sends with `answer`; logs nothing."""

    def log_message(self, *args):
        pass

    def answer(self, body, kind, headers=None):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serving(handler):
    """`handler` served on a free loopback port for the block; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def browser_boxd(tmp_path, *arguments):
    """A boxd serving the browser family, headless, on a fresh workspace (its `workspace`)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "browser", "--browser-headless", *arguments)
    server.workspace = workspace
    return server


def kill_browser(boxd):
    """SIGKILLs every process of `boxd`'s browser (those given its profile); answers how many."""
    marker = f"--user-data-dir=/tmp/boxd-browser-{boxd.proc.pid}-"
    killed = 0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def text(result):
    return "\n".join(item["text"] for item in result["content"] if item["type"] == "text")


def ok(result):
    assert result["isError"] is False, result
    return text(result)


def failed(result):
    assert result["isError"] is True, result
    return text(result)


def structured(result):
    return result.get("structuredContent") or result.get("structured_content")
