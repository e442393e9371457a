"""The app fixture of the operations tests (helpers.py has the approval-run driver)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.app import PalyraApp
from palyra.journal import JournalStore
from palyra.testing.apps import scripted_app


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[tuple[PalyraApp, JournalStore]]:
    async with scripted_app(tmp_path / "data") as made:
        yield made
