"""boxd as an MCP server: the Python `mcp` client over /mcp, and through `boxd mcp-stdio`."""
import asyncio
import os
import pathlib
import random
import subprocess
import sys
import time

import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

from conftest import TOKEN, ROOT

PEER = str(pathlib.Path(__file__).with_name("mcp_peer.py"))


async def exercise(session):
    await session.initialize()
    names = {tool.name for tool in (await session.list_tools()).tools}
    shell = await session.call_tool("run_shell_command", {"command": "echo over-mcp"})
    cell = await session.call_tool("run_ipython_cell", {"code": "print(6 * 7)"})
    hosted = await session.call_tool("add", {"a": 1, "b": 2})
    return names, shell, cell, hosted


def check(names, shell, cell, hosted):
    assert {"run_shell_command", "run_ipython_cell", "add", "echo"} <= names
    assert shell.isError is False and shell.content[0].text == "over-mcp\n"
    assert cell.content[0].text == "42\n"
    assert hosted.content[0].text == "3"


@pytest.fixture
def hosting(client):
    assert client.add_mcp_servers(
        {"mcpServers": {"peer": {"command": sys.executable, "args": [PEER, "stdio"]}}}
    ) == "OK"
    return client


@pytest.mark.parametrize("prefix", ["", "/fastapi"])
def test_streamable_http_endpoint(boxd, hosting, prefix):
    async def run():
        url = f"http://127.0.0.1:{boxd.port}{prefix}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (read, write, _):
            async with ClientSession(read, write) as session:
                return await exercise(session)

    check(*asyncio.run(run()))


def test_endpoint_needs_the_token(boxd):
    async def run():
        url = f"http://127.0.0.1:{boxd.port}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": "Bearer wrong"}) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()

    with pytest.raises(BaseException):
        asyncio.run(asyncio.wait_for(run(), 20))


def test_stdio_relay(boxd, hosting):
    binary = os.environ.get("BOXD_BIN", str(ROOT / "target" / "debug" / "boxd"))

    async def run():
        params = StdioServerParameters(
            command=binary,
            args=["mcp-stdio", "--url", f"http://127.0.0.1:{boxd.port}/fastapi"],
            env={**os.environ, "SECRET_TOKEN": TOKEN},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                return await exercise(session)

    check(*asyncio.run(asyncio.wait_for(run(), 60)))


def running(pattern):
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


async def eventually(predicate, seconds):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def relay_params(boxd):
    binary = os.environ.get("BOXD_BIN", str(ROOT / "target" / "debug" / "boxd"))
    return StdioServerParameters(
        command=binary,
        args=["mcp-stdio", "--url", f"http://127.0.0.1:{boxd.port}"],
        env={**os.environ, "SECRET_TOKEN": TOKEN},
    )


@pytest.mark.parametrize("via", ["http", "relay"])
@pytest.mark.parametrize("how", ["notification", "session-close"])
def test_a_cancelled_call_stops_its_command(boxd, how, via):
    # A duration no other test uses, so pgrep finds this command only.
    command = f"sleep 300.{random.randrange(10**6):06d}"

    def client():
        if via == "relay":
            return stdio_client(relay_params(boxd))
        url = f"http://127.0.0.1:{boxd.port}/mcp"
        return streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"})

    async def run():
        async with client() as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                request_id = session._request_id  # the id the next request gets
                call = asyncio.create_task(
                    session.call_tool("run_shell_command", {"command": command, "timeout": 600})
                )
                assert await eventually(lambda: running(command), 20), "the command never started"
                if how == "notification":
                    params = types.CancelledNotificationParams(requestId=request_id, reason="test")
                    await session.send_notification(
                        types.ClientNotification(types.CancelledNotification(params=params))
                    )
                    assert await eventually(lambda: not running(command), 10), "still running after the cancel"
                call.cancel()
        # Leaving the client ends the session (a DELETE, or the relay's stdin closing): that stops the
        # call as well.
        assert await eventually(lambda: not running(command), 10), "still running after the session closed"

    asyncio.run(asyncio.wait_for(run(), 60))


def test_each_mcp_session_has_its_own_bash_shell(boxd):
    """The agent toolset's `bash` keeps one shell per caller: over /mcp, per MCP session."""
    async def run():
        url = f"http://127.0.0.1:{boxd.port}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (r1, w1, _):
            async with ClientSession(r1, w1) as first:
                await first.initialize()
                async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (r2, w2, _):
                    async with ClientSession(r2, w2) as second:
                        await second.initialize()
                        assert (await first.call_tool("bash", {"command": "mkdir -p one && cd one"})).isError is False
                        assert (await second.call_tool("bash", {"command": "mkdir -p two && cd two"})).isError is False
                        return [(await session.call_tool("bash", {"command": "pwd"})).content[0].text
                                for session in (first, second)]

    first, second = asyncio.run(run())
    workspace = str(pathlib.Path(boxd.workspace).resolve())
    assert (first, second) == (f"{workspace}/one", f"{workspace}/two")
