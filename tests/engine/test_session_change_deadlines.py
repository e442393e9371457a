"""A session change handed to its owner lands only if its asker is still waiting for it.

Two engines on one real PostgreSQL server. The asker waits 2 x TTL + 5 s for the owner's
answer and then tells its client ``UNAVAILABLE``: from then on the change must never
land. The owner's commit and the asker's give-up are each a compare-and-set on the
change's row, so only one of them lands; and an owner drops a row past its deadline
(on the database's clock), since an asker that died cannot give up. Before, the row
stayed and landed whenever an owner got to it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_harness import USER, Harness
from lease_daemons import busy_on, started, until
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine.sessions.handover import SessionChange, change_draft
from palyra.journal import JournalStore


def _postures(store: JournalStore | None, session_id: str) -> list[str]:
    assert store is not None
    return [str(e.payload["tool_name"]) for e in store.read_session(session_id, 0, 1000)
            if e.kind == "session.tool_posture"]


def _rows(store: JournalStore | None) -> list[str]:
    assert store is not None
    return [key for key, _raw in store.scan_entities("meta", "session_", "", 10)]


def _posture(session_id: str, tool: str) -> pb.SetToolPostureRequest:
    return pb.SetToolPostureRequest(session_id=session_id, tool_name=tool,
                                    posture=pb.ToolPosture.DISABLED)


async def test_a_change_whose_asker_gave_up_never_lands(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    # A short lease: B gives up after 2 x 1 + 5 s.
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=1)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=1)
    sid = (await busy_on(app_a)).session_id  # A owns the session while its run is live
    assert a.engine is not None
    # A's inbox reader reads B's change and then stalls on the session's lock (a slow
    # owner) until B has given up and told its client so.
    async with a.engine.session_writer.hold(sid):
        with pytest.raises(PalyraError) as gave_up:
            await app_b.set_tool_posture(USER, _posture(sid, "shell"))
        assert gave_up.value.code is ErrorCode.UNAVAILABLE
    # A goes on with the change it read: its commit finds the row gone and writes
    # nothing. A later change, applied after it by the same reader, shows it is done.
    later = await app_b.set_tool_posture(USER, _posture(sid, "add"))
    assert dict(later.session.tool_postures) == {"add": pb.ToolPosture.DISABLED}
    assert _postures(a.store, sid) == ["add"]  # the given-up change never landed
    assert _rows(a.store) == []


async def test_a_change_past_its_deadline_is_dropped_by_the_owner(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, _app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    sid = (await busy_on(app_a)).session_id
    assert a.engine is not None and b.store is not None
    record = a.engine.session_reader.get(sid)
    assert record is not None
    # B handed the change over and died before its deadline came: it cannot give up.
    change = SessionChange(new_ulid(), sid, record.identity, "posture", tool_name="shell",
                           posture="disabled", deadline_ms=1)
    await b.store.append([change_draft(change)])
    await until(lambda: _rows(a.store) == [])  # A's inbox reader took the row
    assert _postures(a.store, sid) == []  # dropped, not applied, and not answered
    assert a.store is not None
    assert [e.kind for e in a.store.read_session(sid, 0, 1000)
            if e.kind.startswith("session.change")] == ["session.change_relayed",
                                                         "session.change_dropped"]
