"""Snapshot of the public surface of palyra.tools."""

from __future__ import annotations

import palyra.tools as tools


def test_exports_snapshot() -> None:
    # The literal list is the snapshot: adding or removing an export shows up here.
    assert tools.__all__ == [
        "ADD",
        "ATTESTATION_DOMAIN",
        "BLOCKED_COMPONENTS",
        "BUILTIN_TOOLS",
        "ECHO",
        "FS_APPLY_PATCH",
        "FS_LIST",
        "FS_READ",
        "FS_WRITE",
        "HTTP_FETCH",
        "MEMORY_SEARCH",
        "PROCESS_RUN",
        "SENSITIVE_CAPABILITIES",
        "TIME_NOW",
        "Capability",
        "MemorySearchHook",
        "SandboxConfig",
        "ToolContext",
        "ToolError",
        "ToolImage",
        "ToolOutput",
        "ToolRegistry",
        "ToolResult",
        "ToolSpec",
        "ToolsConfig",
        "args_digest",
        "attest",
        "canonical_args_json",
        "cap_output",
        "default_registry",
        "is_sensitive",
        "resolve_in_workspace",
    ]
    assert all(hasattr(tools, name) for name in tools.__all__)
    assert {t.name for t in tools.BUILTIN_TOOLS} == {
        "add",
        "echo",
        "time.now",
        "memory.search",
        "fs.read",
        "fs.list",
        "fs.write",
        "fs.apply_patch",
        "http.fetch",
        "process.run",
    }
