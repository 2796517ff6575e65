"""Hosted MCP servers through the real agentscope-runtime client."""
import pathlib
import sys

PEER = str(pathlib.Path(__file__).with_name("mcp_peer.py"))


def test_add_list_and_call_hosted_tools(client):
    answer = client.add_mcp_servers(
        {"mcpServers": {"peer": {"command": sys.executable, "args": [PEER, "stdio"]}}}
    )
    assert answer == "OK"
    tools = client.list_tools()
    assert set(tools["peer"]) == {"add", "echo", "grow", "whoami"}
    assert "run_shell_command" in tools["generic"]  # the client's own group
    assert client.list_tools(tool_type="peer") == {"peer": tools["peer"]}
    result = client.call_tool("add", {"a": 20, "b": 22})
    assert result["isError"] is False and result["content"][0]["text"] == "42"
    shell = client.call_tool("run_shell_command", {"command": "echo via-generic"})
    assert shell["content"][0]["text"] == "via-generic\n"


def test_failures_are_errors_not_hangs(client):
    failed = client.add_mcp_servers(
        {"mcpServers": {"broken": {"command": sys.executable, "args": [PEER, "exit-at-start"]}}}
    )
    assert failed["isError"] is True
    unknown = client.call_tool("no_such_tool", {})
    assert unknown["isError"] is True and "404" in unknown["content"][0]["text"]
