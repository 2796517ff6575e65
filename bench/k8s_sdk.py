"""Issue #37's bench: agent-sandbox's SDK (`k8s-agent-sandbox`, sandboxd runtime: gRPC Execute, REST
files) beside agentscope's client (`SandboxHttpClient`: run_shell_command, /workspace/file) on the same
boxd, one run, loopback.

Measured, through each client's own calls: p50 of running `echo hi` (one call, the answer decoded), and
p50 of writing then reading back 1 MiB and 64 MiB. Prints one table (operation | agentscope | sandboxd SDK
| ratio) and writes bench-out/k8s_sdk.json; the goal is the two APIs within 1.2x of each other.

Run as `.venv/bin/python bench/k8s_sdk.py --boxd BIN` (the test venv has both clients). boxd runs in its
own session on free ports; it and its tree are killed afterwards. Every wait is bounded.
"""
import argparse
import json
import os
import pathlib
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.model import ContainerModel
from k8s_agent_sandbox.commands.command_executor import CommandExecutor
from k8s_agent_sandbox.connector import ConnectionStrategy, SandboxConnector
from k8s_agent_sandbox.files.filesystem import Filesystem
from k8s_agent_sandbox.models import SandboxdPodTunnelConnectionConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "bench-out"
TOKEN = "bench-token"
ROUNDS = {"echo": 200, "1 MiB": 30, "64 MiB": 5}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPorts(ConnectionStrategy):
    """The SDK's pod port-forward, already up: boxd's local ports."""

    def __init__(self, rest_port, grpc_port):
        self.base_url = f"http://127.0.0.1:{rest_port}"
        self.grpc_target = f"127.0.0.1:{grpc_port}"

    def connect(self):
        return self.base_url

    def close(self):
        pass

    def verify_connection(self):
        pass

    def should_inject_router_headers(self):
        return False


class LocalConnector(SandboxConnector):
    def _connection_strategy(self):
        return LocalPorts(self.connection_config.rest_port, self.connection_config.grpc_port)


def start_boxd(binary, workspace):
    port, grpc_port, rest_port = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--workspace", str(workspace),
         "--tools", "shell,workspace,processes,sandboxd",
         "--sandboxd-grpc-addr", f"127.0.0.1:{grpc_port}", "--sandboxd-rest-addr", f"127.0.0.1:{rest_port}"],
        env={**os.environ, "SECRET_TOKEN": TOKEN, "RUST_LOG": "warn"},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    ready = threading.Event()

    def drain():
        for line in proc.stderr:
            if re.search(r"family state family=\"sandboxd\" status=\"ready\"", line):
                ready.set()

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", rest_port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    return proc, port, grpc_port, rest_port


def p50(samples):
    return statistics.median(samples)


def timed(operation, rounds):
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - started)
    return p50(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        workspace = pathlib.Path(scratch) / "workspace"
        workspace.mkdir()
        proc, port, grpc_port, rest_port = start_boxd(args.boxd, workspace)
        try:
            model = ContainerModel(session_id="bench", container_id="bench", container_name="bench",
                                   url=f"http://127.0.0.1:{port}/", ports=[port], runtime_token=TOKEN,
                                   timeout=120)
            agentscope = SandboxHttpClient(model, timeout=120)
            agentscope.wait_until_healthy()
            connector = LocalConnector("bench", "default",
                                       SandboxdPodTunnelConnectionConfig(rest_port=rest_port, grpc_port=grpc_port),
                                       k8s_helper=None)
            commands = CommandExecutor(connector, None, "bench")
            files = Filesystem(connector, None, "bench")

            def agentscope_echo():
                result = agentscope.run_shell_command("echo hi")
                assert "hi" in json.dumps(result), result

            def sdk_echo():
                assert commands.run("echo hi").stdout == "hi\n"

            rows = []
            for _ in range(10):  # warm both paths (connections, channel)
                agentscope_echo()
                sdk_echo()
            rows.append(("Execute `echo hi`, p50", timed(agentscope_echo, ROUNDS["echo"]),
                         timed(sdk_echo, ROUNDS["echo"])))
            for label, size in (("1 MiB", 1 << 20), ("64 MiB", 64 << 20)):
                data = os.urandom(size)

                def agentscope_put_get(data=data):
                    agentscope.workspace_write("blob.bin", data)
                    assert len(agentscope.workspace_read("blob.bin", fmt="bytes")) == len(data)

                def sdk_put_get(data=data):
                    files.write("blob.bin", data, timeout=120)
                    assert len(files.read("blob.bin", timeout=120)) == len(data)

                agentscope_put_get()
                sdk_put_get()
                rows.append((f"PUT then GET {label}, p50", timed(agentscope_put_get, ROUNDS[label]),
                             timed(sdk_put_get, ROUNDS[label])))
            connector.close()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
    print("| operation | agentscope client | sandboxd SDK | SDK / agentscope |")
    print("|---|---|---|---|")
    results = []
    for name, left, right in rows:
        print(f"| {name} | {left * 1000:.2f} ms | {right * 1000:.2f} ms | {right / left:.2f} |")
        results.append({"operation": name, "agentscope_s": left, "sdk_s": right, "ratio": right / left})
    OUT.mkdir(exist_ok=True)
    (OUT / "k8s_sdk.json").write_text(json.dumps({"binary": args.boxd, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
