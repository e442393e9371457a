"""``/call TOOL {json}`` drives a tool through the whole flow: Cedar, postures, approvals, tape."""

from __future__ import annotations

import hashlib
import json

from engine_harness import ADMIN, USER, Harness, next_approval, run_to_end
from palyra_gen.palyra import v1 as pb


async def test_a_read_only_tool_runs_and_its_result_is_the_reply(harness: Harness) -> None:
    app = await harness.start()
    run = await run_to_end(app, '/call echo {"text": "hello there"}')
    assert run.state == pb.RunState.DONE
    assert json.loads(run.final_text) == {"text": "hello there"}
    [proposal] = [m for m in harness.members(run.run_id) if isinstance(m, pb.ToolProposal)]
    assert proposal.tool_name == "echo"
    assert proposal.decision.outcome == pb.ToolDecisionOutcome.ALLOW


async def test_a_sensitive_tool_waits_for_an_approval(harness: Harness) -> None:
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text='/call fs.write {"path": "note.txt", "content": "hi"}'),
        complete=True))
    run_id = created.run.run_id
    approval = await next_approval(app, run_id)
    assert approval.tool_name == "fs.write"
    assert not (harness.data_dir / "note.txt").exists()  # nothing ran before the decision
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert json.loads(run.final_text) == {"path": "note.txt", "bytes_written": 2}
    assert (harness.data_dir / "note.txt").read_text() == "hi"
    [result] = [m for m in harness.members(run_id) if isinstance(m, pb.ToolResult)]
    assert result.success and result.attestation is not None


async def test_an_unknown_tool_is_denied_and_the_denial_is_the_reply(harness: Harness) -> None:
    app = await harness.start()
    run = await run_to_end(app, "/call no.such.tool")
    assert run.state == pb.RunState.DONE
    assert "denied" in json.loads(run.final_text)["error"]


async def test_apply_patch_puts_the_files_digests_in_the_attestation(harness: Harness) -> None:
    app = await harness.start()
    (harness.data_dir / "a.txt").write_text("one\ntwo\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text="/call fs.apply_patch " + json.dumps({"patch": patch})),
        complete=True))
    approval = await next_approval(app, created.run.run_id)
    assert approval.tool_name == "fs.apply_patch"
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE))
    await app.complete_run(USER, pb.CompleteRunRequest(run_id=created.run.run_id, wait=True))
    assert (harness.data_dir / "a.txt").read_text() == "one\n2\n"
    # Read back from the journal: the facts survived encoding and storage.
    [result] = [m for m in harness.members(created.run.run_id) if isinstance(m, pb.ToolResult)]
    assert result.attestation is not None
    before = hashlib.sha256(b"one\ntwo\n").hexdigest()
    after = hashlib.sha256(b"one\n2\n").hexdigest()
    assert result.attestation.facts == {"patch:a.txt": f"{before}:{after}"}
