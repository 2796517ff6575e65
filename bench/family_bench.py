"""What the benches share (the family benches entirely, `run.py` its timing): a boxd started on a scratch workspace and
driven through /mcp/call_tool over one keep-alive connection, a free loopback port, and timing that is
bounded in count and time."""
import http.client
import json
import os
import pathlib
import socket
import statistics
import subprocess
import tempfile
import time

TOKEN = "bench-token"
ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "bench-out"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Boxd:
    """boxd with `args`, once `ready` (a predicate on /readyz's JSON; default: /healthz answers)."""

    def __init__(self, binary, *args, ready=None, start_seconds=30):
        self.dir = tempfile.mkdtemp(prefix="bench-family-")
        self.port = free_port()
        self.conn = None
        self.proc = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--workspace", self.dir, *args],
            env={**os.environ, "SECRET_TOKEN": TOKEN, "RUST_LOG": "warn"},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + start_seconds
        while time.monotonic() < deadline:
            try:
                if ready is None:
                    self.request("/healthz", None, method="GET")
                    return
                if ready(self.request("/readyz", None, method="GET")):
                    return
            except (OSError, http.client.HTTPException, RuntimeError, ValueError):
                self.conn = None
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"boxd {' '.join(args)} was not ready within {start_seconds} s")

    def request(self, path, body, method="POST", headers=None):
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", **(headers or {})}
        payload = json.dumps(body) if body is not None else None
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            try:
                self.conn.request(method, path, body=payload, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # boxd closed the connection after its idle timeout (--header-timeout) while this
                # server waited its turn: the request never reached it, so once more is safe.
                self.conn = None
                if attempt == 2:
                    raise
        if response.status >= 400:
            raise RuntimeError(f"{path} -> {response.status}: {data[:300]!r}")
        try:
            return json.loads(data)
        except ValueError:
            return data

    def call(self, tool, arguments):
        """The tool's result; a failed call (isError) stops the bench."""
        result = self.request("/mcp/call_tool", {"tool_name": tool, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{tool} {arguments} failed: {result}")
        return result

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def memory_summary(server):
    """boxd's `GET /memory` in one line: PSS in MiB (and process count) of boxd, its guard and each family
    that holds processes."""
    memory = server.request("/memory", None, method="GET")
    parts = [(name, memory[name]) for name in ("boxd", "guard", "init") if memory.get(name)]
    parts += [(name, usage) for name, usage in sorted(memory["families"].items()) if usage["processes"]]
    parts += [("total", memory["total"])]
    return ", ".join(f"{name} {usage['pss_bytes'] / (1 << 20):.1f} ({usage['processes']})"
                     for name, usage in parts)


def samples(call, count, budget_seconds=60):
    """Seconds each of at most `count` calls took, stopping once `budget_seconds` have passed."""
    taken = []
    deadline = time.perf_counter() + budget_seconds
    for _ in range(count):
        started = time.perf_counter()
        call()
        taken.append(time.perf_counter() - started)
        if time.perf_counter() > deadline:
            break
    return taken


def timed(call, count, budget_seconds):
    taken = sorted(samples(call, count, budget_seconds))
    return {
        "p50_ms": statistics.median(taken) * 1000,
        "p95_ms": taken[min(len(taken) - 1, int(len(taken) * 0.95))] * 1000,
        "n": len(taken),
    }
