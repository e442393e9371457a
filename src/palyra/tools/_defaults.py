"""The built-in tool set and its configuration."""

from __future__ import annotations

import dataclasses
from typing import Any

from palyra.tools._builtin_basic import ADD, ECHO, MEMORY_SEARCH, TIME_NOW
from palyra.tools._builtin_fs import FS_LIST, FS_READ, FS_WRITE
from palyra.tools._builtin_http import HTTP_FETCH, http_fetch_tool
from palyra.tools._builtin_patch import FS_APPLY_PATCH
from palyra.tools._builtin_process import PROCESS_RUN, process_run_tool
from palyra.tools._registry import ToolRegistry
from palyra.tools._sandbox import SandboxConfig
from palyra.tools._spec import ToolSpec
from palyra.tools.mcp.config import McpServerConfig


@dataclasses.dataclass(frozen=True, slots=True)
class ToolsConfig:
    """Which built-in tools exist.

    Attributes:
        process_exec_enabled: Register ``process.run``. Off by default; the
            policy gate must be told the same (``PolicyConfig``) for calls to
            be allowed.
        disabled: Names of built-in tools not to register at all.
        fetch_allow: Networks (CIDR, e.g. ``10.0.0.0/8``) ``http.fetch`` may reach
            besides public addresses; loopback, private, link-local and metadata
            addresses are refused unless listed here.
        sandbox: How ``process.run`` confines what it starts (``[tools.sandbox]``:
            tier a, b (the default: rlimits) or c (bubblewrap), limits).
        skills_dir: Where installed skills live ("" for ``<data_dir>/skills``;
            ``palyra skills`` manages it); each enabled skill's tools are
            registered as ``skill.<name>.<tool>``.
        skill_fuel: Wasmtime fuel per skill call (about one unit per instruction).
        skill_memory_bytes: Linear memory a skill call may use.
        skill_publisher_keys: Trusted publishers' ed25519 public keys (base64
            of the raw 32 bytes). When set, a skill loads only with a manifest
            signature one of them verifies.
        mcp: The user's MCP tool servers (``[[tools.mcp]]``), whose tools are
            registered as ``mcp.<server>.<tool>``.
    """

    process_exec_enabled: bool = False
    disabled: frozenset[str] = frozenset()
    fetch_allow: tuple[str, ...] = ()
    mcp: tuple[McpServerConfig, ...] = ()
    sandbox: SandboxConfig = dataclasses.field(default_factory=SandboxConfig)
    skills_dir: str = ""
    skill_fuel: int = 50_000_000
    skill_memory_bytes: int = 64 * 1024 * 1024
    skill_publisher_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [server.name for server in self.mcp]
        if len(set(names)) != len(names):
            raise ValueError("two [[tools.mcp]] servers have the same name")


BUILTIN_TOOLS: tuple[ToolSpec[Any], ...] = (
    ADD,
    ECHO,
    TIME_NOW,
    MEMORY_SEARCH,
    FS_READ,
    FS_LIST,
    FS_WRITE,
    FS_APPLY_PATCH,
    HTTP_FETCH,
    PROCESS_RUN,
)


def default_registry(config: ToolsConfig | None = None) -> ToolRegistry:
    """A registry with the built-in tools that ``config`` enables."""
    config = config or ToolsConfig()
    tools = [http_fetch_tool(config.fetch_allow) if tool is HTTP_FETCH else
             process_run_tool(config.sandbox) if tool is PROCESS_RUN else tool
             for tool in BUILTIN_TOOLS]
    return ToolRegistry(
        tool
        for tool in tools
        if tool.name not in config.disabled
        and (tool.name != PROCESS_RUN.name or config.process_exec_enabled)
    )
