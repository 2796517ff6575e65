"""Issue #48 in every image: the agent family's tools are listed and answer, called through the real
client as an agent framework would (`client.call_tool(name, arguments)`)."""

ANTHROPIC = {"bash", "read", "write", "edit", "glob", "grep", "str_replace_based_edit_tool"}
OPENAI = {"apply_patch", "shell"}


def texts(result):
    return [item.get("text") for item in result.get("content", []) if item.get("type") == "text"]


def check(client, workspace):
    """Lists the nine tools, then drives each vendor's set once on the bind-mounted workspace."""
    tools = client.list_tools()
    assert ANTHROPIC <= set(tools.get("anthropic", {})), list(tools)
    assert OPENAI <= set(tools.get("openai", {})), list(tools)

    def call(name, **arguments):
        result = client.call_tool(name, arguments)
        assert not result.get("isError"), (name, arguments, result)
        return texts(result)

    assert call("bash", command="cd /tmp && export ANSWER=$((6*7))") == ["(no output)"]
    assert call("bash", command="pwd; echo $ANSWER") == ["/tmp\n42"], "the session's shell kept cd and variables"
    assert call("write", file_path="agent/notes.txt", content="one\ntwo\n") == ["wrote 8 bytes to agent/notes.txt"]
    assert call("edit", file_path="agent/notes.txt", old_string="two", new_string="deux") == [
        "edited agent/notes.txt (1 replacement(s))"]
    assert call("read", file_path="agent/notes.txt", view_range=[2, 2]) == ["deux"]
    assert call("glob", pattern="agent/*.txt") == ["/workspace/agent/notes.txt"]
    assert call("grep", pattern="^de", path="agent") == ["/workspace/agent/notes.txt:2:deux"]
    viewed = call("str_replace_based_edit_tool", command="view", path="agent/notes.txt")[0]
    assert "     2\tdeux" in viewed, viewed
    patch = "*** Begin Patch\n*** Update File: agent/notes.txt\n@@\n one\n-deux\n+two\n*** End Patch\n"
    call("apply_patch", input=patch)
    assert (workspace / "agent" / "notes.txt").read_text() == "one\ntwo\n"
    result = client.call_tool("shell", {"commands": ["cat agent/notes.txt", "exit 3"]})
    assert not result.get("isError"), result
    output = result["structuredContent"]["output"]
    assert output[0]["stdout"] == "one\ntwo\n" and output[0]["outcome"] == {"type": "exit", "exit_code": 0}, output
    assert output[1]["outcome"] == {"type": "exit", "exit_code": 3}, output
    refused = client.call_tool("read", {"file_path": "/etc/passwd"})
    assert refused.get("isError"), refused
    return "agent tools (Anthropic's 7, OpenAI's 2) listed and answering; /etc refused"
