"""Smoke test of the base image, run for real: the manager's way of starting it, then the real client,
through boxd on port 80 (`boxd init` is PID 1; no nginx). Then the image without SECRET_TOKEN: a token
generated and printed once in the log, which works; upstream's published `secret_token123` gets 403.

usage: test_base_image.py --engine podman --image boxd-base:latest
"""
import argparse
import hashlib
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import requests

import isolation

from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.model import ContainerModel

TOKEN = "image-test-" + os.urandom(6).hex()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def text(result, description):
    return next((item["text"] for item in result["content"] if item.get("description") == description), None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="podman")
    parser.add_argument("--image", default="boxd-base:latest")
    args = parser.parse_args()
    engine = args.engine

    size = int(subprocess.check_output([engine, "image", "inspect", "--format", "{{.Size}}", args.image]))
    print(f"image {args.image}: {size / 1e6:.1f} MB")
    if args.image.startswith("boxd-base"):
        assert size <= 200e6, f"the base image is {size / 1e6:.1f} MB; its budget is 200 MB (issue #46)"
    workspace = pathlib.Path(tempfile.mkdtemp(prefix="boxd-image-ws-"))
    port = free_port()
    started = time.perf_counter()
    container = subprocess.check_output([
        engine, "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:80",
        "-e", f"SECRET_TOKEN={TOKEN}", "-e", "NGINX_TIMEOUT=60",
        "-v", f"{workspace}:/workspace", args.image,
    ], text=True).strip()
    try:
        model = ContainerModel(session_id="s", container_id=container[:12], container_name="boxd-image-test",
                               url=f"http://localhost:{port}/", ports=[port], runtime_token=TOKEN, timeout=120)
        client = SandboxHttpClient(model, timeout=60)
        deadline = time.perf_counter() + 60
        while not client.check_health():
            assert time.perf_counter() < deadline, "no /fastapi/healthz 200 within 60 s"
            time.sleep(0.02)
        print(f"container start -> healthy: {time.perf_counter() - started:.2f} s")

        shell = client.run_shell_command("echo hello from $(hostname); git --version")
        assert text(shell, "returncode") == "0" and "hello from" in text(shell, "stdout"), shell
        # Programs kept compressed until their first run (images/base/packed.py): they run, for root in
        # place and for another user from its own cache.
        packed = client.run_shell_command(
            "uv --version && uvx --version && scalar version && git imap-send -h 2>&1 | head -1"
            " && su nobody -s /bin/sh -c 'HOME=/tmp/nobody-home uv --version'")
        assert text(packed, "returncode") == "0", packed
        # scalar prints its version on stderr.
        assert text(packed, "stdout").count("uv 0.") == 2 and "git version" in text(packed, "stderr"), packed
        print("programs unpacked at their first run: ok")
        cell = client.run_ipython_cell("import sys\nx = 20\nprint(x * 2, sys.prefix)")
        assert text(cell, "stdout").startswith("40 /opt/venv"), cell
        assert client.run_ipython_cell("print(x)")["content"][0]["text"] == "20\n"

        client.workspace_write("notes/hello.txt", "from the client")
        assert (workspace / "notes" / "hello.txt").read_text() == "from the client"
        (workspace / "from-host.txt").write_text("from the host")
        assert client.workspace_read("from-host.txt") == "from the host"

        big = workspace.parent / f"{workspace.name}-big.bin"
        with open(big, "wb") as out:
            for block in range(64):
                out.write(hashlib.sha256(str(block).encode()).digest() * (1024 * 1024 // 32))
        t = time.perf_counter()
        info = client.workspace_write_from_path("big.bin", str(big))
        up = time.perf_counter() - t
        assert info["size"] == 64 * 1024 * 1024, info
        digest = hashlib.sha256()
        t = time.perf_counter()
        for chunk in client.workspace_read("big.bin", fmt="stream"):
            digest.update(chunk)
        down = time.perf_counter() - t
        assert digest.hexdigest() == hashlib.sha256(big.read_bytes()).hexdigest()
        big.unlink()
        print(f"64 MiB through port 80: up {64 / up:.0f} MiB/s, down {64 / down:.0f} MiB/s")
        client.workspace_remove("big.bin")

        commit = client.commit_changes("from the image test")
        assert len(commit["commit"]) == 40, commit
        assert client.git_logs()["logs"][0]["message"] == "from the image test"

        listing = client.call_tool("list_directory", {"path": "notes"})
        assert listing["content"][0]["text"] == "[FILE] hello.txt", listing
        print("native filesystem tools: ok")

        # A terminal and a streamed process through port 80 (unbuffered SSE, upgrade headers).
        base, auth = f"http://localhost:{port}/fastapi", {"Authorization": f"Bearer {TOKEN}"}
        started_process = requests.post(f"{base}/processes", headers=auth, timeout=30, json={
            "command": "for i in 1 2 3; do echo line $i; sleep 0.3; done", "pty": True}).json()
        with requests.get(f"{base}/processes/{started_process['id']}/events", stream=True, timeout=30,
                          headers={**auth, "Accept": "text/event-stream"}) as stream:
            assert stream.headers["content-type"] == "text/event-stream", stream.headers
            data = [line for line in stream.iter_lines(decode_unicode=True) if line.startswith("data:")]
        assert "line 3" in "".join(data) and '"type":"exit"' in data[-1], data
        print("live process streamed through port 80: ok")

        added = client.add_mcp_servers({"mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"], "timeout": 180},
        }})
        assert added == "OK", added
        assert "get_current_time" in client.list_tools()["time"]
        now = client.call_tool("get_current_time", {"timezone": "UTC"})
        assert now["isError"] is False and "UTC" in now["content"][0]["text"], now
        print("MCP server added with uvx and called: ok")
        # The container's processes as the host sees them: none may outlive `stop`.
        top = subprocess.run([engine, "top", container, "hpid"], capture_output=True, text=True)
        host_pids = [int(word) for word in top.stdout.split() if word.isdigit()]
        assert host_pids, top.stdout + top.stderr
    except BaseException:
        subprocess.run([engine, "logs", "--tail", "40", container])
        raise
    finally:
        t = time.perf_counter()
        subprocess.run([engine, "stop", "-t", "10", container], stdout=subprocess.DEVNULL, check=False)
        stopped = time.perf_counter() - t
        print(f"{engine} stop: {stopped:.2f} s")
    left = subprocess.run([engine, "ps", "-a", "-q", "--filter", f"id={container}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the container is still there"
    left_behind = [pid for pid in host_pids if pathlib.Path(f"/proc/{pid}").exists()]
    assert not left_behind, f"processes left behind: {left_behind}"
    assert stopped < 8, f"stop took {stopped:.1f} s"
    check_defaults(engine, args.image)
    print("image test: ok")


def generated_token(engine, container, timeout=30):
    """The token `boxd init` generated and printed once, read from the container's log."""
    deadline = time.perf_counter() + timeout
    while True:
        logs = subprocess.run([engine, "logs", container], capture_output=True, text=True)
        log = logs.stdout + logs.stderr
        found = re.findall(r"SECRET_TOKEN is not set; generated token: (\S+)", log)
        if found:
            return found, log
        assert time.perf_counter() < deadline, f"no generated token in the log within {timeout} s: {log[-2000:]}"
        time.sleep(0.05)


def check_defaults(engine, image):
    """No SECRET_TOKEN → a random token, printed once in the log, that works (and is in no process's
    environment or argv and in no file); upstream's published secret_token123 gets 403. A short
    NGINX_TIMEOUT → commands stop before boxd's answer deadline, so a slow one answers 124, not 504."""
    port = free_port()
    workspace = pathlib.Path(tempfile.mkdtemp(prefix="boxd-defaults-ws-"))
    container = subprocess.check_output([
        engine, "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:80", "-e", "NGINX_TIMEOUT=8",
        "-v", f"{workspace}:/workspace", image,
    ], text=True).strip()
    try:
        found, log = generated_token(engine, container)
        assert len(found) == 1, found
        token = found[0]
        assert len(token) >= 32 and token != "secret_token123", token
        assert log.count(token) == 1, "the generated token is printed more than once"
        model = ContainerModel(session_id="s", container_id=container[:12], container_name="boxd-defaults",
                               url=f"http://localhost:{port}/", ports=[port], runtime_token=token, timeout=60)
        client = SandboxHttpClient(model, timeout=60)
        deadline = time.perf_counter() + 60
        while not client.check_health():
            assert time.perf_counter() < deadline, "no health with the generated token"
            time.sleep(0.05)
        assert text(client.run_shell_command("echo ok"), "stdout") == "ok\n"
        base = f"http://localhost:{port}/fastapi"
        for wrong in ("secret_token123", token[:8], token[:-1]):
            headers = {"Authorization": f"Bearer {wrong}"}
            for method, path, body in (("get", "/healthz", None),
                                       ("post", "/tools/run_shell_command", {"command": "true"})):
                answer = requests.request(method, base + path, headers=headers, json=body, timeout=10)
                assert answer.status_code == 403, (wrong, path, answer.status_code, answer.text[:200])
        print("defaults: a generated token printed once in the log works; secret_token123 gets 403: ok")
        isolation.prepare(workspace, token)
        print("defaults: " + isolation.check(isolation.scan_shell(client, workspace)))
        isolation.cleanup(workspace)
        started = time.perf_counter()
        slow = client.run_shell_command("echo started; sleep 30")
        assert text(slow, "returncode") == "124", slow
        assert text(slow, "stdout") == "started\n"
        assert time.perf_counter() - started < 8
        print("defaults: command timeout below NGINX_TIMEOUT=8 (124, not 504): ok")
        check_idle_streams_outlive_nginx_timeout(port, token, idle=10)
    finally:
        subprocess.run([engine, "stop", "-t", "10", container], stdout=subprocess.DEVNULL, check=False)
        shutil.rmtree(workspace, ignore_errors=True)


def check_idle_streams_outlive_nginx_timeout(port, token, idle):
    """With NGINX_TIMEOUT=8, a terminal WebSocket and an SSE stream that stay silent for `idle` > 8 s still
    work: the answer deadline applies to a response's start, not to a stream, and boxd's keep-alives
    (every NGINX_TIMEOUT/2 s) keep any proxy in front from cutting them."""
    from websockets.sync.client import connect

    base, auth = f"http://localhost:{port}/fastapi", {"Authorization": f"Bearer {token}"}
    terminal = requests.post(f"{base}/processes", headers=auth, timeout=30,
                             json={"argv": ["/bin/sh"], "pty": True}).json()
    # ping_interval=None: only boxd's pings may keep the connection alive.
    with connect(f"ws://localhost:{port}/fastapi/processes/{terminal['id']}/ws", additional_headers=auth,
                 open_timeout=30, ping_interval=None) as socket_:
        quiet_until = time.perf_counter() + idle
        while (left := quiet_until - time.perf_counter()) > 0:
            try:
                socket_.recv(timeout=left)
            except TimeoutError:
                break
        socket_.send(json.dumps({"type": "stdin", "data": "echo alive-$((6*7))\n"}))
        seen, answer_by = "", time.perf_counter() + 10
        while "alive-42\r\n" not in seen:
            event = json.loads(socket_.recv(timeout=answer_by - time.perf_counter()))
            seen += event.get("data", "")
    print(f"terminal WebSocket idle {idle} s (NGINX_TIMEOUT=8), then answered: ok")

    quiet = requests.post(f"{base}/processes", headers=auth, timeout=30,
                          json={"command": f"sleep {idle}; echo done"}).json()
    with requests.get(f"{base}/processes/{quiet['id']}/events", stream=True, timeout=30,
                      headers={**auth, "Accept": "text/event-stream"}) as stream:
        lines = list(stream.iter_lines(decode_unicode=True))
    assert any(line.startswith(":") for line in lines), lines
    assert any('"data":"done\\n"' in line for line in lines), lines
    assert any('"type":"exit"' in line for line in lines[-3:]), lines
    print(f"SSE stream silent {idle} s (NGINX_TIMEOUT=8), kept alive, then done and exit: ok")


if __name__ == "__main__":
    sys.exit(main())
