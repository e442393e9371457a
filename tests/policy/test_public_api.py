"""Snapshot of the public surface of palyra.policy, and decide() purity."""

from __future__ import annotations

import palyra.policy as policy
from palyra.policy import EngineResult, Outcome, Posture, ToolRequest, decide


def test_exports_snapshot() -> None:
    # The literal list is the snapshot: adding or removing an export shows up here.
    assert policy.__all__ == [
        "DEFAULT_RUN_TOOL_BUDGET",
        "Decision",
        "EngineResult",
        "LoadedPolicies",
        "Outcome",
        "PolicyConfig",
        "PolicyGate",
        "PolicySource",
        "Posture",
        "ToolRequest",
        "decide",
        "default_posture",
        "load_policies",
        "policy_hash",
        "resolve_posture",
    ]
    assert all(hasattr(policy, name) for name in policy.__all__)


def test_decide_engine_error_denies() -> None:
    request = ToolRequest.of("user:a", "add", ["read_only"])
    broken = EngineResult(True, True, (), ("boom",), "h")
    decision = decide(request, Posture.ALWAYS_ALLOW, 5, True, broken)
    assert (decision.outcome, decision.reason) == (Outcome.DENY, "policy engine error: boom")
    assert decision.policy_hash == "h"


def test_decide_default_deny_reason() -> None:
    request = ToolRequest.of("user:a", "x", ["read_only"])
    nothing = EngineResult(False, False, (), (), "h")
    decision = decide(request, Posture.ALWAYS_ALLOW, 5, False, nothing)
    assert (decision.outcome, decision.reason) == (Outcome.DENY, "no policy permits tool x")
