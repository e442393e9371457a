"""Suite-wide test configuration.

Hypothesis profiles (CONVENTIONS 12): ``dev`` (default, quick), ``ci`` (derandomized,
no example database, so a CI run is reproducible) and ``debug`` (verbose). CI sets
``CI=true``, which selects ``ci`` unless ``HYPOTHESIS_PROFILE`` says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Verbosity, settings

from palyra.testing.postgres import PostgresServer

settings.register_profile(
    "dev",
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("debug", max_examples=10, deadline=None, verbosity=Verbosity.verbose)

_default = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on loopback for the whole run (started on first use)."""
    with PostgresServer() as server:
        yield server
