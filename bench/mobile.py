"""The `adb` tool: latency through /mcp/call_tool (as MobileSandbox calls it) against the project's device
stand-in (tests/adb/device.py, the device side of the real ADB protocol), with the stand-ins of
tests/adb/fakebin.

Prints one table (action, p50/p95 ms, samples) and writes bench-out/mobile.json. The fake runs each
command through `sh` on this host, so the figures are boxd plus the protocol plus one shell start (a real
device adds its own `input` start, hundreds of ms). Every loop is bounded in count and time; only loopback
is used.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from family_bench import OUT, ROOT, Boxd, free_port, timed

DEVICE = ROOT / "tests" / "adb" / "device.py"
FAKEBIN = ROOT / "tests" / "adb" / "fakebin"


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
    env = {**os.environ, "FAKEBIN": str(FAKEBIN),
           "FAKE_INPUT_LOG": str(directory / "input.log"), "TMPDIR": str(directory)}
    proc = subprocess.Popen([sys.executable, str(DEVICE), str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if not wait_for_line(proc.stdout, "listening", 10):
        proc.kill()
        raise RuntimeError("the device stand-in did not start within 10 s")
    return proc, port


WORKLOAD = [
    ("tap", {"action": "tap", "coordinate": [100, 200]}, 100),
    ("get_screenshot", {"action": "get_screenshot"}, 50),
    ("list_elements", {"action": "list_elements"}, 30),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    args = parser.parse_args()
    if not pathlib.Path(args.boxd).exists():
        sys.exit(f"missing {args.boxd}: cargo build --release")
    directory = pathlib.Path(tempfile.mkdtemp(prefix="bench-mobile-device-"))
    device, port = start_device(directory)
    results = {}
    try:
        boxd = Boxd(args.boxd, "--tools", "adb", "--adb-connect", f"127.0.0.1:{port}",
                    ready=lambda readyz: readyz.get("families", {}).get("adb", {}).get("status") == "ready")
        try:
            boxd.call("adb", {"action": "get_screenshot"})  # warm-up: connection made
            for name, arguments, count in WORKLOAD:
                results[name] = timed(lambda arguments=arguments: boxd.call("adb", arguments), count, budget_seconds=60)
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
    print(f"{'adb action (device.py)':<24} {'p50 ms':>8} {'p95 ms':>8} {'n':>5}")
    for name, _, _ in WORKLOAD:
        row = results[name]
        print(f"{name:<24} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} {row['n']:>5}")


if __name__ == "__main__":
    main()
