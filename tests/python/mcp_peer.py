"""A real FastMCP server (PyPI `mcp`) for boxd's hosting tests.

usage: mcp_peer.py stdio | sse PORT | streamable-http PORT | exit-at-start
"""
import os
import sys

if sys.argv[1] == "exit-at-start":
    print("peer: refusing to start (missing API key)", file=sys.stderr, flush=True)
    sys.exit(3)

from mcp.server.fastmcp import Context, FastMCP  # noqa: E402

port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
server = FastMCP("peer", host="127.0.0.1", port=port)


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def whoami() -> str:
    """The peer's process id and working directory."""
    return f"{os.getpid()} {os.getcwd()} {os.environ.get('PEER_GREETING', '')}"


@server.tool()
async def grow(ctx: Context, name: str = "grown") -> str:
    """Add a tool called `name` (default `grown`) and tell the client the tool list changed."""

    def grown() -> str:
        """A tool that appeared at runtime."""
        return "grown!"

    server.add_tool(grown, name=name)
    await ctx.session.send_tool_list_changed()
    return "grew"


print(f"peer: starting over {sys.argv[1]}", file=sys.stderr, flush=True)
server.run(transport=sys.argv[1])
