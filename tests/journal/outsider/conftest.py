"""Journals shared by the outsider tests (built once per session; tests tamper with copies)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from palyra.testing.archives import extract_tar

from .journals import (
    FIXED_OPS,
    FIXTURES,
    build_and_export,
)


@pytest.fixture(scope="session")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fixed")
    asyncio.run(build_and_export(d, FIXED_OPS, ["s1", "s2", "s3", ""]))
    return d


@pytest.fixture(scope="session")
def v1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("v1")
    extract_tar(FIXTURES / "journal-v1.tar.gz", d)
    return d


