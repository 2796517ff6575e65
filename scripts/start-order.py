#!/usr/bin/env python3
"""Writes scripts/start-order.txt: the functions a start of the static binary runs until its first answer,
then those it runs after it until it stops, for the linker to put first in the code (`make static`).

It builds the static binary with its symbols (`make static KEEP_SYMBOLS=1`), starts `boxd serve` under
callgrind, asks `GET /healthz` until it answers, has callgrind dump what ran so far, stops boxd, and keeps
the names the binary defines, first-answer functions first. Then it links the static binary again with the
new order and strips it. Needs valgrind (`apt-get install valgrind`); ~15 minutes (two links).
Every wait is bounded; only loopback is used.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import start  # noqa: E402  (bench/start.py: the wait for `/healthz`)
from family_bench import free_port  # noqa: E402

BINARY = ROOT / "target" / "x86_64-unknown-linux-gnu" / "release" / "boxd"
ORDER = ROOT / "scripts" / "start-order.txt"
TOKEN = "start-order-token-0123456789abcdef"
# boxd under callgrind starts in seconds, not milliseconds.
ANSWER_WITHIN = 120
STOP_WITHIN = 60


def make_static(keep_symbols):
    # Cargo does not track the order file, so boxd is built and linked again from scratch each time.
    subprocess.run(["cargo", "clean", "--release", "--target", "x86_64-unknown-linux-gnu", "-p", "boxd"],
                   cwd=ROOT, check=True)
    subprocess.run(["make", "-C", str(ROOT), "static", *(["KEEP_SYMBOLS=1"] if keep_symbols else [])],
                   check=True)


def executed_functions(dump):
    """The function names of a callgrind dump (`fn=` entries), in the order they first appear."""
    names, order, seen = {}, [], set()
    for line in dump.read_text(errors="replace").splitlines():
        match = re.match(r"^(c?)fn=\((\d+)\)(?: (.*))?$", line)
        if not match:
            continue
        called, number, name = match.groups()
        if name:
            names[number] = name
        if not called and names.get(number) and names[number] not in seen:
            seen.add(names[number])
            order.append(names[number])
    return order


def profile_start(scratch):
    """(functions run until the first answer, functions run after it), from a start under callgrind."""
    workspace = scratch / "workspace"
    workspace.mkdir()
    out = scratch / "callgrind.out"
    port = free_port()
    env = {**os.environ, "SECRET_TOKEN": TOKEN, "RUST_LOG": "warn"}
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={out}", str(BINARY),
         "serve", "--host", "127.0.0.1", "--port", str(port), "--workspace", str(workspace)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if start.wait_for_healthz(port, TOKEN, time.perf_counter(), ANSWER_WITHIN) is None:
            raise RuntimeError(f"boxd under callgrind did not answer within {ANSWER_WITHIN} s")
        subprocess.run(["callgrind_control", "--dump=first-answer", str(server.pid)], check=True,
                       capture_output=True, timeout=STOP_WITHIN)
        # What runs once the first answer is out (the families' start, the guard) comes next in the
        # order; the dump asked for above is written before boxd stops.
        time.sleep(2)
    finally:
        server.terminate()
        try:
            server.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    first = pathlib.Path(f"{out}.1")
    if not first.exists():
        raise RuntimeError("callgrind wrote no dump at the first answer")
    return executed_functions(first), executed_functions(out)


def defined_functions():
    symbols = subprocess.run(["nm", "--defined-only", str(BINARY)], check=True, capture_output=True,
                             text=True).stdout.splitlines()
    return {fields[2] for fields in (line.split() for line in symbols)
            if len(fields) == 3 and fields[1] in "tTwW"}


def main():
    make_static(keep_symbols=True)
    defined = defined_functions()
    if not defined:
        sys.exit(f"{BINARY} has no symbols")
    with tempfile.TemporaryDirectory(prefix="start-order-") as scratch:
        first, after = profile_start(pathlib.Path(scratch))
    order = list(dict.fromkeys(name for name in first + after if name in defined))
    ORDER.write_text("".join(f"{name}\n" for name in order))
    print(f"{ORDER}: {len(order)} functions ({len(first)} run until the first answer)")
    make_static(keep_symbols=False)


if __name__ == "__main__":
    main()
