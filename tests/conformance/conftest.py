"""Fixtures: a real daemon subprocess on ephemeral ports, and clients of each kind."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from palyra.testing.spawn import DaemonProcess

from .clients import ADMIN_TOKEN, CONNECTOR_TOKEN, KINDS, Client, Identity, open_client

OpenClient = Callable[..., Awaitable[Client]]


def daemon_env() -> dict[str, str]:
    """A clean environment: fixed tokens, the scripted model slowed a little so
    live runs can be watched, joined and interrupted mid-flight."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env.update({
        "PALYRA_ADMIN_TOKEN": ADMIN_TOKEN,
        "PALYRA_CONNECTOR_TOKENS": CONNECTOR_TOKEN,
        "PALYRA_PROVIDER_SCRIPTED_DELAY_S": "0.02",
    })
    return env


@pytest.fixture(scope="module", params=("lmdb", "postgres"))
def daemon(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[DaemonProcess]:
    """One daemon shared by a module's scenarios (each uses its own session), once with
    its journal in LMDB and once in a fresh database of a real PostgreSQL server."""
    env = daemon_env()
    if request.param == "postgres":
        server = request.getfixturevalue("postgres_server")
        env.update({"PALYRA_JOURNAL_BACKEND": "postgres",
                    "PALYRA_JOURNAL_DSN": server.create_database()})
    with DaemonProcess(tmp_path_factory.mktemp("conformance") / "data", env=env) as proc:
        yield proc
    assert proc.proc is not None and proc.proc.returncode == 0, proc.log()[-3000:]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which client the scenario runs through."""
    return str(request.param)


@pytest.fixture
async def connect(daemon: DaemonProcess) -> AsyncIterator[OpenClient]:
    """``await connect(kind, principal=..., token=...)`` → a client closed at teardown."""
    opened: list[Client] = []

    async def _open(kind: str, *, principal: str = "user:conformance", token: str = ADMIN_TOKEN,
                    device_id: str = "01J00000000000000000000000",
                    target: DaemonProcess | None = None) -> Client:
        proc = target or daemon
        client = await open_client(kind, grpc_port=proc.grpc_port, http_port=proc.http_port,
                                   identity=Identity(token, principal, device_id))
        opened.append(client)
        return client

    yield _open
    for client in opened:
        await client.aclose()


@pytest.fixture
def fresh_daemon_dir(tmp_path: Path) -> Path:
    """A data dir for a scenario that needs its own daemon (restart)."""
    return tmp_path / "data"
