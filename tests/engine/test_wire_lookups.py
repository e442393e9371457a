"""The lookups the approval path uses instead of building values per call give what the
calls they replace gave: every approval state's wire enum, and an approval's texts."""

from __future__ import annotations

import json

import pytest
from palyra_gen.lifecycle.approval import STATE_TO_PROTO, ApprovalStateId
from palyra_gen.palyra import v1 as pb

from palyra.engine.model.approvals import new_record
from palyra.engine.model.lifecycle import approval_state_proto
from palyra.engine.model.records import IdentityRec


@pytest.mark.parametrize("state", list(ApprovalStateId))
def test_every_approval_state_has_its_wire_enum(state: ApprovalStateId) -> None:
    proto = approval_state_proto(state.value)
    assert proto is STATE_TO_PROTO[state] and isinstance(proto, pb.ApprovalState)


def test_an_unknown_approval_state_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="nonsense"):
        approval_state_proto("nonsense")


def test_an_approvals_texts_are_the_json_they_were() -> None:
    arguments = {"b": 2.5, "a": 1, "name": "café ✓", "nested": {"z": [1, None], "y": True}}
    record = new_record(
        session_id="s", run_id="r", proposal_id="p", tool_name="add", arguments=arguments,
        args_digest="d" * 64, policy_hash="h", risk_level="high", policy_explanation="why",
        requested_by=IdentityRec("user:a"), now_ms=1, timeout_s=60)
    assert record.args_json == json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    assert "\\u00e9" in record.args_json  # ASCII-escaped, as json.dumps writes it
    assert record.prompt.details_json == json.dumps({"tool": "add", "args_digest": "d" * 64})
