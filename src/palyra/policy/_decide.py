"""Pure decision logic around the Cedar result: posture, budget, approval."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from palyra.core.capabilities import is_sensitive
from palyra.policy._model import Decision, EngineResult, Outcome, Posture, ToolRequest


def default_posture(capabilities: Iterable[str]) -> Posture:
    """Posture when nobody configured one: sensitive asks, read-only runs."""
    return Posture.ASK_EACH_TIME if is_sensitive(capabilities) else Posture.ALWAYS_ALLOW


def resolve_posture(
    tool_name: str,
    capabilities: Iterable[str],
    *,
    session_overrides: Mapping[str, Posture] | None = None,
    configured: Mapping[str, Posture] | None = None,
) -> Posture:
    """Resolve a tool's posture: session override, then config, then default.

    Args:
        tool_name: The tool.
        capabilities: Its capabilities (for the default).
        session_overrides: Per-session choices (e.g. "always allow fs.write in
            this session").
        configured: Per-tool postures from the daemon config.
    """
    for layer in (session_overrides, configured):
        if layer and tool_name in layer:
            return layer[tool_name]
    return default_posture(capabilities)


def _ids(ids: tuple[str, ...]) -> str:
    return ", ".join(ids)


def decide(
    request: ToolRequest,
    posture: Posture,
    budget_left: int,
    approved: bool,
    engine_result: EngineResult,
) -> Decision:
    """Combine posture, budget, approval state and Cedar's answer.

    Order matters and is fixed: a disabled tool or an exhausted budget denies
    before anything else (no point asking a human to approve a call that
    cannot run); then any engine error denies; then Cedar's answer, where a
    deny that an approval would lift becomes ``NEEDS_APPROVAL``; finally an
    ``ask_each_time`` posture asks even when Cedar allows (that is how a
    read-only tool like ``add`` can require approval).

    The caller decrements the run's budget when the call actually runs.

    Args:
        request: The proposed call.
        posture: Its resolved posture (``resolve_posture``).
        budget_left: Tool calls the run may still make, before this one.
        approved: An approval exists for this exact call.
        engine_result: Cedar's answer (``PolicyGate.evaluate_tool``).
    """
    h = engine_result.policy_hash
    name = request.tool_name
    if posture is Posture.DISABLED:
        return Decision(Outcome.DENY, f"tool {name} is disabled", (), h)
    if budget_left <= 0:
        return Decision(Outcome.DENY, "the run's tool-call budget is exhausted", (), h)
    if engine_result.errors:
        return Decision(
            Outcome.DENY,
            f"policy engine error: {'; '.join(engine_result.errors)}",
            engine_result.policy_ids,
            h,
        )
    ids = engine_result.policy_ids
    if not engine_result.allowed:
        if not approved and engine_result.allowed_if_approved:
            return Decision(Outcome.NEEDS_APPROVAL, f"tool {name} needs approval", ids, h)
        if ids:
            return Decision(Outcome.DENY, f"tool {name} is forbidden by {_ids(ids)}", ids, h)
        return Decision(Outcome.DENY, f"no policy permits tool {name}", ids, h)
    if posture is Posture.ASK_EACH_TIME and not approved:
        return Decision(
            Outcome.NEEDS_APPROVAL, f"tool {name} needs approval (posture ask_each_time)", ids, h
        )
    return Decision(Outcome.ALLOW, f"tool {name} is allowed by {_ids(ids)}", ids, h)
