"""The tool-loop's ``add`` served by an MCP server written with the official SDK
(``python -m bench tool-loop --tool mcp`` starts it over stdio)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server: MCPServer = MCPServer("bench", version="1")


@server.tool(description='Add two numbers; returns {"result": a + b}.')
def add(a: float, b: float) -> dict[str, float]:
    return {"result": a + b}


if __name__ == "__main__":
    server.run("stdio")
