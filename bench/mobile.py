"""The `adb` tool: latency through /mcp/call_tool (as MobileSandbox calls it) against fake-adbd, the device
side of the real ADB protocol (../shared/tools/fake-adbd), with the stand-ins of tests/adb/fakebin.

Prints one table (action, p50/p95 ms, samples) and writes bench-out/mobile.json. The fake runs each
command through `sh` on this host, so the figures are boxd plus the protocol plus one shell start (a real
device adds its own `input` start, hundreds of ms). Every loop is bounded in count and time; only loopback
is used.
"""
import argparse
import http.client
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOKEN = "bench-token"
ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "bench-out"
FAKE = ROOT.parent / "shared" / "tools" / "fake-adbd"
FAKEBIN = ROOT / "tests" / "adb" / "fakebin"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_line(stream, needle, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        if needle in line:
            return True
    return False


def start_device(directory):
    port = free_port()
    env = {**os.environ, "FAKEBIN": str(FAKEBIN), "FAKE_SHARED_BIN": str(FAKE / "fakebin"),
           "FAKE_INPUT_LOG": str(directory / "input.log"), "TMPDIR": str(directory)}
    proc = subprocess.Popen([sys.executable, str(FAKE / "fake_adbd.py"), str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if not wait_for_line(proc.stdout, "listening", 10):
        proc.kill()
        raise RuntimeError("fake-adbd did not start within 10 s")
    return proc, port


class Boxd:
    def __init__(self, binary, *args):
        self.dir = tempfile.mkdtemp(prefix="bench-mobile-")
        self.port = free_port()
        self.conn = None
        self.proc = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--workspace", self.dir, *args],
            env={**os.environ, "SECRET_TOKEN": TOKEN, "RUST_LOG": "warn"},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                ready = self.request("/readyz", None, method="GET")
                if ready.get("families", {}).get("adb", {}).get("status") == "ready":
                    return
            except (OSError, http.client.HTTPException, RuntimeError, ValueError):
                self.conn = None
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("boxd's adb family was not ready within 30 s")

    def request(self, path, body, method="POST"):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status >= 400:
            raise RuntimeError(f"{path} -> {response.status}: {data[:300]!r}")
        return json.loads(data)

    def adb(self, arguments):
        result = self.request("/mcp/call_tool", {"tool_name": "adb", "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"adb {arguments} failed: {result}")
        return result

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed(call, count, budget_seconds):
    samples = []
    deadline = time.perf_counter() + budget_seconds
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
        if time.perf_counter() > deadline:
            break
    samples.sort()
    return {
        "p50_ms": statistics.median(samples) * 1000,
        "p95_ms": samples[min(len(samples) - 1, int(len(samples) * 0.95))] * 1000,
        "n": len(samples),
    }


WORKLOAD = [
    ("tap", {"action": "tap", "coordinate": [100, 200]}, 100),
    ("get_screenshot", {"action": "get_screenshot"}, 50),
    ("list_elements", {"action": "list_elements"}, 30),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    args = parser.parse_args()
    if not (FAKE / "fake_adbd.py").exists():
        sys.exit(f"missing {FAKE}/fake_adbd.py")
    if not pathlib.Path(args.boxd).exists():
        sys.exit(f"missing {args.boxd}: cargo build --release")
    directory = pathlib.Path(tempfile.mkdtemp(prefix="bench-mobile-device-"))
    device, port = start_device(directory)
    results = {}
    try:
        boxd = Boxd(args.boxd, "--tools", "adb", "--adb-connect", f"127.0.0.1:{port}")
        try:
            boxd.adb({"action": "get_screenshot"})  # warm-up: connection made
            for name, arguments, count in WORKLOAD:
                results[name] = timed(lambda arguments=arguments: boxd.adb(arguments), count, budget_seconds=60)
        finally:
            boxd.stop()
    finally:
        device.terminate()
        try:
            device.wait(5)
        except subprocess.TimeoutExpired:
            device.kill()
    OUT.mkdir(exist_ok=True)
    (OUT / "mobile.json").write_text(json.dumps(results, indent=2))
    print(f"{'adb action (fake-adbd)':<24} {'p50 ms':>8} {'p95 ms':>8} {'n':>5}")
    for name, _, _ in WORKLOAD:
        row = results[name]
        print(f"{name:<24} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} {row['n']:>5}")


if __name__ == "__main__":
    main()
