"""Fixtures for engine tests: a real engine per test on a temp data dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engine_harness import Harness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path / "data")
    yield h
    if h.store is not None and h._stack is not None:
        await h.stop()
