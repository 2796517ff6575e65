"""Starts the real boxd binary and hands tests a real SandboxHttpClient pointed at it."""
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest
from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.model import ContainerModel

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "python-client-token"


class Boxd:
    def __init__(self, workspace: pathlib.Path, *extra: str, env: dict | None = None):
        binary = os.environ.get("BOXD_BIN", str(ROOT / "target" / "debug" / "boxd"))
        self.workspace = workspace
        self.proc = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", "0",
             "--workspace", str(workspace), "--python", sys.executable, *extra],
            # The sandboxd family's listeners on free ports: tests run side by side.
            env={**os.environ, "SECRET_TOKEN": TOKEN, "SANDBOXD_GRPC_ADDR": "127.0.0.1:0",
                 "SANDBOXD_REST_ADDR": "127.0.0.1:0", **(env or {})},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )
        found = threading.Event()
        self.port = None
        # Everything boxd logged, for tests that read what it says at start (a test's boxd is short-lived).
        self.log_lines = []

        copy = os.environ.get("BOXD_TEST_STDERR")

        def drain():
            sink = open(copy, "a") if copy else None
            for line in self.proc.stderr:
                self.log_lines.append(line)
                if sink:
                    sink.write(line)
                    sink.flush()
                match = re.search(r"listening on http://[\d.]+:(\d+)", line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(20):
            self.proc.kill()
            raise RuntimeError("boxd did not report its address within 20 s")

    def client(self) -> SandboxHttpClient:
        model = ContainerModel(
            session_id="session-test",
            container_id="container-test",
            container_name="boxd-test",
            url=f"http://127.0.0.1:{self.port}/",
            ports=[self.port],
            runtime_token=TOKEN,
            timeout=120,
        )
        return SandboxHttpClient(model, timeout=20)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def boxd(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace)
    yield server
    server.stop()


@pytest.fixture
def client(boxd):
    with boxd.client() as client:
        yield client


def pytest_sessionfinish(session, exitstatus):
    """Under CI (`CI=true`, as `.ci/run` runs) a skipped test fails the run: a clone of the repository
    carries everything its tests need, so a skip means a missing install step or file. The reasons are
    printed at the end (`-rs`)."""
    if not os.environ.get("CI") or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; every test must run on a clone", red=True)
        session.exitstatus = 1
