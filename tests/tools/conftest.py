"""Fixtures: a workspace directory and an execution context."""

from __future__ import annotations

from pathlib import Path

import pytest

from palyra.tools import ToolContext


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello notes")
    (root / "sub").mkdir()
    (root / "sub" / "a.txt").write_text("A")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]")
    (tmp_path / "outside.txt").write_text("secret")
    return root


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace_dir=workspace, session_id="S1", run_id="R1")
