"""A stdio FastMCP server (PyPI `mcp`) for boxd's fault suite: a tool that blocks, so it can be killed mid-call."""
import os
import pathlib
import time

from mcp.server.fastmcp import FastMCP

server = FastMCP("slow")


@server.tool()
def whoami() -> str:
    """The peer's process id."""
    return str(os.getpid())


@server.tool()
def block(marker: str, seconds: float = 60) -> str:
    """Touch `marker` (so a test knows the call is running), then sleep."""
    pathlib.Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "woke"


server.run(transport="stdio")
