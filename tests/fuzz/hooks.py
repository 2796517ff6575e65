"""Schemathesis hooks for scripts/fuzz.sh: point the generated requests at what exists on the server.

Random strings for `{tool_name}` and `{id}` only ever meet 404, so the tools and the live-process routes
would never be exercised past their lookup. Before the schema is loaded this hook:
- replaces `/tools/{tool_name}` with one path per registered tool (from `/mcp/list_tools`), each with the
  tool's own input schema as its body, so arguments are generated the way a model would send them (and,
  in the negative phases, the way it should not);
- restricts the process `{id}` to the live processes the script started (negative phases still send
  other ids).

Env (set by scripts/fuzz.sh): FUZZ_BASE_URL, FUZZ_TOKEN, FUZZ_PROCESS_IDS (comma-separated).
"""
import copy
import json
import os
import urllib.request

import schemathesis

# Keywords of JSON Schema that OpenAPI 3.0 schemas do not have; schemathesis would reject or misread them.
_DROP = {"$schema", "$id", "additionalItems", "definitions"}


def _clean(schema):
    if isinstance(schema, dict):
        return {key: _clean(value) for key, value in schema.items() if key not in _DROP}
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    return schema


def _mcp(message: dict, session: str | None):
    """One JSON-RPC message to boxd's own MCP server; its answer (None for a notification) and session."""
    headers = {
        "Authorization": f"Bearer {os.environ['FUZZ_TOKEN']}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if session:
        headers["Mcp-Session-Id"] = session
    request = urllib.request.Request(
        os.environ["FUZZ_BASE_URL"] + "/mcp", data=json.dumps(message).encode(), headers=headers
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        session = response.headers.get("Mcp-Session-Id", session)
        text = response.read().decode()
    for line in text.splitlines():
        line = line.removeprefix("data:").strip()
        if line.startswith("{") and '"id"' in line:
            return json.loads(line), session
    return None, session


def _tools() -> dict:
    """Every registered tool's input schema by name, from boxd's own MCP server: `/mcp/list_tools`
    leaves out the generic group (run_shell_command, run_ipython_cell)."""
    _, session = _mcp(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "boxd-fuzz", "version": "1"},
            },
        },
        None,
    )
    _mcp({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    answer, _ = _mcp({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    return {
        tool["name"]: _clean(tool.get("inputSchema") or {"type": "object"})
        for tool in answer["result"]["tools"]
    }


@schemathesis.hook
def before_load_schema(context, raw_schema):
    paths = raw_schema["paths"]
    generic = paths.pop("/tools/{tool_name}", None)
    if generic is not None:
        for name, arguments in sorted(_tools().items()):
            operation = copy.deepcopy(generic)
            post = operation["post"]
            post.pop("parameters", None)
            post["requestBody"]["content"]["application/json"]["schema"] = arguments
            paths[f"/tools/{name}"] = operation
    # A generated `timeout_seconds` (up to a day) outlives the client's 30 s request timeout: the
    # command runs to it, as asked, and the run ends at its time limit instead of testing the rest.
    # Capped like the tools' timeouts (BOXD_COMMAND_TIMEOUT=10 in scripts/fuzz.sh).
    execute = paths.get("/execute", {}).get("post")
    if execute is not None:
        body = execute["requestBody"]["content"]["application/json"]["schema"]
        timeout = body.get("properties", {}).get("timeout_seconds")
        if timeout is not None:
            timeout["maximum"] = 5
    ids = [item for item in os.environ.get("FUZZ_PROCESS_IDS", "").split(",") if item]
    if ids:
        for path, item in paths.items():
            if "{id}" not in path:
                continue
            for operation in item.values():
                for parameter in operation.get("parameters", []):
                    if parameter.get("in") == "path" and parameter.get("name") == "id":
                        parameter["schema"] = {"type": "string", "enum": ids}


@schemathesis.hook
def filter_case(context, case):
    """Leaves the repository's own `.git` alone: schemathesis learns paths from listings, and a tool
    writing `.git/HEAD` or a delete of `.git` turns every later `/watcher` call into the (correct) 409
    for a damaged repository, so the git routes would be fuzzed against a broken repository only.
    Damaged repositories have their own tests (tests/git_watcher.rs)."""
    for part in (case.path_parameters, case.query, case.body):
        if part is not None and ".git" in json.dumps(part, default=str):
            return False
    return True
