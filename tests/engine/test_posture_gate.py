"""Letting a sensitive tool run without approval is an operator's decision (issue 12, item 5).

Through the app, the engine and the real Cedar gate: a plain user may make any
tool stricter and may relax a read-only one, but ``always_allow`` on a sensitive
tool (process.run, http.fetch) or an unknown one is refused; an operator may.
"""

from __future__ import annotations

import pytest
from engine_harness import ADMIN, USER, Harness
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError

ALLOW, ASK = pb.ToolPosture.ALWAYS_ALLOW, pb.ToolPosture.ASK_EACH_TIME


async def _set(app: object, ctx: object, session_id: str, tool: str,
               posture: pb.ToolPosture) -> pb.Session:
    answer = await app.set_tool_posture(ctx, pb.SetToolPostureRequest(  # type: ignore[attr-defined]
        session_id=session_id, tool_name=tool, posture=posture))
    assert answer.session is not None
    return answer.session


async def test_users_cannot_wave_sensitive_tools_through(harness: Harness) -> None:
    app = await harness.start()
    mine = (await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="u"))).session
    assert mine is not None
    for tool in ("process.run", "http.fetch", "no.such.tool"):
        with pytest.raises(PalyraError) as err:
            await _set(app, USER, mine.session_id, tool, ALLOW)
        assert err.value.code is ErrorCode.PERMISSION_DENIED, tool
        assert "an operator may" in err.value.message
        stricter = await _set(app, USER, mine.session_id, tool, ASK)
        assert stricter.tool_postures[tool] == ASK
    relaxed = await _set(app, USER, mine.session_id, "add", ALLOW)  # read-only: harmless
    assert relaxed.tool_postures["add"] == ALLOW
    cleared = await _set(app, USER, mine.session_id, "http.fetch", pb.ToolPosture.UNSPECIFIED)
    assert "http.fetch" not in cleared.tool_postures


async def test_operators_may(harness: Harness) -> None:
    app = await harness.start()
    ops = (await app.resolve_session(ADMIN, pb.ResolveSessionRequest(session_key="o"))).session
    assert ops is not None
    session = await _set(app, ADMIN, ops.session_id, "http.fetch", ALLOW)
    assert session.tool_postures["http.fetch"] == ALLOW
