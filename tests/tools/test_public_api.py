"""Snapshot of the public surface of palyra.tools."""

from __future__ import annotations

import palyra.tools as tools


def test_exports_snapshot() -> None:
    assert len(set(tools.__all__)) == len(tools.__all__)
    assert all(hasattr(tools, name) for name in tools.__all__)
    assert {t.name for t in tools.BUILTIN_TOOLS} == {
        "add",
        "echo",
        "time.now",
        "memory.search",
        "fs.read",
        "fs.list",
        "fs.write",
        "http.fetch",
        "process.run",
    }
