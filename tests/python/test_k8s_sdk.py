"""The Kubernetes agent-sandbox SDK (`k8s-agent-sandbox` from PyPI, unchanged) against the real boxd: its
CommandExecutor and Filesystem over the sandboxd runtime (REST + gRPC) and over the legacy python-runtime
routes. The SDK's one cluster-bound piece, the connection strategy (a kubectl port-forward to the pod), is
replaced by one that returns boxd's local ports; everything on the wire is the SDK's own."""
import io
import os
import socket
import time

import grpc
from google.protobuf import empty_pb2
import pytest

from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc
from k8s_agent_sandbox.commands.command_executor import CommandExecutor
from k8s_agent_sandbox.connector import ConnectionStrategy, SandboxConnector
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.files.filesystem import Filesystem
from k8s_agent_sandbox.models import (
    SandboxdPodTunnelConnectionConfig,
    SandboxDirectConnectionConfig,
)

from conftest import TOKEN, Boxd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPorts(ConnectionStrategy):
    """What SandboxdPodTunnelStrategy yields once its port-forward is up: boxd's REST base URL and
    gRPC target on this machine."""

    def __init__(self, rest_port: int, grpc_port: int):
        self.base_url = f"http://127.0.0.1:{rest_port}"
        self.grpc_target = f"127.0.0.1:{grpc_port}"

    def connect(self) -> str:
        return self.base_url

    def close(self) -> None:
        pass

    def verify_connection(self) -> None:
        pass

    def should_inject_router_headers(self) -> bool:
        return False


class LocalConnector(SandboxConnector):
    def _connection_strategy(self):
        config = self.connection_config
        if isinstance(config, SandboxdPodTunnelConnectionConfig):
            return LocalPorts(config.rest_port, config.grpc_port)
        return super()._connection_strategy()


@pytest.fixture
def sandboxd(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    grpc_port, rest_port = free_port(), free_port()
    server = Boxd(workspace, "--sandboxd-grpc-addr", f"127.0.0.1:{grpc_port}",
                  "--sandboxd-rest-addr", f"127.0.0.1:{rest_port}",
                  "--tools", "shell,ipython,filesystem,workspace,git,processes,watch,mcp,sandboxd")
    connector = LocalConnector(
        "sandbox-test", "default",
        SandboxdPodTunnelConnectionConfig(rest_port=rest_port, grpc_port=grpc_port),
        k8s_helper=None)
    deadline = time.monotonic() + 20
    while True:
        try:
            connector.send_request("GET", "v1/health", timeout=1)
            break
        except SandboxRequestError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.05)
    yield server, connector, workspace
    connector.close()
    server.stop()


@pytest.fixture
def legacy(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # sandboxd (which serves the legacy routes) is off by default for `boxd serve`; the images turn it on.
    boxd = Boxd(workspace, "--tools", "shell,ipython,filesystem,workspace,git,processes,watch,mcp,sandboxd")
    connector = SandboxConnector(
        "sandbox-test", "default",
        SandboxDirectConnectionConfig(
            api_url=f"http://127.0.0.1:{boxd.port}",
            extra_headers={"Authorization": f"Bearer {TOKEN}"}),
        k8s_helper=None)
    yield connector, boxd.workspace
    connector.close()
    boxd.stop()


def test_commands_over_grpc_execute(sandboxd):
    _, connector, workspace = sandboxd
    commands = CommandExecutor(connector, None, "test")
    result = commands.run("echo out; echo err >&2; exit 3")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    (workspace / "sub").mkdir()
    result = commands.run('pwd; echo "$GREETING"', env={"GREETING": "hi"}, cwd="/workspace/sub")
    assert result.stdout == f"{workspace / 'sub'}\nhi\n"
    started = time.monotonic()
    result = commands.run("sleep 30", command_timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - started < 10
    with pytest.raises(RuntimeError, match="PERMISSION_DENIED"):
        commands.run("true", cwd="../..")


def test_files_over_rest(sandboxd):
    _, connector, workspace = sandboxd
    files = Filesystem(connector, None, "test")
    files.write("dir/notes.txt", "hello")
    files.write("dir/streamed.bin", io.BytesIO(b"x" * 200_000))
    assert (workspace / "dir" / "notes.txt").read_text() == "hello"
    assert files.read("dir/notes.txt") == b"hello"
    sink = io.BytesIO()
    assert files.read_to("dir/streamed.bin", sink) == 200_000
    with pytest.raises(RuntimeError, match="exceeds limit"):
        files.read_to("dir/streamed.bin", io.BytesIO(), max_bytes=10)
    entries = {entry.name: entry for entry in files.list("dir")}
    assert entries["notes.txt"].type == "file" and entries["notes.txt"].size == 5
    assert entries["notes.txt"].mode == "0644"
    assert {entry.name for entry in files.list("/workspace")} == {"dir"}
    assert files.exists("dir/notes.txt") and files.exists("dir")
    assert not files.exists("dir/absent.txt")
    with pytest.raises(SandboxRequestError) as refused:
        files.list("../..")
    assert refused.value.status_code == 403
    assert refused.value.response.json()["code"] == "PERMISSION_DENIED"
    with pytest.raises(SandboxRequestError) as conflict:
        files.delete("dir")
    assert conflict.value.status_code == 409
    files.delete("dir/notes.txt")
    files.delete("dir", recursive=True)
    assert not files.exists("dir")
    with pytest.raises(SandboxRequestError) as missing:
        files.read("dir/notes.txt")
    assert missing.value.status_code == 404


def stub_of(connector):
    connector.connect()
    return process_pb2_grpc.ProcessServiceStub(connector.grpc_channel())


def events_until(stream, predicate, limit=10.0):
    """Collects (kind, payload) events until predicate(collected stdout) holds or the stream ends."""
    out = b""
    deadline = time.monotonic() + limit
    for event in stream:
        kind = event.WhichOneof("event")
        if kind == "stdout":
            out += event.stdout
        if kind == "exit":
            return out, event.exit.exit_code
        if predicate(out) or time.monotonic() > deadline:
            return out, None
    return out, None


def test_streaming_stdin_signals_and_pty_over_the_sdks_channel(sandboxd):
    _, connector, _ = sandboxd
    stub = stub_of(connector)
    stream = stub.Start(process_pb2.StartRequest(
        config=process_pb2.ProcessConfig(command=["/bin/sh", "-c", "echo ready; cat"])), timeout=30)
    init = next(stream)
    pid = init.init.process_id
    out, _ = events_until(stream, lambda out: b"ready" in out)
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, input=b"line\n"))
    out, _ = events_until(stream, lambda out: b"line" in out)
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, eof=empty_pb2.Empty()))
    _, exit_code = events_until(stream, lambda out: False)
    assert exit_code == 0

    stream = stub.Start(process_pb2.StartRequest(
        config=process_pb2.ProcessConfig(command=["sleep", "30"])), timeout=30)
    pid = next(stream).init.process_id
    stub.SendSignal(process_pb2.SendSignalRequest(process_id=pid, signal=process_pb2.SIGNAL_SIGINT))
    _, exit_code = events_until(stream, lambda out: False)
    assert exit_code == 128 + 2
    with pytest.raises(grpc.RpcError) as unknown:
        stub.SendSignal(process_pb2.SendSignalRequest(process_id=99999, signal=process_pb2.SIGNAL_SIGKILL))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

    stream = stub.Start(process_pb2.StartRequest(
        config=process_pb2.ProcessConfig(command=["/bin/sh", "-c", "stty size; read x; stty size"]),
        pty=process_pb2.PTY(cols=80, rows=24)), timeout=30)
    pid = next(stream).init.process_id
    out, _ = events_until(stream, lambda out: b"24 80" in out)
    stub.ResizeTTY(process_pb2.ResizeTTYRequest(process_id=pid, cols=120, rows=40))
    stub.WriteStdin(process_pb2.WriteStdinRequest(process_id=pid, input=b"\n"))
    out, exit_code = events_until(stream, lambda out: False)
    assert b"40 120" in out and exit_code == 0


def test_the_legacy_python_runtime_path(legacy):
    connector, workspace = legacy
    commands = CommandExecutor(connector, None, "test")
    files = Filesystem(connector, None, "test")
    result = commands.run("echo legacy; echo e >&2")
    assert (result.stdout, result.stderr, result.exit_code) == ("legacy\n", "e\n", 0)
    result = commands.run("sleep 30", command_timeout=1)
    assert result.timed_out and result.exit_code == 124
    with pytest.raises(NotImplementedError):
        commands.run("true", cwd="sub")
    files.write("up/one.txt", b"1")
    files.write("up/two.bin", io.BytesIO(b"2" * 100_000))
    assert (workspace / "up" / "one.txt").read_bytes() == b"1"
    assert files.read("up/one.txt") == b"1"
    assert len(files.read("up/two.bin")) == 100_000
    assert sorted(entry.name for entry in files.list("up")) == ["one.txt", "two.bin"]
    assert files.exists("up/one.txt") and not files.exists("up/none")
    with pytest.raises(SandboxRequestError) as refused:
        files.read("../outside", allow_unsafe_paths=True)
    assert refused.value.status_code == 403
    with pytest.raises(NotImplementedError):
        files.delete("up")
    # Behind boxd's token like every route.
    anonymous = SandboxConnector("sandbox-test", "default",
                                 SandboxDirectConnectionConfig(api_url=connector.connection_config.api_url),
                                 k8s_helper=None)
    with pytest.raises(SandboxRequestError) as unauthorized:
        Filesystem(anonymous, None, "test").exists("up")
    assert unauthorized.value.status_code == 403
