"""A tool result's attestation hashes the arguments exactly as its proposal tapes them.

The engine hands the proposal's ``input_json`` to the tools port, which attests
with it instead of encoding the arguments again: an auditor recomputing the
digest from the tape must get the taped one.
"""

from __future__ import annotations

import pytest
from engine_harness import Harness, loop_text, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.tools import ToolResult
from palyra.tools._attestation import attest


@pytest.mark.parametrize("k", [1, 3])
async def test_each_attestation_is_recomputable_from_the_taped_call(harness: Harness,
                                                                     k: int) -> None:
    app = await harness.start()
    run = await run_to_end(app, loop_text(k))
    assert run.state == pb.RunState.DONE
    members = harness.members(run.run_id)
    proposals = {m.proposal_id: m for m in members if isinstance(m, pb.ToolProposal)}
    results = [m for m in members if isinstance(m, pb.ToolResult)]
    assert len(results) == k
    for result in results:
        call, attestation = proposals[result.proposal_id], result.attestation
        assert attestation is not None
        again = attest(call.tool_name, call.input_json, ToolResult(
            result.success, result.output_json, result.error, result.timed_out,
            result.truncated, facts=dict(attestation.facts)))
        assert attestation.execution_sha256 == again
