"""``[[tools.mcp]]``: one of the user's own MCP tool servers."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType

from palyra.core.capabilities import Capability

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_CAPABILITIES = frozenset(c.value for c in Capability)


@dataclasses.dataclass(frozen=True, slots=True)
class McpServerConfig:
    """How to reach one MCP server, and how much to trust its tools.

    Exactly one of ``command`` (stdio: the daemon starts the server, supervises
    it and restarts it with backoff) or ``url`` (streamable HTTP) is set.

    Attributes:
        name: Short name; its tools are registered as ``mcp.<name>.<tool>``.
        command: Program to start (stdio).
        args: Its arguments.
        env: Extra environment of the server (the SDK's small default
            environment otherwise: the daemon's secrets are not passed on).
        cwd: Its working directory ("" for the daemon's).
        url: The server's streamable HTTP endpoint.
        header: Name of a header sent with every HTTP request (e.g.
            ``Authorization``), whose value is read from ``header_env``.
        header_env: Environment variable holding that header's value (a secret
            stays out of the config file).
        capabilities: Capabilities of every tool of the server. Empty (the
            default) means unknown, and unknown is sensitive: each call needs
            an approval unless a posture says otherwise.
        tool_capabilities: Per tool (the server's own name), overriding
            ``capabilities``: e.g. ``{ read = ["read_only"] }``.
        timeout_s: Limit of one call (the run's remaining time may be less).
        max_output_bytes: A result larger than this is refused as a failure.
        max_message_bytes: Stdio: the longest line (one JSON-RPC message) read
            from the server; a longer one ends the connection (the server is
            restarted), so a server cannot grow the daemon's memory.
        connect_timeout_s: How long start-up waits for the first listing;
            the server keeps being retried in the background after that.
        ping_interval_s: How often an idle connection is checked (a hung or
            dead server is reconnected).
        restart_initial_s: First delay before reconnecting; doubles per
            failure up to ``restart_max_s``.
        restart_max_s: Longest delay between reconnection attempts.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    cwd: str = ""
    url: str = ""
    header: str = ""
    header_env: str = ""
    capabilities: tuple[str, ...] = ()
    tool_capabilities: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))
    timeout_s: float = 60.0
    max_output_bytes: int = 256 * 1024
    max_message_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 10.0
    ping_interval_s: float = 15.0
    restart_initial_s: float = 0.5
    restart_max_s: float = 30.0

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"MCP server name {self.name!r} must match {_NAME.pattern}")
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: set exactly one of command or url")
        if bool(self.header) != bool(self.header_env):
            raise ValueError(f"MCP server {self.name!r}: header and header_env go together")
        for caps in (self.capabilities, *self.tool_capabilities.values()):
            unknown = sorted(set(caps) - _CAPABILITIES)
            if unknown:
                raise ValueError(f"MCP server {self.name!r}: unknown capability {unknown[0]!r}")
        if min(self.timeout_s, self.max_output_bytes, self.max_message_bytes) <= 0:
            raise ValueError(f"MCP server {self.name!r}: limits must be positive")

    def capabilities_of(self, tool: str) -> frozenset[Capability]:
        """The capabilities the config grants the server's tool ``tool``."""
        caps = self.tool_capabilities.get(tool, self.capabilities)
        return frozenset(Capability(c) for c in caps)
