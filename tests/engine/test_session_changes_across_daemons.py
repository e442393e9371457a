"""A change to a session outside a run, with several daemons on one PostgreSQL journal.

Only the session's owner writes it: a daemon that does not hold the session's lease
claims it for the change (reading what other daemons wrote first) or, while another
live daemon owns the session, is refused retryably and writes nothing, so it never
overwrites the owner's writes (before, it wrote unfenced: last writer won).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_harness import USER, Harness
from lease_daemons import busy_on, holder, owner_of, pg_daemon, until
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalStore


def _postures(store: JournalStore | None, session_id: str) -> list[dict[str, object]]:
    assert store is not None
    return [dict(e.payload) for e in store.read_session(session_id, 0, 1000)
            if e.kind == "session.tool_posture"]


def _posture(session_id: str, tool: str, posture: pb.ToolPosture) -> pb.SetToolPostureRequest:
    return pb.SetToolPostureRequest(session_id=session_id, tool_name=tool, posture=posture)


async def test_a_change_on_a_daemon_not_owning_the_session_never_overwrites_the_owner(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    app_a = await a.start()
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    app_b = await b.start()
    busy = await busy_on(app_a)  # A owns the session while its run is live
    sid = busy.session_id
    await app_a.set_tool_posture(USER, _posture(sid, "add", pb.ToolPosture.ALWAYS_ALLOW))
    with pytest.raises(PalyraError) as refused:  # B does not own it: nothing written
        await app_b.set_tool_posture(USER, _posture(sid, "add", pb.ToolPosture.DISABLED))
    assert refused.value.code is ErrorCode.UNAVAILABLE and refused.value.retryable
    assert _postures(a.store, sid) == [{"tool_name": "add", "posture": "always_allow"}]
    # The owner's run ends and the session is free: B's retry claims it, reads the
    # owner's change first, and lands beside it.
    await app_a.complete_run(USER, pb.CompleteRunRequest(run_id=busy.run_id, wait=True))
    await until(lambda: holder(a, sid) == ("", 1, False))
    changed = await app_b.set_tool_posture(USER, _posture(sid, "shell",
                                                          pb.ToolPosture.DISABLED))
    assert changed.session.tool_postures == {"add": pb.ToolPosture.ALWAYS_ALLOW,
                                             "shell": pb.ToolPosture.DISABLED}
    row = holder(b, sid)  # B held the session for the change, then let it go settled
    assert row == ("", 2, False), (row, owner_of(b))
