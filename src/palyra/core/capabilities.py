"""Tool capabilities: what a tool may touch, which decides approval needs.

In ``core`` because two packages reason about them: ``tools`` declares them on
each tool, ``policy`` decides approval needs from them, and neither imports the
other.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Capability(enum.StrEnum):
    """What a tool can do. The policy gate sees these as strings."""

    READ_ONLY = "read_only"
    FILESYSTEM_WRITE = "filesystem_write"
    NETWORK = "network"
    PROCESS_EXEC = "process_exec"
    SECRETS_READ = "secrets_read"
    # Starts another agent's run: it spends the caller's budget and reaches that
    # agent's tools under that agent's postures.
    DELEGATE = "delegate"


SENSITIVE_CAPABILITIES: frozenset[str] = frozenset(
    {
        Capability.FILESYSTEM_WRITE,
        Capability.NETWORK,
        Capability.PROCESS_EXEC,
        Capability.SECRETS_READ,
        Capability.DELEGATE,
    }
)


def is_sensitive(capabilities: Iterable[str]) -> bool:
    """Whether a tool with these capabilities needs approval by default.

    A tool is sensitive if it has any sensitive capability, or if it does not
    declare ``read_only`` at all: undeclared means unknown, and unknown is
    treated as dangerous.
    """
    caps = frozenset(capabilities)
    return bool(caps & SENSITIVE_CAPABILITIES) or Capability.READ_ONLY not in caps
