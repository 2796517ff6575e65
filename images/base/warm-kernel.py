"""Compiles, at image build, the byte code of exactly what boxd's IPython kernel imports: its start, a cell
with a `!command`, and what it loads after its first cell.

Compiling those at every container start would delay the kernel by ~1.5 s; compiling everything the
venv holds would ship ~3 MB of byte code no kernel reads (IPython's terminal front end, prompt_toolkit,
parts of the standard library): code that imports those compiles them once, as root, when it first
does. It runs the real boxd and the real kernel, so the list follows the kernel as it changes.

Run with `python3 -B -I` (this client compiles nothing of its own).
"""
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

PORT = 18765
TOKEN = secrets.token_hex(16)


def call(path, body=None, timeout=120):
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response) if body is not None else response.status


def run_cell(code):
    result = call("/tools/run_ipython_cell", {"code": code})
    if result.get("isError"):
        raise SystemExit(f"warm-kernel: the cell {code!r} failed: {result}")


def main():
    workspace = tempfile.mkdtemp(prefix="boxd-warm-")
    environment = {**os.environ, "SECRET_TOKEN": TOKEN, "BOXD_TOOLS": "ipython", "HOME": workspace}
    server = subprocess.Popen(
        ["/usr/local/bin/boxd", "serve", "--host", "127.0.0.1", "--port", str(PORT), "--workspace", workspace],
        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if call("/healthz", timeout=2) == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("warm-kernel: boxd did not answer /healthz within 30 s")
            time.sleep(0.05)
        run_cell("!true")
        # The kernel finishes its start right after its first cell's answer, before it reads the next.
        run_cell("pass")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(workspace, ignore_errors=True)
    print("warm-kernel: the kernel's byte code is compiled", file=sys.stderr)


if __name__ == "__main__":
    main()
