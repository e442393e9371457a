"""Shared helpers for the codegen tests.

``codegen/`` is a repo-root package, not part of the installed wheel, so the repo
root is put on ``sys.path`` here (``pytest`` as a console script does not add the
working directory the way ``python -m pytest`` does).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SPEC = REPO_ROOT / "spec"
GENERATED = REPO_ROOT / "generated"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "specs"


@pytest.fixture
def spec_copy(tmp_path: Path) -> Callable[[str | None], Path]:
    """Factory: a temp copy of ``spec/``, optionally with a fixture overlay applied."""

    def make(overlay: str | None = None) -> Path:
        root = tmp_path / "spec"
        shutil.copytree(SPEC, root)
        if overlay is not None:
            shutil.copytree(FIXTURES / overlay, root, dirs_exist_ok=True)
        return root

    return make
