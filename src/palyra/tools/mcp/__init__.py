"""The user's own tools over the Model Context Protocol (the official ``mcp`` SDK).

``palyra.tools.mcp.hub.McpHub(registry, configs)``, an async context manager,
starts every configured server (stdio or streamable HTTP), registers their tools
as ``mcp.<server>.<tool>`` and keeps them current; leaving it stops them. The
tools then go through the same registry, policy, approvals, attestation and
journal as the built-ins. Only the config is imported here, so loading the
config does not load the SDK; the composition root imports ``hub``.
"""

from palyra.tools.mcp.config import McpServerConfig

__all__ = ["McpServerConfig"]
