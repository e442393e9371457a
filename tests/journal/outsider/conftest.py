"""Journals shared by the outsider tests (built once per session; tests tamper with copies)."""

from __future__ import annotations

import asyncio
import tarfile
from pathlib import Path

import pytest

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
    with tarfile.open(FIXTURES / "journal-v1.tar.gz") as tar:
        tar.extractall(d, filter="data")
    return d


