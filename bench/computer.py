"""The `computer` tool: boxd's native family against the reference Node server (computer-use-mcp from npm,
hosted through a second boxd's MCP hosting, as upstream's image hosts it), on the same Xvfb, in one run.

Prints one table (action, reference p50/p95, boxd p50/p95, ratio of p50s) and writes
bench-out/computer.json. Every loop is bounded in count and time; only loopback is used.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from family_bench import OUT, ROOT, Boxd, memory_summary, timed

REFERENCE = OUT / "reference-computer" / "node_modules" / "computer-use-mcp" / "dist" / "main.js"
RECORDER = ROOT / "tests" / "computer" / "recorder.py"


def start_xvfb():
    read, write = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as numbers:
        return xvfb, ":" + numbers.readline().strip()


WORKLOAD = [
    ("mouse_move", lambda i: {"action": "mouse_move", "coordinate": [100 + i % 50, 200]}, 50),
    ("left_click", lambda i: {"action": "left_click", "coordinate": [400, 310]}, 50),
    ("type_10_chars", lambda i: {"action": "type", "text": "abcdefghij"}, 30),
    ("get_screenshot", lambda i: {"action": "get_screenshot"}, 15),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    args = parser.parse_args()
    if not REFERENCE.exists():
        sys.exit(f"missing {REFERENCE}: run bench/setup.sh")
    xvfb, display = start_xvfb()
    recorder = subprocess.Popen(["/usr/bin/python3", str(RECORDER)], env={**os.environ, "DISPLAY": display},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    native = Boxd(args.boxd, "--tools", "computer", "--display", display)
    host = Boxd(args.boxd, "--tools", "mcp")
    results = {}
    try:
        host.request("/mcp/add_servers", {"server_configs": {"mcpServers": {"computer-use": {
            "command": "node", "args": [str(REFERENCE)], "env": {"DISPLAY": display}}}}})
        for name, server in (("reference", host), ("boxd", native)):
            server.call("computer", {"action": "get_screenshot"})  # warm-up
            results[name] = {
                action: timed(lambda counter=iter(range(10**6)), make=make, server=server:
                              server.call("computer", make(next(counter))), count, budget_seconds=60)
                for action, make, count in WORKLOAD
            }
        pss_by_part = memory_summary(native)
    finally:
        for process in (native, host):
            process.stop()
        recorder.terminate()
        xvfb.terminate()
    OUT.mkdir(exist_ok=True)
    (OUT / "computer.json").write_text(json.dumps(results, indent=2))
    print(f"{'computer action':<18} {'reference p50/p95 ms':>22} {'boxd p50/p95 ms':>18} {'ratio p50':>10}")
    for action, _, _ in WORKLOAD:
        ref, box = results["reference"][action], results["boxd"][action]
        print(f"{action:<18} {ref['p50_ms']:>10.1f} /{ref['p95_ms']:>9.1f} {box['p50_ms']:>8.2f} /{box['p95_ms']:>7.2f}"
              f" {box['p50_ms'] / ref['p50_ms']:>10.3f}")
    print(f"boxd's GET /memory after the workload, PSS MiB (processes): {pss_by_part}")


if __name__ == "__main__":
    main()
