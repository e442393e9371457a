"""The built-in tool set and its configuration."""

from __future__ import annotations

import dataclasses
from typing import Any

from palyra.tools._builtin_basic import ADD, ECHO, MEMORY_SEARCH, TIME_NOW
from palyra.tools._builtin_fs import FS_LIST, FS_READ, FS_WRITE
from palyra.tools._builtin_http import HTTP_FETCH
from palyra.tools._builtin_process import PROCESS_RUN
from palyra.tools._registry import ToolRegistry
from palyra.tools._spec import ToolSpec


@dataclasses.dataclass(frozen=True, slots=True)
class ToolsConfig:
    """Which built-in tools exist.

    Attributes:
        process_exec_enabled: Register ``process.run``. Off by default; the
            policy gate must be told the same (``PolicyConfig``) for calls to
            be allowed.
        disabled: Names of built-in tools not to register at all.
    """

    process_exec_enabled: bool = False
    disabled: frozenset[str] = frozenset()


BUILTIN_TOOLS: tuple[ToolSpec[Any], ...] = (
    ADD,
    ECHO,
    TIME_NOW,
    MEMORY_SEARCH,
    FS_READ,
    FS_LIST,
    FS_WRITE,
    HTTP_FETCH,
    PROCESS_RUN,
)


def default_registry(config: ToolsConfig | None = None) -> ToolRegistry:
    """A registry with the built-in tools that ``config`` enables."""
    config = config or ToolsConfig()
    return ToolRegistry(
        tool
        for tool in BUILTIN_TOOLS
        if tool.name not in config.disabled
        and (tool is not PROCESS_RUN or config.process_exec_enabled)
    )
