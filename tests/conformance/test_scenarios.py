"""The conformance scenarios, each written once and run through every client.

A real ``palyra serve`` subprocess (ephemeral ports, tmp data dir) answers;
the ``kind`` fixture picks gRPC (grpclib), HTTP (httpx + SSE) or TypeScript
(connect-node under Node). Assertions see proto3 JSON only.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from palyra.testing.spawn import DaemonProcess

from .clients import ADMIN_TOKEN, CONNECTOR_TOKEN, CallFailed, Client, kind_of
from .conftest import OpenClient, daemon_env

pytestmark = [pytest.mark.conformance, pytest.mark.slow]

GATEWAY, APPROVALS = "GatewayService", "ApprovalsService"
TEXT = ("Start from 0 and add 1 to the running total {k} times, one add tool call per step, "
        "then reply with the final result.")
APPROVER = "admin:approver"
APPROVER_DEVICE = "01J0000000000000000000000A"


def seqs(events: list[dict[str, Any]]) -> list[int]:
    """Tape sequence numbers (proto3 JSON omits 0 and writes int64 as strings)."""
    return [int(e.get("tapeSeq", 0)) for e in events]


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e[_camel(kind)] for e in events if kind_of(e) == kind]


def _camel(kind: str) -> str:
    head, *rest = kind.split("_")
    return head + "".join(p.title() for p in rest)


def final_state(events: list[dict[str, Any]]) -> str:
    return str(of_kind(events, "status")[-1]["state"])


async def ask_each_time_run(client: Client, key: str, k: int) -> str:
    """Start a run whose every ``add`` call needs an approval; return its id."""
    session = (await client.call(GATEWAY, "ResolveSession", {"sessionKey": key}))["session"]
    await client.call(GATEWAY, "SetToolPosture", {
        "sessionId": session["sessionId"], "toolName": "add",
        "posture": "TOOL_POSTURE_ASK_EACH_TIME"})
    created = await client.call(GATEWAY, "CreateRun", {
        "sessionId": session["sessionId"], "input": {"text": TEXT.format(k=k)}, "complete": True})
    return str(created["run"]["runId"])


async def next_approval(client: Client, run_id: str, after_seq: int) -> tuple[list[dict[str, Any]], bool]:
    """Watch from ``after_seq`` up to the next approval request (or the end)."""
    result = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": after_seq},
                                 until=("tool_approval_request",))
    return result.events, result.ended


async def test_health(kind: str, connect: OpenClient) -> None:
    client = await connect(kind)
    health = await client.call(GATEWAY, "GetHealth", {}, headers={"authorization": ""})
    assert health["service"] == "palyra"
    assert len(health["journalHead"]) == 64


async def test_tool_loop_run(kind: str, connect: OpenClient) -> None:
    """RunStream (HTTP: one request in, SSE out): K tool steps, then ``result=K``."""
    client = await connect(kind, principal=f"user:loop-{kind}")
    result = await client.run_stream({"v": 1, "sessionKey": f"loop-{kind}",
                                      "input": {"text": TEXT.format(k=3)}})
    events = result.events
    assert result.ended
    assert seqs(events) == list(range(len(events)))  # dense from 0, each once
    assert [r["toolName"] for r in of_kind(events, "tool_result")] == ["add"] * 3
    assert all(r.get("success") for r in of_kind(events, "tool_result"))
    assert of_kind(events, "message_replied")[-1]["replyText"] == "result=3"
    assert final_state(events) == "RUN_STATE_DONE"
    # Decision and attestation ride in the proposal and the result (one event each).
    assert not of_kind(events, "tool_decision") and not of_kind(events, "tool_attestation")
    assert [p["decision"]["outcome"] for p in of_kind(events, "tool_proposal")] == [
        "TOOL_DECISION_OUTCOME_ALLOW"] * 3
    assert all(len(r["attestation"]["executionSha256"]) == 64
               for r in of_kind(events, "tool_result"))


@pytest.mark.parametrize("decision", ["APPROVAL_DECISION_APPROVE", "APPROVAL_DECISION_DENY"])
async def test_approval_decided_from_another_client(kind: str, decision: str,
                                                    connect: OpenClient) -> None:
    """The run waits durably; a different client (another principal) decides each call."""
    owner = await connect(kind, principal=f"user:owner-{kind}")
    approver = await connect(kind, principal=APPROVER, device_id=APPROVER_DEVICE)
    run_id = await ask_each_time_run(owner, f"hitl-{kind}-{decision}", k=2)
    seen: list[dict[str, Any]] = []
    decided: list[str] = []
    for _ in range(10):
        events, ended = await next_approval(owner, run_id, seqs(seen)[-1] if seen else -1)
        seen += events
        if ended:
            break
        request = of_kind(events, "tool_approval_request")[-1]
        state = (await owner.call(GATEWAY, "GetRun", {"runId": run_id}))["run"]["state"]
        assert state in ("RUN_STATE_WAITING_FOR_APPROVAL", "RUN_STATE_IN_PROGRESS")
        pending = await approver.call(APPROVALS, "ListApprovals", {
            "state": "APPROVAL_STATE_PENDING", "runId": run_id})
        assert [a["approvalId"] for a in pending["approvals"]] == [request["approvalId"]]
        await approver.call(APPROVALS, "DecideApproval", {
            "approvalId": request["approvalId"], "decision": decision})
        decided.append(request["approvalId"])
    assert seqs(seen) == list(range(len(seen)))
    assert len(decided) == 2
    approved = decision == "APPROVAL_DECISION_APPROVE"
    assert of_kind(seen, "message_replied")[-1]["replyText"] == ("result=2" if approved else "result=0")
    assert final_state(seen) == "RUN_STATE_DONE"
    for approval_id in decided:
        approval = (await owner.call(APPROVALS, "GetApproval", {"approvalId": approval_id}))["approval"]
        assert approval["decidedBy"] == APPROVER
        assert approval["state"] == ("APPROVAL_STATE_APPROVED" if approved else "APPROVAL_STATE_DENIED")
    responses = of_kind(seen, "tool_approval_response")
    assert [bool(r.get("approved")) for r in responses] == [approved, approved]
    assert {r["decidedBy"] for r in responses} == {APPROVER}


async def test_abort(kind: str, connect: OpenClient) -> None:
    """A run parked on an approval is cancelled by AbortRun; it ends CANCELLED, never DONE."""
    client = await connect(kind, principal=f"user:abort-{kind}")
    run_id = await ask_each_time_run(client, f"abort-{kind}", k=2)
    events, ended = await next_approval(client, run_id, -1)
    assert not ended
    aborted = await client.call(GATEWAY, "AbortRun", {"runId": run_id, "reason": "conformance"})
    assert aborted["cancelRequested"] is True
    rest = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": seqs(events)[-1]})
    everything = events + rest.events
    assert rest.ended and seqs(everything) == list(range(len(everything)))
    assert final_state(everything) == "RUN_STATE_CANCELLED"
    assert "RUN_STATE_DONE" not in {s["state"] for s in of_kind(everything, "status")}
    run = (await client.call(GATEWAY, "GetRun", {"runId": run_id}))["run"]
    assert run["state"] == "RUN_STATE_CANCELLED"
    with pytest.raises(CallFailed) as info:
        await client.call(GATEWAY, "GetRun", {"runId": "01M00000000000000000000000"})
    assert info.value.code == "NOT_FOUND"


async def test_resume_from_cursor_after_disconnect(kind: str, connect: OpenClient) -> None:
    """Watch a live run, drop the connection, re-attach from the cursor: no loss, no duplicates."""
    client = await connect(kind, principal=f"user:resume-{kind}")
    created = await client.call(GATEWAY, "CreateRun", {
        "sessionKey": f"resume-{kind}", "input": {"text": TEXT.format(k=4)}, "complete": True})
    run_id = created["run"]["runId"]
    first = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": -1},
                                max_events=7)
    assert not first.ended and seqs(first.events) == list(range(7))
    second = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": 6})
    joined = first.events + second.events
    assert second.ended
    assert seqs(joined) == list(range(len(joined)))
    replay = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": -1,
                                                       "noFollow": True})
    assert replay.events == joined
    assert of_kind(joined, "message_replied")[-1]["replyText"] == "result=4"
    page = await client.call(GATEWAY, "ListRunTape", {"runId": run_id, "afterSeq": 3, "limit": 5})
    assert seqs(page["events"]) == [4, 5, 6, 7, 8]


async def test_watch_in_batches(kind: str, connect: OpenClient) -> None:
    """``batch``: the same events, one commit (or replay page) per message; SSE frames unchanged."""
    client = await connect(kind, principal=f"user:batch-{kind}")
    live = await client.run_stream({"v": 1, "sessionKey": f"batch-{kind}", "batch": True,
                                    "input": {"text": TEXT.format(k=3)}})
    events = live.events
    assert live.ended and final_state(events) == "RUN_STATE_DONE"
    assert seqs(events) == list(range(len(events)))
    run_id = events[0]["runId"]
    plain = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": -1})
    batched = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": -1,
                                                        "batch": True})
    assert batched.ended and batched.events == plain.events == events
    if kind == "http":
        # SSE keeps one frame per event (Last-Event-ID resumes exactly): same frames.
        assert batched.responses == plain.responses
        assert all(set(r) == {"event"} for r in batched.responses)
    else:
        assert all("event" not in r and r["events"] for r in live.responses + batched.responses)
        # A live stream groups by commit: fewer messages than events (read-only
        # tool steps commit proposal, decision and result together).
        assert len(live.responses) < len(events)
        # A finished run replays as one page.
        assert len(batched.responses) == 1
        assert len(plain.responses) == len(events)


async def test_resume_after_daemon_restart(kind: str, connect: OpenClient,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """SIGKILL while a run waits for approval; after restart the approval is still
    pending, a client decides it, and watching from the old cursor loses nothing."""
    data_dir = tmp_path_factory.mktemp(f"restart-{kind}") / "data"
    daemon = DaemonProcess(data_dir, env=daemon_env()).start()
    try:
        client = await connect(kind, principal=f"user:restart-{kind}", target=daemon)
        run_id = await ask_each_time_run(client, f"restart-{kind}", k=1)
        before, ended = await next_approval(client, run_id, -1)
        assert not ended
        approval_id = of_kind(before, "tool_approval_request")[-1]["approvalId"]
        cursor = seqs(before)[-1]
        daemon.kill()
        daemon.start()
        client = await connect(kind, principal=f"user:restart-{kind}", target=daemon)
        approver = await connect(kind, principal=APPROVER, device_id=APPROVER_DEVICE, target=daemon)
        run = (await client.call(GATEWAY, "GetRun", {"runId": run_id}))["run"]
        assert run["state"] == "RUN_STATE_WAITING_FOR_APPROVAL"
        assert run["pendingApprovalId"] == approval_id
        await approver.call(APPROVALS, "DecideApproval", {
            "approvalId": approval_id, "decision": "APPROVAL_DECISION_APPROVE"})
        after = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": cursor})
        joined = before + after.events
        assert after.ended and seqs(joined) == list(range(len(joined)))
        assert of_kind(joined, "message_replied")[-1]["replyText"] == "result=1"
        assert final_state(joined) == "RUN_STATE_DONE"
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]


async def test_cursor_into_pruned_data_is_truncated(
        kind: str, connect: OpenClient, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Retention prunes a finished run's tape (hash tombstones); a cursor into it is answered
    CURSOR_TRUNCATED, never a silent gap; a run that is not terminal keeps its tape; the
    journal still verifies and counts the pruned positions."""
    data_dir = tmp_path_factory.mktemp(f"prune-{kind}") / "data"
    daemon = DaemonProcess(data_dir, env=daemon_env()).start()
    try:
        client = await connect(kind, principal=f"user:prune-{kind}", target=daemon)
        admin = await connect(kind, principal="admin:ops", target=daemon)
        done = await client.run_stream({"v": 1, "sessionKey": f"prune-{kind}",
                                        "input": {"text": TEXT.format(k=1)}})
        assert done.ended
        done_id = done.events[0]["runId"]
        live = await ask_each_time_run(client, f"prune-live-{kind}", k=1)
        waiting, ended = await next_approval(client, live, -1)
        assert not ended
        pruned = await admin.call("JournalService", "PruneJournal", {"olderThanDays": 0})
        assert int(pruned["records"]) > 0 and int(pruned["prunedThrough"]) > 0
        with pytest.raises(CallFailed) as info:
            await client.call(GATEWAY, "ListRunTape", {"runId": done_id, "afterSeq": -1})
        assert info.value.code == "CURSOR_TRUNCATED"
        assert "earliest readable cursor" in info.value.message
        with pytest.raises(CallFailed) as info:
            await client.stream(GATEWAY, "WatchRun", {"runId": done_id, "afterSeq": 0})
        assert info.value.code == "CURSOR_TRUNCATED"
        kept = await client.call(GATEWAY, "ListRunTape", {"runId": live, "afterSeq": -1})
        assert seqs(kept["events"])[: len(waiting)] == seqs(waiting)
        verified = await admin.call("JournalService", "VerifyJournal", {})
        assert verified["ok"] is True
        assert int(verified["prunedPositions"]) == int(pruned["prunedThrough"])
        await client.call(GATEWAY, "AbortRun", {"runId": live, "reason": "conformance"})
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]


async def test_sigkill_mid_step_resumes_without_loss_or_duplicates(
        kind: str, connect: OpenClient, tmp_path_factory: pytest.TempPathFactory) -> None:
    """SIGKILL while the loop is between steps (the next model call in flight); after
    restart recovery continues the run: every tool step exactly once, result=K."""
    data_dir = tmp_path_factory.mktemp(f"midstep-{kind}") / "data"
    env = {**daemon_env(), "PALYRA_PROVIDER_SCRIPTED_DELAY_S": "0.3"}
    daemon = DaemonProcess(data_dir, env=env).start()
    try:
        client = await connect(kind, principal=f"user:midstep-{kind}", target=daemon)
        created = await client.call(GATEWAY, "CreateRun", {
            "sessionKey": f"midstep-{kind}", "input": {"text": TEXT.format(k=3)},
            "complete": True})
        run_id = created["run"]["runId"]
        before = await client.stream(GATEWAY, "WatchRun", {"runId": run_id, "afterSeq": -1},
                                     until=("tool_result",))
        assert not before.ended  # the first step is done; the second model call is in flight
        daemon.kill()
        daemon.start()
        client = await connect(kind, principal=f"user:midstep-{kind}", target=daemon)
        after = await client.stream(GATEWAY, "WatchRun",
                                    {"runId": run_id, "afterSeq": seqs(before.events)[-1]})
        joined = before.events + after.events
        assert after.ended and seqs(joined) == list(range(len(joined)))
        outputs = [r.get("outputJson", "") for r in of_kind(joined, "tool_result")]
        assert outputs == ['{"result":1}', '{"result":2}', '{"result":3}'], outputs
        assert of_kind(joined, "message_replied")[-1]["replyText"] == "result=3"
        assert final_state(joined) == "RUN_STATE_DONE"
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]


@pytest.mark.parametrize(
    ("token", "principal", "method", "code"),
    [
        ("", "user:x", "ListSessions", "UNAUTHENTICATED"),
        ("not-the-token", "user:x", "ListSessions", "UNAUTHENTICATED"),
        (ADMIN_TOKEN, "", "ListSessions", "UNAUTHENTICATED"),
        (CONNECTOR_TOKEN, "channel:discord", "ListSessions", "PERMISSION_DENIED"),
        (CONNECTOR_TOKEN, "channel:discord", "CreateRun", "PERMISSION_DENIED"),
    ],
)
async def test_auth_failures(kind: str, connect: OpenClient, token: str, principal: str,
                             method: str, code: str) -> None:
    client = await connect(kind, token=token, principal=principal)
    request = {"input": {"text": "hi"}} if method == "CreateRun" else {}
    with pytest.raises(CallFailed) as info:
        await client.call(GATEWAY, method, request)
    assert info.value.code == code


async def test_connector_token_reaches_route_message(kind: str, connect: OpenClient) -> None:
    """A connector token passes auth for RouteMessage as its channel (what the router
    then does is the router's business, but it is not an auth failure)."""
    client = await connect(kind, token=CONNECTOR_TOKEN, principal="channel:discord")
    try:
        await client.call(GATEWAY, "RouteMessage", {
            "channel": "discord", "message": {"channel": "discord", "text": "hello"}})
    except CallFailed as exc:
        assert exc.code not in ("UNAUTHENTICATED", "PERMISSION_DENIED")


async def test_approvals_and_journal_are_caller_scoped(kind: str, connect: OpenClient) -> None:
    """A ``user:`` principal sees only the approvals of its own runs (another's is
    NOT_FOUND, never listed or exported) and may not verify, export or checkpoint
    the journal (PERMISSION_DENIED, 403 over HTTP); the head stays readable."""
    owner = await connect(kind, principal=f"user:a-{kind}")
    other = await connect(kind, principal=f"user:other-{kind}")
    admin = await connect(kind, principal=APPROVER, device_id=APPROVER_DEVICE)
    run_id = await ask_each_time_run(owner, f"scoped-{kind}", k=1)
    events, ended = await next_approval(owner, run_id, -1)
    assert not ended
    approval_id = of_kind(events, "tool_approval_request")[-1]["approvalId"]
    try:
        mine = (await owner.call(APPROVALS, "GetApproval", {"approvalId": approval_id}))["approval"]
        assert mine["requestedBy"]["principal"] == f"user:a-{kind}" and mine["argsJson"]
        for client, visible in ((owner, True), (admin, True), (other, False)):
            listed = await client.call(APPROVALS, "ListApprovals", {"runId": run_id})
            assert [a["approvalId"] for a in listed.get("approvals", [])] == (
                [approval_id] if visible else [])
            everything = await client.call(APPROVALS, "ListApprovals", {"limit": 500})
            assert (approval_id in {a["approvalId"] for a in everything.get("approvals", [])}
                    ) is visible
            exported = await client.stream(APPROVALS, "ExportApprovals", {})
            assert exported.ended and (approval_id in _export_text(exported.responses)) is visible
        with pytest.raises(CallFailed) as info:
            await other.call(APPROVALS, "GetApproval", {"approvalId": approval_id})
        assert info.value.code == "NOT_FOUND"

        with pytest.raises(CallFailed) as info:
            await other.stream("JournalService", "ExportJournal", {})
        assert info.value.code == "PERMISSION_DENIED" and "admin:" in info.value.message
        for method in ("VerifyJournal", "CreateCheckpoint"):
            with pytest.raises(CallFailed) as info:
                await other.call("JournalService", method, {})
            assert info.value.code == "PERMISSION_DENIED", method
        head = await other.call("JournalService", "GetJournalHead", {})
        assert int(head["eventCount"]) > 0
        assert (await admin.call("JournalService", "VerifyJournal", {}))["ok"] is True
        made = await admin.call("JournalService", "CreateCheckpoint", {})
        assert int(made["position"]) > 0 and len(made["signature"]) == 128
        bundle = await admin.stream("JournalService", "ExportJournal", {})
        assert bundle.ended and bundle.responses[-1]["done"] is True
    finally:
        await owner.call(GATEWAY, "AbortRun", {"runId": run_id, "reason": "conformance"})


def _export_text(responses: list[dict[str, Any]]) -> str:
    """The exported document (``chunk`` is bytes: base64 in proto3 JSON)."""
    return b"".join(base64.b64decode(r.get("chunk", "")) for r in responses).decode()
