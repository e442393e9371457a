"""The tape fold reads both tape shapes: decision and attestation folded into the proposal and
the result (written since issue 11), and as separate events (older tapes, and a proposal whose
decision was taped later)."""

from __future__ import annotations

import betterproto2
from hypothesis import given
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.core.canonical import canonical_json
from palyra.engine.model.fold import Action, LoopState, ProposalPhase

_OUTCOMES = st.sampled_from([pb.ToolDecisionOutcome.ALLOW, pb.ToolDecisionOutcome.DENY,
                             pb.ToolDecisionOutcome.NEEDS_APPROVAL])


def _tapes(outcomes: list[pb.ToolDecisionOutcome], done: int
           ) -> tuple[list[betterproto2.Message], list[betterproto2.Message]]:
    """The same turn written both ways: ``done`` calls have results."""
    head: list[betterproto2.Message] = [
        pb.UserInput(text="go"), pb.AgentLoop(phase=pb.AgentLoopPhase.STARTED),
        pb.AgentLoop(phase=pb.AgentLoopPhase.TURN_STARTED, turn=1),
        pb.ProviderTurnOutput(turn=1, tool_call_count=len(outcomes))]
    folded, separate = list(head), list(head)
    for i, outcome in enumerate(outcomes):
        pid = f"P{i}"
        decision = pb.ToolDecision(proposal_id=pid, outcome=outcome, reason=f"r{i}",
                                   policy_hash="h" * 64)
        proposal = pb.ToolProposal(proposal_id=pid, tool_name="add", input_json='{"a":1}', turn=1)
        folded.append(pb.ToolProposal(proposal_id=pid, tool_name="add", input_json='{"a":1}',
                                      turn=1, decision=decision))
        separate += [proposal, decision]
    for i in range(done):
        attestation = pb.ToolAttestation(proposal_id=f"P{i}", execution_sha256="a" * 64)
        result = pb.ToolResult(proposal_id=f"P{i}", tool_name="add", success=True,
                               output_json='{"result":1}')
        folded.append(pb.ToolResult(proposal_id=f"P{i}", tool_name="add", success=True,
                                    output_json='{"result":1}', attestation=attestation))
        separate += [result, attestation]
    return folded, separate


def _fold(members: list[betterproto2.Message]) -> LoopState:
    state = LoopState()
    for member in members:
        state.apply(member)
    return state


@given(outcomes=st.lists(_OUTCOMES, min_size=1, max_size=4), data=st.data())
def test_both_shapes_fold_to_the_same_loop_state(outcomes: list[pb.ToolDecisionOutcome],
                                                 data: st.DataObject) -> None:
    done = data.draw(st.integers(0, len(outcomes)))
    folded, separate = _tapes(outcomes, done)
    a, b = _fold(folded), _fold(separate)
    assert a.messages == b.messages and a.tool_call_count == b.tool_call_count == done
    assert [(p.proposal_id, p.phase, p.deny_reason, p.policy_hash) for p in a.proposals] == [
        (p.proposal_id, p.phase, p.deny_reason, p.policy_hash) for p in b.proposals]
    assert a.next_action()[0] == b.next_action()[0]
    expected = {pb.ToolDecisionOutcome.ALLOW: ProposalPhase.ALLOWED,
                pb.ToolDecisionOutcome.DENY: ProposalPhase.DENIED,
                pb.ToolDecisionOutcome.NEEDS_APPROVAL: ProposalPhase.NEEDS_APPROVAL}
    for index, p in enumerate(a.proposals):
        assert p.phase is (ProposalPhase.DONE if index < done else expected[outcomes[index]])


def test_a_proposal_without_its_decision_is_still_proposed() -> None:
    folded, _ = _tapes([pb.ToolDecisionOutcome.ALLOW], 0)
    proposal = folded[-1]
    assert isinstance(proposal, pb.ToolProposal)
    proposal.decision = None  # as a tape cut between proposal and a later decision
    state = _fold(folded)
    assert state.proposals[0].phase is ProposalPhase.PROPOSED
    assert state.next_action()[0] is Action.RESOLVE_TOOL


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8)


def _one_call(arguments: dict[str, object] | None) -> LoopState:
    """A turn with one proposal folded; live (its arguments expected) when given."""
    input_json = canonical_json({"a": 1} if arguments is None else arguments).decode()
    state = _fold(_tapes([], 0)[0])
    if arguments is not None:
        state.expect_arguments("P0", arguments)
    state.apply(pb.ToolProposal(proposal_id="P0", tool_name="add", input_json=input_json,
                                turn=1))
    return state


def test_a_live_proposal_folds_the_arguments_it_was_encoded_from() -> None:
    arguments: dict[str, object] = {"a": 1, "b": [2, 3]}
    state = _one_call(arguments)
    # Taken as they are, not decoded back from the input_json just encoded from them.
    assert state.messages[-1].tool_calls[0].arguments is arguments
    assert state.proposals[0].arguments() is arguments
    assert not state.live_arguments  # nothing stays behind once folded


@given(arguments=st.dictionaries(st.text(max_size=6), _JSON, max_size=4))
def test_live_and_replayed_proposals_fold_to_the_same_conversation(
        arguments: dict[str, object]) -> None:
    live = _one_call(arguments)
    replayed = LoopState()
    for member in _tapes([], 0)[0]:
        replayed.apply(member)
    replayed.apply(pb.ToolProposal(proposal_id="P0", tool_name="add",
                                   input_json=canonical_json(arguments).decode(), turn=1))
    assert live.messages == replayed.messages
    assert live.proposals[0].arguments() == replayed.proposals[0].arguments()


def test_a_replayed_proposal_decodes_its_arguments_once() -> None:
    state = _fold([*_tapes([pb.ToolDecisionOutcome.NEEDS_APPROVAL], 0)[0]])
    proposal = state.proposals[0]
    assert proposal.arguments() == {"a": 1}
    assert proposal.arguments() is proposal.arguments()  # the approval path asks thrice
