"""The tool-decision cache answers exactly what Cedar answers (property test).

Random policy sets (over every context attribute, plus ``context has`` forms
that force whole-context keys) and random request sequences are decided by a
caching gate and by a gate with the cache off; every decision must match, and
the cache must actually be hit. Cedar is the real cedarpy, never a stand-in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.policy import Decision, PolicyConfig, PolicyGate, Posture, ToolRequest
from palyra.policy._cache import context_projection, literal_types

_ATOMS = [
    "context.registered",
    "context.approved",
    "context.is_sensitive",
    "context.process_exec_enabled",
    'context.posture == "always_allow"',
    'context.posture == "disabled"',
    "context.budget_left > 3",
    "context.budget_left == 0",
    'context.run_id == "R1"',
    'context.session_id like "S*"',
    'context.channel == "slack"',
    'context.principal_name like "admin:*"',
    'context.capabilities.contains("network")',
    'context has run_id && context.run_id == "R2"',
    'principal == Principal::"user:bob"',
    'resource == Tool::"add"',
]

_atom = st.sampled_from(_ATOMS)
_cond = st.builds(lambda a, neg, b, op: f"{'!' if neg else ''}({a}) {op} ({b})",
                  _atom, st.booleans(), _atom, st.sampled_from(["&&", "||"]))
_policy = st.builds(
    lambda effect, cond, unless: (
        f'{effect} (principal, action == Action::"tool.execute", resource)\n'
        f"{'unless' if unless else 'when'} {{ {cond} }};\n"),
    st.sampled_from(["permit", "forbid"]), _cond, st.booleans())

_request = st.tuples(
    st.sampled_from(["user:alice", "user:bob", "admin:ops"]),
    st.sampled_from(["add", "echo", "http.fetch", "nope"]),
    st.sampled_from([frozenset({"read_only"}), frozenset({"network"}), None]),
    st.sampled_from(["S1", "S2", "X"]),
    st.sampled_from(["R1", "R2", "R3"]),
    st.sampled_from(["", "slack"]),
    st.sampled_from(list(Posture)),
    st.integers(min_value=0, max_value=6),
    st.booleans(),
)


def _gate(tmp: Path, policies: list[str], *, defaults: bool, cache: int) -> PolicyGate:
    (tmp / "policies").mkdir(parents=True, exist_ok=True)
    (tmp / "policies" / "random.cedar").write_text("\n".join(policies))
    return PolicyGate.load(PolicyConfig(config_dir=tmp, include_defaults=defaults)) if cache \
        else PolicyGate(PolicyGate.load(PolicyConfig(config_dir=tmp,
                                                     include_defaults=defaults))._loaded,
                        PolicyConfig(config_dir=tmp, include_defaults=defaults),
                        cache_entries=0)


def _decide(gate: PolicyGate, req: tuple[object, ...]) -> Decision:
    principal, tool, caps, sid, rid, channel, posture, budget, approved = req
    request = ToolRequest.of(principal, tool, caps, session_id=sid, run_id=rid,  # type: ignore[arg-type]
                             channel=channel)  # type: ignore[arg-type]
    return gate.check_tool(request, posture=posture, budget_left=budget,  # type: ignore[arg-type]
                           approved=approved)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policies=st.lists(_policy, min_size=1, max_size=4), defaults=st.booleans(),
       requests=st.lists(_request, min_size=1, max_size=30))
def test_cached_decisions_equal_uncached(tmp_path_factory: object, policies: list[str],
                                         defaults: bool, requests: list[tuple[object, ...]]
                                         ) -> None:
    tmp = tmp_path_factory.mktemp("pol")  # type: ignore[attr-defined]
    cached = _gate(tmp, policies, defaults=defaults, cache=1)
    plain = _gate(tmp, policies, defaults=defaults, cache=0)
    # Every request twice, so the second answer of each comes from the cache.
    for req in [*requests, *requests]:
        assert _decide(cached, req) == _decide(plain, req), req
    hits, _misses, _entries = cached.cache_stats
    assert hits >= len(requests)
    assert plain.cache_stats == (0, 2 * len(requests), 0)


def test_projection_reads_only_plain_attribute_access() -> None:
    assert context_projection(["when { context.registered && context.posture == \"x\" };"]) \
        == frozenset({"registered", "posture"})
    assert context_projection(["when { context has run_id };"]) is None
    assert context_projection(['when { context["run_id"] == "x" };']) is None
    assert context_projection(["permit (principal, action, resource);"]) == frozenset()


def test_default_policies_ignore_run_and_budget(tmp_path: Path) -> None:
    """With the shipped policies, a new run id or a smaller budget still hits the cache."""
    gate = PolicyGate.load()
    base = ("user:alice", "add", frozenset({"read_only"}), "S1", "R1", "", Posture.ASK_EACH_TIME,
            64, False)
    first = _decide(gate, base)
    second = _decide(gate, (*base[:4], "R2", "", Posture.ASK_EACH_TIME, 63, False))
    assert first.outcome == second.outcome
    assert gate.cache_stats[0] == 1  # the second call was a hit


_BASE = ("user:alice", "add", frozenset({"read_only"}), "S1", "R1", "", Posture.ASK_EACH_TIME,
         64, False)
_ALLOWED = (*_BASE[:6], Posture.ALWAYS_ALLOW, 64, False)  # Cedar's word is the verdict


@pytest.mark.parametrize(("field", "value"), [
    (0, "user:bob"), (1, "echo"), (2, frozenset({"network"})), (2, None),
    (6, Posture.ALWAYS_ALLOW), (8, True),
])
def test_a_changed_input_the_policies_read_misses_the_cache(field: int, value: object) -> None:
    """Principal, tool, capabilities, registration, posture, approval: each its own entry."""
    gate = PolicyGate.load()
    _decide(gate, _BASE)
    _decide(gate, _BASE)
    assert gate.cache_stats[:2] == (1, 1)
    changed = list(_BASE)
    changed[field] = value
    _decide(gate, tuple(changed))
    assert gate.cache_stats[:2] == (1, 2)


@pytest.mark.parametrize(("attr", "field", "value"), [
    ("budget_left > 3", 7, 2), ('session_id == "S1"', 3, "S2"), ('run_id == "R1"', 4, "R2"),
    ('channel == ""', 5, "slack"),
])
def test_a_per_call_field_a_policy_reads_misses_the_cache(tmp_path: Path, attr: str, field: int,
                                                          value: object) -> None:
    """Budget, session, run and channel are in the key once a policy reads them (and
    the answer then changes with them)."""
    gate = _gate(tmp_path, [f'permit (principal, action == Action::"tool.execute", resource)\n'
                            f"when {{ context.{attr} }};"], defaults=False, cache=1)
    assert _decide(gate, _ALLOWED).outcome.value == "allow"
    changed = list(_ALLOWED)
    changed[field] = value
    assert _decide(gate, tuple(changed)).outcome.value != "allow"
    assert gate.cache_stats[:2] == (0, 2)


def test_a_reloaded_policy_set_is_not_answered_from_the_old_cache(tmp_path: Path) -> None:
    gate = _gate(tmp_path, ['permit (principal, action == Action::"tool.execute", resource);'],
                 defaults=False, cache=1)
    assert _decide(gate, _ALLOWED).outcome.value == "allow"
    (tmp_path / "policies" / "random.cedar").write_text(
        'forbid (principal, action == Action::"tool.execute", resource);')
    gate.reload()
    assert _decide(gate, _ALLOWED).outcome.value == "deny"


def test_cache_is_bounded() -> None:
    gate = PolicyGate(PolicyGate.load()._loaded, PolicyConfig(), cache_entries=8)
    for i in range(50):
        _decide(gate, (f"user:u{i}", "add", frozenset({"read_only"}), "S", "R", "",
                       Posture.ALWAYS_ALLOW, 5, False))
    assert gate.cache_stats[2] == 8


# -- approval.decide: memoised too, the approval id in the key only when a policy names one --

_APPROVAL_ATOMS = [
    'context.principal_name like "admin:*"',
    'context.principal_name like "user:*"',
    "context.principal_name == context.run_principal",
    'context.tool_name == "add"',
    'context.session_id like "S*"',
    'context.channel == "slack"',
    'principal == Principal::"user:bob"',
    'resource == Approval::"A1"',
    'resource in [Approval::"A2", Approval::"A3"]',
    "resource is Approval",
    'context has channel && context.channel == ""',
]
_approval_cond = st.builds(lambda a, neg, b, op: f"{'!' if neg else ''}({a}) {op} ({b})",
                           st.sampled_from(_APPROVAL_ATOMS), st.booleans(),
                           st.sampled_from(_APPROVAL_ATOMS), st.sampled_from(["&&", "||"]))
_approval_policy = st.builds(
    lambda effect, cond, unless: (
        f'{effect} (principal, action == Action::"approval.decide", resource)\n'
        f"{'unless' if unless else 'when'} {{ {cond} }};\n"),
    st.sampled_from(["permit", "forbid"]), _approval_cond, st.booleans())
_approval_request = st.tuples(
    st.sampled_from(["user:alice", "user:bob", "admin:ops", "channel:x"]),
    st.sampled_from(["A1", "A2", "A3", "A4"]),
    st.sampled_from(["user:alice", "user:bob"]),
    st.sampled_from(["add", "echo"]),
    st.sampled_from(["S1", "X"]),
    st.sampled_from(["", "slack"]),
)


def _assert_cache_agrees(tmp_path_factory: object, policies: list[str], defaults: bool,
                         requests: Sequence[Any], decide: Callable[[PolicyGate, Any], Any]) -> None:
    """A cached and an uncached gate over the same policies answer every request alike
    (each asked twice, so the second round comes from the cache)."""
    tmp = tmp_path_factory.mktemp("pol")  # type: ignore[attr-defined]
    cached = _gate(tmp, policies, defaults=defaults, cache=1)
    plain = _gate(tmp, policies, defaults=defaults, cache=0)
    for req in [*requests, *requests]:
        assert decide(cached, req) == decide(plain, req), (policies, req)
    assert cached.cache_stats[0] >= len(requests)


def _decide_approval(gate: PolicyGate, req: tuple[str, ...]) -> Decision:
    principal, approval_id, run_principal, tool, sid, channel = req
    return gate.check_approval_decide(principal, approval_id, run_principal=run_principal,
                                      tool_name=tool, session_id=sid, channel=channel)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policies=st.lists(_approval_policy, min_size=1, max_size=4), defaults=st.booleans(),
       requests=st.lists(_approval_request, min_size=1, max_size=30))
def test_cached_approval_decisions_equal_uncached(tmp_path_factory: object, policies: list[str],
                                                  defaults: bool,
                                                  requests: list[tuple[str, ...]]) -> None:
    _assert_cache_agrees(tmp_path_factory, policies, defaults, requests, _decide_approval)


def test_shipped_policies_decide_a_new_approval_from_the_cache() -> None:
    """An operator deciding approval after approval asks Cedar once (ids drop out)."""
    gate = PolicyGate.load()
    first = _decide_approval(gate, ("admin:ops", "01A", "user:alice", "add", "S1", ""))
    second = _decide_approval(gate, ("admin:ops", "01B", "user:alice", "add", "S2", ""))
    assert first.allowed and second.allowed
    assert second.reason == "admin:ops may decide approval 01B"
    assert gate.cache_stats[:2] == (1, 1)
    # Deny-by-default is remembered per principal, never shared with an allowed one.
    assert not _decide_approval(gate, ("channel:x", "01C", "user:alice", "add", "S1", "")).allowed
    assert not _decide_approval(gate, ("user:bob", "01D", "user:alice", "add", "S1", "")).allowed
    assert _decide_approval(gate, ("user:alice", "01E", "user:alice", "add", "S1", "")).allowed


def test_a_policy_naming_an_approval_keys_the_cache_by_id(tmp_path: Path) -> None:
    gate = _gate(tmp_path, ['forbid (principal, action, resource == Approval::"01X");'],
                 defaults=True, cache=1)
    assert _decide_approval(gate, ("admin:ops", "01W", "user:a", "add", "S", "")).allowed
    assert not _decide_approval(gate, ("admin:ops", "01X", "user:a", "add", "S", "")).allowed
    assert literal_types(['permit (principal, action, resource == Palyra::Approval::"x");']) \
        == frozenset({"Approval"})


# -- session.set_posture: memoised the same way (a tool's name keys only if a policy names it) --

_POSTURE_ATOMS = [
    'context.principal_name like "admin:*"',
    'context.posture == "always_allow"',
    "context.is_sensitive",
    'context.tool_name == "add"',
    'resource == Tool::"echo"',
    'context.channel == "slack"',
]
_posture_policy = st.builds(
    lambda effect, a, neg, b, op: (
        f'{effect} (principal, action == Action::"session.set_posture", resource)\n'
        f"when {{ {'!' if neg else ''}({a}) {op} ({b}) }};\n"),
    st.sampled_from(["permit", "forbid"]), st.sampled_from(_POSTURE_ATOMS), st.booleans(),
    st.sampled_from(_POSTURE_ATOMS), st.sampled_from(["&&", "||"]))
_posture_request = st.tuples(
    st.sampled_from(["user:alice", "admin:ops"]), st.sampled_from(["add", "echo", "shell"]),
    st.sampled_from(["always_allow", "ask_each_time", "inherit"]),
    st.sampled_from([frozenset({"read_only"}), frozenset({"process_exec"}), None]),
    st.sampled_from(["S1", "S2"]), st.sampled_from(["", "slack"]))


def _posture(gate: PolicyGate, req: tuple[object, ...]) -> Decision:
    principal, tool, posture, caps, sid, channel = req
    return gate.check_posture_change(principal, tool, posture, caps,  # type: ignore[arg-type]
                                     session_id=sid, channel=channel)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policies=st.lists(_posture_policy, max_size=3), defaults=st.booleans(),
       requests=st.lists(_posture_request, min_size=1, max_size=20))
def test_cached_posture_decisions_equal_uncached(tmp_path_factory: object, policies: list[str],
                                                 defaults: bool,
                                                 requests: list[tuple[object, ...]]) -> None:
    _assert_cache_agrees(tmp_path_factory, policies, defaults, requests, _posture)
