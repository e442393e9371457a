"""Shared set-up for the benchmark's own tests.

``bench/`` is a repo-root package, not part of the installed wheel, so the repo
root is put on ``sys.path`` here (``pytest`` as a console script does not add the
working directory the way ``python -m pytest`` does). This folder has no
``__init__.py`` on purpose: as a package it would be importable as ``bench``
and shadow the real one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import flushes  # noqa: E402


@pytest.fixture
def perf_available() -> None:
    """Skip (saying why) where perf cannot count syscalls; the bench then reports "not counted"."""
    reason = flushes.unavailable_reason()
    if reason is not None:
        pytest.skip(f"flush counting unavailable here: {reason}")
