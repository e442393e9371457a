"""Fixtures: a real local HTTP server speaking the vendor APIs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_vendor import FakeVendor, serve_fake_vendor


@pytest.fixture(scope="module")
def vendor() -> Iterator[tuple[str, FakeVendor]]:
    """(base_url, app) of a fake vendor server shared by a test module."""
    with serve_fake_vendor() as served:
        yield served
