"""How many network round trips one commit of the PostgreSQL writer costs.

Every daemon's commits serialise on the head row, so each round trip a commit
waits for, while holding that row, is time no other commit can use. The writer
pipelines its transaction (``postgres.writer``), and while it knows the head row it
commits in one statement without the lock (``postgres.head_cas``); this counts the
round trips of a steady-state commit through a real TCP relay between the writer and a
real server.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg

from palyra.journal import JournalConfig
from palyra.journal.postgres.kv import PostgresEnv
from palyra.journal.postgres.schema import migrate
from palyra.journal.postgres.writer import PostgresWriter
from palyra.journal.write.prepare import prepare
from palyra.journal.write.requests import Append
from palyra.testing.postgres import PostgresServer

from .helpers import draft

_FLUSH = b"H\x00\x00\x00\x04"
"""The protocol's Flush message: it asks for nothing new."""


class _Relay:
    """A loopback TCP relay that counts the client's flights: each time a connection's
    client sends after the server last spoke (or first), which is one round trip.

    A send of nothing but Flush messages is not a flight: psycopg's pipeline ends with
    Sync and Flush, and when the Flush leaves in a write of its own after the server has
    answered the Sync, nobody waits for it (counting it made the count flaky)."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self.flights = 0
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target_port)
        last = ["server"]

        def client_spoke(data: bytes) -> None:
            if data == _FLUSH * (len(data) // len(_FLUSH)):
                return
            if last[0] != "client":
                self.flights += 1
            last[0] = "client"

        def server_spoke(_data: bytes) -> None:
            last[0] = "server"

        async def pump(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, spoke: Callable[[bytes], None]
        ) -> None:
            try:
                while data := await r.read(65536):
                    spoke(data)
                    w.write(data)
                    await w.drain()
            except ConnectionError:
                pass
            finally:
                w.close()

        await asyncio.gather(pump(client_r, server_w, client_spoke),
                             pump(server_r, client_w, server_spoke))


async def _appended(writer: PostgresWriter, config: JournalConfig, i: int) -> None:
    loop = asyncio.get_running_loop()
    answer = loop.create_future()
    writer.submit(Append(loop, answer, prepare([draft(i, session_id="s", run_id="r",
                                                      tape=True)], config)))  # fmt: skip
    await answer


async def _flights_of(relay: _Relay, step: Callable[[], Awaitable[None]]) -> int:
    before = relay.flights
    await step()
    return relay.flights - before


async def _relayed_writer(tmp_path: Path, postgres_server: PostgresServer, dsn: str
                          ) -> tuple[_Relay, JournalConfig, PostgresEnv, PostgresWriter]:
    relay = _Relay(postgres_server.port)
    await relay.start()
    config = JournalConfig(backend="postgres",
                           dsn=dsn.replace(f":{postgres_server.port}/", f":{relay.port}/"))
    # Both connect (blocking) while this loop runs the relay: from a thread.
    env = await asyncio.to_thread(PostgresEnv, tmp_path / "data", config)
    writer = await asyncio.to_thread(PostgresWriter, env, 64, lambda _views: {},
                                     lambda: False)  # fmt: skip
    return relay, config, env, writer


async def _migrated(postgres_server: PostgresServer) -> str:
    dsn = postgres_server.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    return dsn


async def test_a_steady_commit_is_one_round_trip(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = await _migrated(postgres_server)
    relay, config, env, writer = await _relayed_writer(tmp_path, postgres_server, dsn)
    try:
        # The first commit takes the head row's lock and learns the session's and the
        # tape's heads (a read each).
        await _appended(writer, config, 0)
        # Then the writer knows the head row: the writes with the head's compare-and-set,
        # one statement.
        for i in range(1, 4):
            step = functools.partial(_appended, writer, config, i)
            assert await _flights_of(relay, step) == 1
        assert writer.head_misses == 0
    finally:
        await asyncio.to_thread(writer.stop)
        await asyncio.to_thread(env.close)
        await relay.stop()


async def test_a_commit_after_another_writers_takes_the_lock_once(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = await _migrated(postgres_server)
    relay, config, env, writer = await _relayed_writer(tmp_path, postgres_server, dsn)
    other_env = await asyncio.to_thread(PostgresEnv, tmp_path / "other",
                                        JournalConfig(backend="postgres", dsn=dsn))
    other = await asyncio.to_thread(PostgresWriter, other_env, 64, lambda _views: {},
                                    lambda: False)  # fmt: skip
    try:
        await _appended(writer, config, 0)
        await _appended(other, config, 1)  # another daemon moves the head row
        # The compare-and-set misses (nothing written), then the locked commit reads
        # the heads again and lands.
        await _appended(writer, config, 2)
        assert writer.head_misses == 1
        # Other daemons were seen committing: the next commit takes the lock (and finds
        # the head row as this writer left it), so the one after needs no lock again.
        assert await _flights_of(relay, functools.partial(_appended, writer, config, 3)) == 2
        assert await _flights_of(relay, functools.partial(_appended, writer, config, 4)) == 1
        assert writer.head_misses == 1
        with psycopg.connect(dsn) as conn:
            (next_position,) = conn.execute("SELECT next_position FROM journal_head").fetchone() or (0,)
        assert next_position == 6  # five events, one position each, none lost or doubled
    finally:
        await asyncio.to_thread(other.stop)
        await asyncio.to_thread(other_env.close)
        await asyncio.to_thread(writer.stop)
        await asyncio.to_thread(env.close)
        await relay.stop()
