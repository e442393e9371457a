"""Two engines on one PostgreSQL journal whose own clocks disagree by an hour.

An approval's expiry and a run's last activity are stamped by one daemon and judged by
another once it takes the session over. Both engines read them on the database's clock,
so the one whose clock runs an hour behind stamps what the other judges right: its
approval does not expire the moment the other takes the run over.
"""

from __future__ import annotations

from pathlib import Path

from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from lease_daemons import pg_daemon, until
from palyra_gen.palyra import v1 as pb

from palyra.core.clock import wall_ms
from palyra.engine.model.records import RUNS, RunRecord, decode

HOUR_MS = 3_600_000


async def test_a_daemon_an_hour_behind_stamps_approvals_and_activity_on_the_databases_clock(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    a.now_ms = lambda: wall_ms() - HOUR_MS  # its clock runs an hour behind
    app_a = await a.start()
    resolved = await app_a.resolve_session(USER, pb.ResolveSessionRequest(session_key="hitl"))
    await app_a.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    run = (await app_a.create_run(USER, pb.CreateRunRequest(
        session_key="hitl", input=pb.MessageInput(text=loop_text(1)), complete=True))).run
    asked = await next_approval(app_a, run.run_id)
    # Stamped on the database's clock (the server runs here: it reads about the wall's).
    assert abs(asked.created_at_unix_ms - wall_ms()) < 60_000
    assert abs(asked.expires_at_unix_ms - (wall_ms() + 30_000)) < 60_000
    assert a.store is not None
    row = a.store.get_entity(RUNS, run.run_id)
    assert row is not None and abs(decode(RunRecord, row).last_active_ms - wall_ms()) < 60_000
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=1.5)
    app_b = await b.start()
    await a.stop()  # hands its sessions over: B takes the run and judges the approval
    assert b.engine is not None
    await until(b.engine.live_runs)
    approval = (await app_b.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=asked.approval_id))).approval
    assert approval.state == pb.ApprovalState.PENDING  # not expired an hour ago
    await app_b.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=asked.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE, reason="b"))
    await until(lambda: (r := b.engine.get_run(USER.identity, run.run_id)) is not None  # type: ignore[union-attr]
                and r.state == "done", 10)
    b.check_tape(run.run_id)
