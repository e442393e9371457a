"""A real MCP server written with the official SDK, run as a subprocess by the tests.

``python files_server.py STATE_DIR [stdio|http PORT]``. Its tools work on
``STATE_DIR``: ``read`` and ``add`` (read-only), ``write`` (a side effect),
``slow`` (sleeps; records a cancellation in ``STATE_DIR/cancelled``), ``crash``
(the process dies mid-call), ``garbage`` (writes non-JSON-RPC lines to stdout),
``freeze`` (blocks the whole server), ``big`` (a large output), ``env`` (one environment
variable), ``image`` (an image block that is no real image), ``photo`` (a real
PNG) and ``redefine`` (changes ``add``'s schema
and drops ``big``, then sends ``tools/list_changed``). Every call is appended to
``STATE_DIR/calls`` so a test can see what ran.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

STATE = Path(sys.argv[1])
server: MCPServer = MCPServer("files", version="1.2.3")


def _log(line: str) -> None:
    with (STATE / "calls").open("a") as fh:
        fh.write(line + "\n")


@server.tool(description="Read a file of the state directory.")
def read(path: str) -> str:
    _log(f"read {path}")
    return (STATE / path).read_text()


@server.tool(description="Write a file of the state directory.")
def write(path: str, text: str) -> str:
    _log(f"write {path}")
    (STATE / path).write_text(text)
    return f"wrote {len(text)} characters"


@server.tool(description="Add two numbers.")
def add(a: float, b: float) -> dict[str, float]:
    return {"result": a + b}


@server.tool(description="Sleep, then answer.")
async def slow(seconds: float) -> str:
    _log("slow started")
    try:
        await asyncio.sleep(seconds)
    except BaseException:
        _log("slow cancelled")
        (STATE / "cancelled").write_text("yes")
        raise
    return "slept"


@server.tool(description="Die in the middle of the call.")
def crash() -> str:
    _log("crash")
    os._exit(3)


@server.tool(description="Write a line that is not JSON-RPC to stdout, then answer.")
def garbage() -> str:
    os.write(1, b"this is not json-rpc\n{\"jsonrpc\": \"2.0\", \"bogus\": }\n")
    return "after garbage"


@server.tool(description="Answer so that garbling_proxy.py floods stdout first.")
def flood() -> str:
    return "after flood"


@server.tool(description="Block the whole server (its event loop) for a while.")
async def freeze(seconds: float) -> str:
    _log("freeze")
    time.sleep(seconds)  # noqa: ASYNC251 — blocking the server's event loop is the point
    return "thawed"


@server.tool(description="A large output.")
def big(n: int) -> str:
    return "x" * n


@server.tool(description="One environment variable.")
def env(name: str) -> str:
    return os.environ.get(name, "<unset>")


@server.tool(description="A tiny PNG.")
def image() -> list[object]:
    from mcp.types import ImageContent, TextContent

    png = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
    return [TextContent(type="text", text="a picture"),
            ImageContent(type="image", data=png, mime_type="image/png")]


@server.tool(description="A real 3x2 PNG (also written to STATE_DIR/photo.png).")
def photo() -> list[object]:
    import io

    from mcp.types import ImageContent, TextContent
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(out, "PNG")
    (STATE / "photo.png").write_bytes(out.getvalue())
    return [TextContent(type="text", text="a red picture"),
            ImageContent(type="image", data=base64.b64encode(out.getvalue()).decode(),
                         mime_type="image/jpeg")]  # a wrong type on purpose: the bytes decide


@server.tool(description="Change add's schema, drop big, and say so.")
async def redefine(ctx: Context) -> str:
    server.remove_tool("add")
    server.remove_tool("big")

    def add(a: float, b: float, c: float = 0) -> dict[str, float]:
        return {"result": a + b + c}

    server.add_tool(add, description="Add two or three numbers.")
    await ctx.session.send_tool_list_changed()
    return "redefined"


if __name__ == "__main__":
    transport = sys.argv[2] if len(sys.argv) > 2 else "stdio"
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
