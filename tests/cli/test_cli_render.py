"""`palyra runs tail` renders every tape event as one readable line.

Free text is a JSON string, structured payloads compact JSON, the rest
``key=value`` — never a Python repr (``{'proposalId': ...}``).
"""

from __future__ import annotations

import io
import json

import pytest
from palyra_gen.palyra import v1

from palyra.cli._render import describe, print_event

SHA = "ab" * 32
NL = "two\nlines"

# One fully populated instance of every TapeEvent oneof member, and fragments
# its line must contain.
SAMPLES: dict[str, tuple[object, list[str]]] = {
    "status": (v1.RunStatus(state=v1.RunState.DONE, message=NL, reason="completed", event="complete"),
               ["state=done", "reason=completed", "event=complete", '"two\\nlines"']),
    "model_token": (v1.ModelToken(token=NL, is_final=True, turn=2), ['"two\\nlines"', "turn=2", "final"]),
    "tool_proposal": (v1.ToolProposal(proposal_id="P1", tool_name="add", input_json='{\n "b": 2, "a": 1}',
                                      approval_required=True, turn=1, decision=v1.ToolDecision(
                                          proposal_id="P1", outcome=v1.ToolDecisionOutcome.NEEDS_APPROVAL,
                                          reason="posture ask", policy_hash=SHA, policy_ids=["p0"])),
                      ['add {"a":1,"b":2}', "proposal=P1", "turn=1", "needs approval",
                       '-> needs_approval "posture ask"', f"policy={SHA[:12]}", "policies=p0"]),
    "tool_decision": (v1.ToolDecision(proposal_id="P1", outcome=v1.ToolDecisionOutcome.NEEDS_APPROVAL,
                                      reason="posture ask", policy_hash=SHA, policy_ids=["p0", "p1"],
                                      approval_id="A1"),
                      ["needs_approval", '"posture ask"', "proposal=P1", "approval=A1",
                       f"policy={SHA[:12]}", "policies=p0,p1"]),
    "tool_approval_request": (v1.ToolApprovalRequest(
        approval_id="A1", proposal_id="P1", tool_name="add", args_digest=SHA,
        prompt=v1.ApprovalPrompt(summary=NL, risk_level=v1.RiskLevel.HIGH), expires_at_unix_ms=1_700_000_000_000),
        ["approval A1 for add", '"two\\nlines"', "risk=high", f"digest={SHA[:12]}", "expires="]),
    "tool_approval_response": (v1.ToolApprovalResponse(
        approval_id="A1", proposal_id="P1", approved=True, scope=v1.ApprovalScope.TIMEBOXED, ttl_seconds=60,
        decided_by="user:me", reason="ok", state=v1.ApprovalState.APPROVED, from_cache=True),
        ["approved by user:me", "scope=timeboxed", "ttl_s=60", "state=approved", "from cache", '"ok"']),
    "tool_result": (v1.ToolResult(proposal_id="P1", tool_name="add", success=True,
                                  output_json='{"result": 3}', timed_out=True, truncated=True,
                                  attestation=v1.ToolAttestation(proposal_id="P1", execution_sha256=SHA,
                                                                 executor="builtin")),
                    ['add -> {"result":3}', "timed out", "truncated", "executor=builtin", f"sha256={SHA}"]),
    "tool_attestation": (v1.ToolAttestation(proposal_id="P1", execution_sha256=SHA, executor="builtin",
                                            timed_out=True),
                         ["proposal=P1", "executor=builtin", f"sha256={SHA}", "timed out"]),
    "message_replied": (v1.MessageReplied(reply_text=NL), ['"two\\nlines"']),
    "user_input": (v1.UserInput(text=NL, input_id="I1", attachment_count=2),
                   ['"two\\nlines"', "attachments=2", "input=I1"]),
    "agent_loop": (v1.AgentLoop(phase=v1.AgentLoopPhase.TURN_COMPLETED, turn=3, reason="tool_calls"),
                   ["turn_completed", "turn=3", "reason=tool_calls"]),
    "provider_turn_output": (v1.ProviderTurnOutput(turn=1, text=NL, finish_reason="stop", tool_call_count=2,
                                                   input_tokens=10, output_tokens=5, provider="scripted"),
                             ["turn=1", "provider=scripted", "finish=stop", "tool_calls=2", "tokens_in=10",
                              "tokens_out=5", '"two\\nlines"']),
    "tool_catalog_snapshot": (v1.ToolCatalogSnapshot(catalog_hash=SHA, tool_names=["add", "echo"]),
                              ['["add","echo"]', f"hash={SHA[:12]}"]),
    "error": (v1.RunError(code=v1.ErrorCode.TOOL_FAILED, message=NL), ["tool_failed: two lines"]),
    "context_stage": (v1.ContextStage(stage="memory_auto_inject", content="<memory_context>",
                                      tokens=42, tokenizer="llama-2", reason=NL, item_ids=["M1"],
                                      scores_bps=[9100], turn=1),
                      ["memory_auto_inject", "tokens=42", "items=M1:9100", '"two\\nlines"']),
    "session_compaction": (v1.SessionCompaction(strategy="session_window_v1", first_seq=0,
                                                last_seq=41, digest_sha256=SHA,
                                                summariser_model="scripted", pinned_seqs=[3, 9],
                                                summary=NL, tokens_before=900, tokens_after=300),
                           ["session_window_v1", "seqs=0..41", "pinned=2", "tokens=900->300",
                            "model=scripted", f"digest={SHA[:12]}", '"two\\nlines"']),
}


def _members() -> list[str]:
    return sorted(f.name for f in v1.TapeEvent._betterproto.oneof_field_by_group["event"])


def test_samples_cover_every_tape_event_member() -> None:
    assert sorted(SAMPLES) == _members()


@pytest.mark.parametrize("member", _members())
def test_every_member_renders_as_one_readable_line(member: str) -> None:
    body, fragments = SAMPLES[member]
    event = v1.TapeEvent(run_id="R", tape_seq=7, **{member: body})
    kind, text = describe(event)
    assert kind == member
    assert "\n" not in text and "\r" not in text
    assert "{'" not in text and "':" not in text, text  # no Python dict repr
    assert "Message(" not in text and type(body).__name__ + "(" not in text, text
    for fragment in fragments:
        assert fragment in text, (member, fragment, text)
    out = io.StringIO()
    print_event(event, out)
    line = out.getvalue()
    assert line.count("\n") == 1 and line.split()[:2] == ["7", member]


@pytest.mark.parametrize("member", _members())
def test_members_at_their_defaults_render(member: str) -> None:
    body, _ = SAMPLES[member]
    kind, text = describe(v1.TapeEvent(**{member: type(body)()}))
    assert kind == member and "\n" not in text and "{'" not in text


def test_non_json_tool_payloads_stay_quoted_on_one_line() -> None:
    _, text = describe(v1.TapeEvent(tool_result=v1.ToolResult(tool_name="x", success=True,
                                                              output_json="not\njson")))
    assert text == 'x -> "not\\njson"'
    _, failed = describe(v1.TapeEvent(tool_result=v1.ToolResult(tool_name="x", error="boom\n!")))
    assert failed == 'x -> error "boom\\n!"'
    json.loads(failed.split("error ", 1)[1])
