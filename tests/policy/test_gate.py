"""The Cedar gate with the shipped default policies, plus configured ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from palyra.policy import (
    Outcome,
    PolicyConfig,
    PolicyGate,
    Posture,
    ToolRequest,
    policy_hash,
)
from palyra.tools import default_registry

RO = frozenset({"read_only"})


@pytest.fixture(scope="module")
def gate() -> PolicyGate:
    return PolicyGate.load()


def _check(
    gate: PolicyGate,
    tool: str,
    caps: frozenset[str] | None,
    *,
    approved: bool = False,
    posture: Posture | None = None,
    budget_left: int = 64,
) -> tuple[Outcome, tuple[str, ...]]:
    request = ToolRequest.of("user:alice", tool, caps, session_id="S", run_id="R")
    resolved = posture or gate.resolve_posture(tool, request.capabilities)
    decision = gate.check_tool(
        request, posture=resolved, budget_left=budget_left, approved=approved
    )
    assert decision.policy_hash == gate.policy_hash
    return decision.outcome, decision.policy_ids


def test_unknown_tool_denied(gate: PolicyGate) -> None:
    for approved in (False, True):
        outcome, ids = _check(gate, "nope", None, approved=approved, posture=Posture.ALWAYS_ALLOW)
        assert outcome is Outcome.DENY
        assert "palyra.tools.forbid_unregistered" in ids


def test_read_only_allowed(gate: PolicyGate) -> None:
    for tool in ("add", "echo", "fs.read", "fs.list", "time.now", "memory.search"):
        outcome, ids = _check(gate, tool, RO)
        assert outcome is Outcome.ALLOW, tool
        assert ids == ("palyra.tools.permit_registered",)


@pytest.mark.parametrize(
    ("tool", "cap"),
    [
        ("fs.write", "filesystem_write"),
        ("http.fetch", "network"),
        ("vault.get", "secrets_read"),
        ("mystery", None),  # registered but declares nothing: treated as sensitive
    ],
)
def test_sensitive_needs_approval_then_allowed(
    gate: PolicyGate, tool: str, cap: str | None
) -> None:
    caps = frozenset({cap}) if cap else frozenset()
    outcome, ids = _check(gate, tool, caps)
    assert outcome is Outcome.NEEDS_APPROVAL
    assert ids == ("palyra.tools.forbid_sensitive_without_approval",)
    outcome, ids = _check(gate, tool, caps, approved=True)
    assert outcome is Outcome.ALLOW


def test_sensitive_with_always_allow_posture_runs_unasked(gate: PolicyGate) -> None:
    outcome, _ = _check(
        gate, "fs.write", frozenset({"filesystem_write"}), posture=Posture.ALWAYS_ALLOW
    )
    assert outcome is Outcome.ALLOW


def test_process_run_denied_unless_enabled(gate: PolicyGate) -> None:
    caps = frozenset({"process_exec"})
    for approved in (False, True):
        for posture in Posture:
            outcome, _ = _check(gate, "process.run", caps, approved=approved, posture=posture)
            assert outcome is Outcome.DENY
    enabled = PolicyGate.load(PolicyConfig(process_exec_enabled=True))
    assert _check(enabled, "process.run", caps)[0] is Outcome.NEEDS_APPROVAL
    assert _check(enabled, "process.run", caps, approved=True)[0] is Outcome.ALLOW


def test_ask_each_time_on_read_only_tool(gate: PolicyGate) -> None:
    # The tool-loop --hitl variant: add needs approval for every call.
    ask = Posture.ASK_EACH_TIME
    assert _check(gate, "add", RO, posture=ask)[0] is Outcome.NEEDS_APPROVAL
    assert _check(gate, "add", RO, posture=ask, approved=True)[0] is Outcome.ALLOW


def test_disabled_posture_denies(gate: PolicyGate) -> None:
    outcome, _ = _check(gate, "add", RO, posture=Posture.DISABLED, approved=True)
    assert outcome is Outcome.DENY


def test_posture_resolution_layers() -> None:
    gate = PolicyGate.load(
        PolicyConfig(tool_postures={"add": Posture.ASK_EACH_TIME, "fs.write": Posture.DISABLED})
    )
    assert gate.resolve_posture("echo", RO) is Posture.ALWAYS_ALLOW
    assert gate.resolve_posture("http.fetch", frozenset({"network"})) is Posture.ASK_EACH_TIME
    assert gate.resolve_posture("add", RO) is Posture.ASK_EACH_TIME  # config
    override = {"add": Posture.ALWAYS_ALLOW}
    assert gate.resolve_posture("add", RO, override) is Posture.ALWAYS_ALLOW  # session wins
    assert gate.resolve_posture("fs.write", frozenset({"filesystem_write"})) is Posture.DISABLED


def test_budget_exhaustion(gate: PolicyGate) -> None:
    budget = gate.config.run_tool_budget
    assert budget == 64
    assert _check(gate, "add", RO, budget_left=1)[0] is Outcome.ALLOW
    outcome, _ = _check(gate, "add", RO, budget_left=0)
    assert outcome is Outcome.DENY
    request = ToolRequest.of("user:a", "add", RO)
    decision = gate.check_tool(request, posture=Posture.ALWAYS_ALLOW, budget_left=0, approved=True)
    assert decision.reason == "the run's tool-call budget is exhausted"


def test_budget_loop_runs_exactly_budget_calls() -> None:
    gate = PolicyGate.load(PolicyConfig(run_tool_budget=3))
    budget = gate.config.run_tool_budget
    request = ToolRequest.of("user:a", "add", RO)
    allowed = 0
    while gate.check_tool(
        request, posture=Posture.ALWAYS_ALLOW, budget_left=budget, approved=False
    ).allowed:
        allowed += 1
        budget -= 1  # the engine decrements when the call runs
    assert allowed == 3


def test_builtin_catalogue_decisions(gate: PolicyGate) -> None:
    expected = {
        "add": Outcome.ALLOW,
        "echo": Outcome.ALLOW,
        "time.now": Outcome.ALLOW,
        "memory.search": Outcome.ALLOW,
        "fs.read": Outcome.ALLOW,
        "fs.list": Outcome.ALLOW,
        "fs.write": Outcome.NEEDS_APPROVAL,
        "fs.apply_patch": Outcome.NEEDS_APPROVAL,
        "http.fetch": Outcome.NEEDS_APPROVAL,
    }
    got = {}
    for tool in default_registry():
        caps = frozenset(str(c) for c in tool.capabilities)
        got[tool.name] = _check(gate, tool.name, caps)[0]
    assert got == expected


def test_memory_search_action(gate: PolicyGate) -> None:
    request = ToolRequest.of("user:a", "memory.search", RO)
    decision = gate.check_tool(
        request, posture=Posture.ALWAYS_ALLOW, budget_left=1, approved=False, action="memory.search"
    )
    assert decision.policy_ids == ("palyra.memory.permit_search",)


@pytest.mark.parametrize(
    ("principal", "run_principal", "outcome"),
    [
        ("admin:ops", "user:alice", Outcome.ALLOW),
        ("user:alice", "user:alice", Outcome.ALLOW),
        ("user:bob", "user:alice", Outcome.DENY),
        ("channel:slack", "channel:slack", Outcome.DENY),
        ("system:cron", "user:alice", Outcome.DENY),
        ("mallory", "mallory", Outcome.DENY),
    ],
)
def test_approval_decide_rules(
    gate: PolicyGate, principal: str, run_principal: str, outcome: Outcome
) -> None:
    decision = gate.check_approval_decide(
        principal, "01HAPPROVAL", run_principal=run_principal, tool_name="fs.write"
    )
    assert decision.outcome is outcome
    assert decision.policy_hash == gate.policy_hash


def _write(config_dir: Path, name: str, text: str) -> None:
    (config_dir / "policies").mkdir(parents=True, exist_ok=True)
    (config_dir / "policies" / name).write_text(text)


def test_configured_policies_get_file_ids_and_cannot_lift_forbids(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "deny_fetch.cedar",
        "// no network for bob\n"
        'forbid (principal == Principal::"user:bob", action, resource == Tool::"http.fetch");\n'
        "permit (principal, action, resource);\n",
    )
    gate = PolicyGate.load(PolicyConfig(config_dir=tmp_path))
    assert "policies/deny_fetch.cedar#0" in gate.policy_ids
    bob = ToolRequest.of("user:bob", "http.fetch", frozenset({"network"}))
    decision = gate.check_tool(bob, posture=Posture.ASK_EACH_TIME, budget_left=5, approved=True)
    assert decision.outcome is Outcome.DENY
    assert decision.policy_ids == ("policies/deny_fetch.cedar#0",)
    # The permit-all does not lift the shipped forbids.
    assert _check(gate, "nope", None)[0] is Outcome.DENY
    assert (
        _check(gate, "process.run", frozenset({"process_exec"}), approved=True)[0] is Outcome.DENY
    )


def test_without_defaults_everything_is_denied(tmp_path: Path) -> None:
    gate = PolicyGate.load(PolicyConfig(config_dir=tmp_path, include_defaults=False))
    assert gate.policy_ids == ()
    outcome, ids = _check(gate, "add", RO)
    assert (outcome, ids) == (Outcome.DENY, ())
    decision = gate.check_approval_decide("admin:x", "A", run_principal="user:y")
    assert decision.outcome is Outcome.DENY


def test_policy_hash_covers_files_and_schema(tmp_path: Path) -> None:
    base = PolicyGate.load(PolicyConfig(config_dir=tmp_path)).policy_hash
    assert base == PolicyGate.load().policy_hash  # empty config dir changes nothing
    _write(tmp_path, "a.cedar", "permit (principal, action, resource);\n")
    with_file = PolicyGate.load(PolicyConfig(config_dir=tmp_path)).policy_hash
    assert with_file != base
    _write(tmp_path, "a.cedar", "permit (principal, action, resource);\n\n")
    assert PolicyGate.load(PolicyConfig(config_dir=tmp_path)).policy_hash != with_file
    # The hash is a pure function of (name, content) pairs plus schema.
    from palyra.policy import PolicySource

    one = policy_hash([PolicySource("a", "x"), PolicySource("b", "y")], "s")
    assert one == policy_hash([PolicySource("b", "y"), PolicySource("a", "x")], "s")
    assert one != policy_hash([PolicySource("a", "xb"), PolicySource("", "y")], "s")
    assert one != policy_hash([PolicySource("a", "x"), PolicySource("b", "y")], "t")
