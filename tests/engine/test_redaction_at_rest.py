"""Secrets never reach an entity row (REFERENCE Part B 10; §4 redaction).

The journal redacts tape payloads; the engine redacts the same text in the
``runs`` and ``approvals`` rows. The approval stays bound to the exact call
through ``args_digest`` (computed before redaction), the tool runs live with
the exact arguments, and a call whose arguments lost a secret to redaction is
refused after a restart instead of running with ``<redacted>``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lmdb
from engine_harness import ADMIN, USER, Harness, next_approval
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, ask, recording_tool, reply, tool_results_since_user

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import ModelRequest, ModelResponse
from palyra.tools import args_digest

SK_INPUT = "sk-proj-INPUTaaaaaaaaaaaaaaaa"
BEARER_INPUT = "inputBEARERtoken1234567890"
SK_QUEUED = "sk-proj-QUEUEDqqqqqqqqqqqqqq"
SK_ARGS = "sk-proj-ARGSbbbbbbbbbbbbbbbbbb"
SK_REPLY = "sk-proj-REPLYcccccccccccccccc"
BEARER_REPLY = "replyBEARERtoken0987654321"
SK_ERROR = "sk-proj-ERRORddddddddddddddddd"
REASON_SECRET = "REASONsecretvalue42"
SECRETS = (SK_INPUT, BEARER_INPUT, SK_QUEUED, SK_ARGS, SK_REPLY, BEARER_REPLY, SK_ERROR,
           REASON_SECRET)
TOOL = "vault.use"
ARGS = {"text": f"use {SK_ARGS} now"}


def _planner(args: dict[str, str]) -> Callable[[ModelRequest], ModelResponse]:
    """Call ``TOOL`` with ``args``, then reply with secrets; ``explode`` fails."""
    def plan(request: ModelRequest) -> ModelResponse:
        user = [m for m in request.messages if m.role == "user"][-1].content
        if "explode" in user:
            raise PalyraError(f"upstream rejected key {SK_ERROR}",
                              code=ErrorCode.PROVIDER_UNAVAILABLE)
        if "queued" in user:
            return reply("ok")
        if tool_results_since_user(request):
            return reply(f"done with {SK_REPLY}; header Authorization: Bearer {BEARER_REPLY}")
        return ask((TOOL, args))
    return plan


def _all_lmdb_bytes(data_dir: Path) -> list[bytes]:
    """Every key and value of every named DB, read through a read-only env."""
    [path] = {p.parent for p in data_dir.rglob("data.mdb")}
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=64, subdir=True)
    out: list[bytes] = []
    try:
        with env.begin() as txn:
            names = [bytes(k) for k, _ in txn.cursor()]
        assert {b"runs", b"approvals", b"sessions"} <= set(names), names
        for name in names:
            db = env.open_db(name, create=False)
            with env.begin(db=db) as txn:
                for key, value in txn.cursor():
                    out += [bytes(key), bytes(value)]
    finally:
        env.close()
    return out


async def _start(harness: Harness, seen: list[tuple[str, str]],
                 args: dict[str, str] = ARGS) -> tuple[PalyraApp, str]:
    provider = PlannedProvider(_planner(args))
    harness.provider_factory = lambda: provider
    harness.extra_tools = (recording_tool(TOOL, seen),)
    app = await harness.start()
    session = (await app.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="secrets"))).session
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=session.session_id, tool_name=TOOL, posture=pb.ToolPosture.ASK_EACH_TIME))
    return app, session.session_id


async def test_no_secret_in_any_entity_row(harness: Harness) -> None:
    seen: list[tuple[str, str]] = []
    app, _ = await _start(harness, seen)
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="secrets", input=pb.MessageInput(
            text=f"use {SK_INPUT} and Authorization: Bearer {BEARER_INPUT}")))
    run_id = created.run.run_id
    approval = await next_approval(app, run_id)
    # The row holds redacted arguments, yet the digest binds the exact ones.
    assert SK_ARGS not in approval.args_json and "<redacted>" in approval.args_json
    assert SK_ARGS not in approval.prompt.summary
    assert approval.args_digest == args_digest(TOOL, ARGS)
    # An input queued behind the approval is durable, and stored redacted.
    sent = await app.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run_id, input=pb.MessageInput(text=f"queued {SK_QUEUED}")))
    assert sent.run.run_id == run_id
    row = harness.store.get_entity("runs", run_id)  # type: ignore[union-attr]
    assert row is not None and b"queued <redacted>" in row and SK_QUEUED.encode() not in row
    decided = await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
        reason=f"fine, token={REASON_SECRET}"))
    assert REASON_SECRET not in decided.approval.reason
    done = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id,
                                                               wait=True))).run
    assert done.state == pb.RunState.DONE
    # Live, the tool ran with the exact arguments.
    assert seen == [(TOOL, ARGS["text"])]
    got = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
    assert got.final_text == "ok"  # the queued input's answer is the last one
    replies = [m.reply_text for m in harness.members(run_id) if isinstance(m, pb.MessageReplied)]
    assert replies[0].startswith("done with <redacted>") and SK_REPLY not in replies[0]

    failed = await app.create_run(USER, pb.CreateRunRequest(
        session_key="secrets", input=pb.MessageInput(text="explode"), complete=True,
        wait=True))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=failed.run.run_id, wait=True))).run
    assert run.state == pb.RunState.FAILED and run.last_error is not None
    assert SK_ERROR not in run.last_error.message and "<redacted>" in run.last_error.message

    await harness.stop()
    blobs = _all_lmdb_bytes(harness.data_dir)
    leaks = {s for s in SECRETS for blob in blobs if s.encode() in blob}
    assert leaks == set()
    # Not even in a freed page: no version of any row or event ever held one.
    raw = b"".join(p.read_bytes() for p in harness.data_dir.rglob("*.mdb"))
    assert {s for s in SECRETS if s.encode() in raw} == set()


async def test_final_text_row_is_redacted(harness: Harness) -> None:
    harness.provider_factory = lambda: PlannedProvider(
        lambda r: reply(f"here: {SK_REPLY} Authorization: Bearer {BEARER_REPLY}"))
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text="hi"), complete=True, wait=True))
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))).run
    assert run.state == pb.RunState.DONE
    assert run.final_text == "here: <redacted> Authorization: <redacted>"
    assert created.run.final_text == run.final_text


async def test_redacted_args_are_refused_after_restart(harness: Harness) -> None:
    seen: list[tuple[str, str]] = []
    app, _ = await _start(harness, seen)
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="secrets", input=pb.MessageInput(text="go"), complete=True))
    run_id = created.run.run_id
    waiting = await next_approval(app, run_id)
    app = await harness.restart()
    approval = await next_approval(app, run_id)
    assert approval.approval_id == waiting.approval_id
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    # The approved call was not run with "<redacted>" for the secret: refused,
    # and the model heard why (then answered as usual).
    assert seen == []
    results = [m for m in harness.members(run_id) if isinstance(m, pb.ToolResult)]
    assert len(results) == 1 and not results[0].success
    assert results[0].error.startswith("denied:") and "redacted" in results[0].error
    assert run.state == pb.RunState.DONE
    harness.check_tape(run_id)


async def test_exact_args_survive_restart_and_run(harness: Harness) -> None:
    # Control: arguments without a secret are stored exactly, so the recovered
    # call runs after the restart as it would have before.
    seen: list[tuple[str, str]] = []
    app, _ = await _start(harness, seen, {"text": "nothing secret"})
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="secrets", input=pb.MessageInput(text="go"), complete=True))
    await next_approval(app, created.run.run_id)
    app = await harness.restart()
    approval = await next_approval(app, created.run.run_id)
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    assert seen == [(TOOL, "nothing secret")] and run.state == pb.RunState.DONE


async def _one(request: pb.RunStreamRequest):  # type: ignore[no-untyped-def]
    yield request


async def test_live_followers_get_the_redacted_event_not_the_engines_member(
        harness: Harness) -> None:
    """Live followers are handed the engine's own member only when redaction changed
    nothing; a member that held a secret reaches them as stored: redacted."""
    provider = PlannedProvider(lambda request: reply(f"done with {SK_REPLY}"))
    harness.provider_factory = lambda: provider
    app = await harness.start()
    streamed: list[pb.TapeEvent] = []
    async for response in app.run_stream(USER, _one(pb.RunStreamRequest(
            v=1, batch=True, input=pb.MessageInput(text=f"here is {SK_INPUT}")))):
        streamed += response.events
    wire = b"".join(bytes(e) for e in streamed)
    assert SK_INPUT.encode() not in wire and SK_REPLY.encode() not in wire
    replies = [e.message_replied.reply_text for e in streamed if e.message_replied]
    assert replies and all("<redacted>" in r for r in replies)
    # The same events, read back from the store, are what the live stream showed.
    run_id = streamed[0].run_id
    stored = await app.list_run_tape(USER, pb.ListRunTapeRequest(run_id=run_id,
                                                                    after_seq=-1))
    assert [bytes(e) for e in stored.events] == [bytes(e) for e in streamed]
