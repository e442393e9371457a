"""Errors raised by the generator.

Two kinds, because the caller reacts differently: a ``SpecError`` is the spec
author's to fix (the message names the file and element), a ``ToolError`` means
a tool (protoc, a plugin, ruff, buf, git) failed or is missing.
"""

from __future__ import annotations

from collections.abc import Sequence


class CodegenError(Exception):
    """Base of every error the generator reports to the user (exit status 1)."""


class SpecError(CodegenError):
    """Raised when the spec breaks a rule; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class ToolError(CodegenError):
    """Raised when an external tool fails or cannot be found."""
