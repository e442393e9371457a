"""The Cedar policy gate: translates requests into cedarpy calls, and back.

Everything here is translation; the decision rules live in ``_decide`` (pure)
and in the ``.cedar`` files. Handles (policy set, schema, entities) are parsed
once at start-up, so one check costs one or two ``is_authorized`` calls
(250-490 µs per step measured in place), and Cedar's answer for a tool call,
an ``approval.decide`` and a ``session.set_posture`` is memoised by what the
policy set can see (``_cache``), so a loop repeating the same call shape, or an
operator deciding approval after approval, asks Cedar once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cedarpy

from palyra.core.capabilities import is_sensitive
from palyra.core.errors import PalyraError
from palyra.policy._cache import CacheKey, DecisionCache, context_projection, literal_types
from palyra.policy._config import PolicyConfig
from palyra.policy._decide import decide, resolve_posture
from palyra.policy._loader import LoadedPolicies, load_policies
from palyra.policy._model import Decision, EngineResult, Outcome, Posture, ToolRequest

ToolAction = str  # "tool.execute" or "memory.search"
# The cache key's resource for ids no policy can tell apart (a gate either
# always keys a type by id or never, so this never meets a real id).
_ANY_ID = "*"


class PolicyGate:
    """Answers "may this run call this tool?" and "may this principal decide?".

    Build with ``PolicyGate.load(config)`` at daemon start-up; a bad policy
    file fails start-up with ``POLICY_INVALID`` naming file and line.

    Args:
        loaded: The validated policy set (see ``load_policies``).
        config: The gate's configuration.
    """

    def __init__(self, loaded: LoadedPolicies, config: PolicyConfig, *,
                 cache_entries: int = 4096) -> None:
        self._config = config
        self._cache_entries = cache_entries
        self._install(loaded)
        # No entity attributes are used (everything is in the context), so
        # one empty, pre-parsed entity set serves every request.
        self._entities = cedarpy.Entities.from_json_str("[]")
        self.reload_error = ""
        """Why the last reload failed (the set loaded before it stays in force); empty
        once a reload succeeds."""
        self.reloads = 0
        """Reloads attempted since start, failed ones included."""

    def _install(self, loaded: LoadedPolicies) -> None:
        # Plain attribute stores with no await between them: every decision (on the
        # daemon's loop) sees either the old set or the new one, whole.
        self._loaded = loaded
        self._cache = DecisionCache(
            context_projection(source.text for source in loaded.sources),
            loaded.policy_hash, self._cache_entries)
        # Resource types whose ids a policy can tell apart (see ``_cache``).
        self._keyed_types = literal_types(source.text for source in loaded.sources)
        # Which of a tool call's inputs the policies can see (see ``_tool_key``).
        reads = self._cache.reads
        self._tool_reads = (
            reads("capabilities") or reads("is_sensitive"),
            reads("registered") or reads("is_sensitive"),
            reads("posture"), reads("approved"), reads("budget_left"), reads("session_id"),
            reads("run_id"), reads("channel"))

    def reload(self) -> str:
        """Read the policy files again and decide by them from the next decision on.

        Returns the policy hash now in force. A set that fails to load changes
        nothing: the one in force stays, and ``reload_error`` says why until a
        reload succeeds (readiness fails on it).

        Raises:
            PalyraError: ``POLICY_INVALID`` naming the file and line.
        """
        self.reloads += 1
        try:
            loaded = load_policies(self._config.config_dir,
                                   include_defaults=self._config.include_defaults)
        except PalyraError as exc:
            self.reload_error = exc.message
            raise
        self._install(loaded)
        self.reload_error = ""
        return loaded.policy_hash

    @classmethod
    def load(cls, config: PolicyConfig | None = None) -> PolicyGate:
        """Load and validate policies and build the gate.

        Raises:
            PalyraError: ``POLICY_INVALID`` for a bad policy file.
        """
        config = config or PolicyConfig()
        loaded = load_policies(config.config_dir, include_defaults=config.include_defaults)
        return cls(loaded, config)

    @property
    def policy_hash(self) -> str:
        """Hash of the active policy set and schema (journaled with decisions)."""
        return self._loaded.policy_hash

    @property
    def policy_ids(self) -> tuple[str, ...]:
        """Stable ids of the active policies."""
        return self._loaded.policy_ids

    @property
    def config(self) -> PolicyConfig:
        """The gate's configuration (budget, postures, process exec switch)."""
        return self._config

    def resolve_posture(
        self,
        tool_name: str,
        capabilities: frozenset[str],
        session_overrides: Mapping[str, Posture] | None = None,
    ) -> Posture:
        """Posture of a tool: session override, then config, then default."""
        return resolve_posture(
            tool_name,
            capabilities,
            session_overrides=session_overrides,
            configured=self._config.tool_postures,
        )

    def _authorize(self, request: dict[str, Any]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
        try:
            result = cedarpy.is_authorized(
                request, self._loaded.policy_set, self._entities, self._loaded.schema
            )
        except Exception as exc:  # engine failure of any kind denies
            return False, (), (f"{type(exc).__name__}: {exc}",)
        diagnostics = result.diagnostics
        # Cedar reports the determining policies as a set; sorted, the journaled
        # ``policy_ids`` are the same bytes for the same decision every time.
        return (bool(result.allowed), tuple(sorted(diagnostics.reasons)),
                tuple(diagnostics.errors))

    def _ask(self, principal: str, action: str, resource_type: str, resource_id: str,
             context: dict[str, Any]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
        """Cedar's answer for one principal/action/resource, uncached."""
        return self._authorize({
            "principal": {"type": "Principal", "id": principal},
            "action": {"type": "Action", "id": action},
            "resource": {"type": resource_type, "id": resource_id},
            "context": context,
        })

    def _verdict(self, answer: tuple[bool, tuple[str, ...], tuple[str, ...]], *, allow: str,
                 deny: str) -> Decision:
        """Cedar's answer as a ``Decision``: an engine error denies, naming the error."""
        allowed, reasons, errors = answer
        h = self.policy_hash
        if errors:
            return Decision(Outcome.DENY, f"policy engine error: {'; '.join(errors)}", reasons, h)
        if allowed:
            return Decision(Outcome.ALLOW, allow, reasons, h)
        return Decision(Outcome.DENY, deny, reasons, h)

    def _authorize_cached(self, principal: str, action: str, resource_type: str,
                          resource_id: str, context: dict[str, Any]
                          ) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
        """``_authorize`` through the decision cache (engine errors are never kept).

        The resource's id is part of the key only when a policy names a literal
        of its type (``_cache.literal_types``): an operator deciding approval
        after approval asks Cedar once.
        """
        resource = resource_id if resource_type in self._keyed_types else _ANY_ID
        key = self._cache.key(action, principal, f"{resource_type}::{resource}", context)
        cached = self._cache.get(key)
        if cached is not None:
            return cached.allowed, cached.policy_ids, cached.errors
        allowed, reasons, errors = self._ask(principal, action, resource_type, resource_id,
                                             context)
        self._cache.put(key, EngineResult(allowed, allowed, reasons, errors, self.policy_hash))
        return allowed, reasons, errors

    def _tool_context(
        self, request: ToolRequest, posture: Posture, budget_left: int, approved: bool
    ) -> dict[str, Any]:
        return {
            "capabilities": sorted(request.capabilities),
            "is_sensitive": request.is_sensitive,
            "registered": request.registered,
            "approved": approved,
            "posture": posture.value,
            "process_exec_enabled": self._config.process_exec_enabled,
            "budget_left": budget_left,
            "principal_name": request.principal,
            "session_id": request.session_id,
            "run_id": request.run_id,
            "channel": request.channel,
        }

    def _tool_key(self, request: ToolRequest, posture: Posture, budget_left: int,
                  approved: bool, action: ToolAction) -> CacheKey:
        """The cache key of a tool call, built without its context dict.

        Exact, like ``DecisionCache.key`` over ``_tool_context``: every context
        value the policies can read is a function of this tuple. ``capabilities``
        and ``is_sensitive`` come from the capability set and ``registered``,
        ``principal_name`` is the principal, ``process_exec_enabled`` is the
        gate's own config (fixed for its life); each input is in the key only
        when a policy reads what comes from it, as in the projected key. Tool
        keys have their own length, so they never meet another action's keys.
        """
        caps, registered, pos, appr, budget, session, run, channel = self._tool_reads
        return (self._cache.policy_hash, action, request.principal, request.tool_name,
                request.capabilities if caps else None,
                request.registered if registered else None,
                posture if pos else None, approved if appr else None,
                budget_left if budget else None, request.session_id if session else None,
                request.run_id if run else None, request.channel if channel else None)

    def evaluate_tool(
        self,
        request: ToolRequest,
        *,
        posture: Posture,
        budget_left: int,
        approved: bool,
        action: ToolAction = "tool.execute",
    ) -> EngineResult:
        """Ask Cedar about a tool call, and whether an approval would help.

        If the real evaluation denies and the call is not approved, it is
        evaluated once more as if approved, so ``decide`` can tell "needs
        approval" from "denied". Answers come from the decision cache when an
        identical request (as far as the policies can see) was asked before.
        """
        key = self._tool_key(request, posture, budget_left, approved, action)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        cedar_request: dict[str, Any] = {
            "principal": {"type": "Principal", "id": request.principal},
            "action": {"type": "Action", "id": action},
            "resource": {"type": "Tool", "id": request.tool_name},
            "context": self._tool_context(request, posture, budget_left, approved),
        }
        allowed, reasons, errors = self._authorize(cedar_request)
        allowed_if_approved, errors_if_approved = allowed, errors
        if not allowed and not approved and not errors:
            cedar_request["context"] = self._tool_context(request, posture, budget_left, True)
            allowed_if_approved, _, errors_if_approved = self._authorize(cedar_request)
        result = EngineResult(allowed, allowed_if_approved, reasons, errors, self.policy_hash)
        if not errors_if_approved:  # an engine error on either ask is never remembered
            self._cache.put(key, result)
        return result

    @property
    def cache_stats(self) -> tuple[int, int, int]:
        """``(hits, misses, entries)`` of the decision cache (tool calls and
        ``approval.decide``)."""
        return self._cache.hits, self._cache.misses, len(self._cache)

    def check_tool(
        self,
        request: ToolRequest,
        *,
        posture: Posture,
        budget_left: int,
        approved: bool,
        action: ToolAction = "tool.execute",
    ) -> Decision:
        """Decide a tool call: ``evaluate_tool`` then the pure ``decide``.

        Args:
            request: The proposed call.
            posture: Its resolved posture (``resolve_posture``).
            budget_left: Calls the run may still make, before this one.
            approved: An approval exists for this exact call (tool and
                argument digest).
            action: ``tool.execute`` (default) or ``memory.search``.
        """
        result = self.evaluate_tool(
            request, posture=posture, budget_left=budget_left, approved=approved, action=action
        )
        return decide(request, posture, budget_left, approved, result)

    def check_approval_decide(
        self,
        principal: str,
        approval_id: str,
        *,
        run_principal: str,
        tool_name: str = "",
        session_id: str = "",
        channel: str = "",
    ) -> Decision:
        """May ``principal`` approve or deny approval ``approval_id``?

        Shipped rules: ``admin:*`` may decide any approval; ``user:*`` may
        decide approvals of runs they started (``run_principal``); everyone
        else is denied.

        Returns:
            A ``Decision`` with outcome ``allow`` or ``deny``.
        """
        return self._verdict(
            self._authorize_cached(
                principal, "approval.decide", "Approval", approval_id,
                {"principal_name": principal, "run_principal": run_principal,
                 "tool_name": tool_name, "session_id": session_id, "channel": channel}),
            allow=f"{principal} may decide approval {approval_id}",
            deny=f"{principal} may not decide approval {approval_id}")

    def check_memory_change(self, principal: str, action: str, *, session_id: str = "",
                            count: int = 1) -> Decision:
        """May ``principal`` delete (``memory.delete``) or purge (``memory.purge``) memory?
        Shipped rules: operators only (a sensitive action)."""
        return self._verdict(
            self._ask(principal, action, "Tool", "memory",
                      {"principal_name": principal, "session_id": session_id, "count": count}),
            allow=f"{principal} may {action}",
            deny=f"{principal} may not {action}: a sensitive action (an operator may)")

    def check_skill_execute(self, principal: str, skill: str, *, skill_id: str, state: str,
                            tool_name: str, capabilities: frozenset[str], session_id: str = "",
                            channel: str = "") -> Decision:
        """May ``principal`` call a tool of skill ``skill`` (Cedar ``skill.execute``)?
        Shipped rules: enabled (loaded) skills only. Memoised like tool calls."""
        why = (f"skill {skill!r} is not installed and enabled" if state != "enabled"
               else f"skill {skill_id} is forbidden")
        return self._verdict(
            self._authorize_cached(principal, "skill.execute", "Skill", skill, {
                "skill_id": skill_id, "state": state, "tool_name": tool_name,
                "capabilities": sorted(capabilities), "principal_name": principal,
                "session_id": session_id, "channel": channel}),
            allow=f"skill {skill_id} may run", deny=f"{why} (skill.execute)")

    def check_channel_command(self, principal: str, command: str, *, channel: str, sender: str,
                              admitted: bool, owner: bool, verified: bool) -> Decision:
        """May a channel sender run built-in command ``command`` (``/cancel``, ``/reset``,
        ``/status``)? Shipped rules: ``/status`` and ``/cancel`` for any admitted sender,
        ``/reset`` for the channel's owner or an allow-listed sender."""
        return self._verdict(
            self._ask(principal, "channel.command", "Tool", command,
                      {"principal_name": principal, "channel": channel, "sender": sender,
                       "command": command, "sender_admitted": admitted,
                       "sender_is_owner": owner, "sender_verified": verified}),
            allow=f"{sender} may run {command}",
            deny=f"{sender} may not run {command} on {channel}")

    def check_learning_review(
        self, principal: str, candidate_id: str, *, run_principal: str, decision: str,
        candidate_kind: str, session_id: str = "",
    ) -> Decision:
        """May ``principal`` accept or reject learning candidate ``candidate_id``?

        Shipped rules: ``admin:*`` may review any candidate; ``user:*`` may review
        candidates learned from runs they started; everyone else is denied.
        """
        return self._verdict(
            self._ask(principal, "learning.review", "Candidate", candidate_id,
                      {"principal_name": principal, "run_principal": run_principal,
                       "decision": decision, "candidate_kind": candidate_kind,
                       "session_id": session_id}),
            allow=f"{principal} may {decision} candidate {candidate_id}",
            deny=f"{principal} may not {decision} candidate {candidate_id} "
                 "(an operator, or the run's own user, may)")

    def check_model_select(self, principal: str, provider: str, model: str, *,
                           agent_id: str, in_agent_route: bool) -> Decision:
        """May ``principal`` have ``provider``/``model`` answer its run (Cedar ``model.select``)?

        Shipped rules: anyone may pick a target the serving agent already routes to;
        operators may pick any.
        """
        label = f"{provider}/{model}" if model else provider
        return self._verdict(
            self._ask(principal, "model.select", "Model", label,
                      {"principal_name": principal, "provider": provider, "model": model,
                       "agent_id": agent_id, "in_agent_route": in_agent_route}),
            allow=f"{principal} may select model {label}",
            deny=f"{principal} may not select model {label} (an operator may, or pick one "
                 "the agent routes to)")

    def check_delegate(self, principal: str, agent_id: str, *, run_id: str,
                       parent_agent_id: str, depth: int) -> Decision:
        """May ``principal``'s run ``run_id`` hand a task to agent ``agent_id`` (Cedar
        ``agent.delegate``)? Shipped rule: yes (the tool's posture gates the call)."""
        return self._verdict(
            self._ask(principal, "agent.delegate", "Agent", agent_id,
                      {"principal_name": principal, "run_id": run_id,
                       "parent_agent_id": parent_agent_id, "depth": depth}),
            allow=f"{principal} may delegate to agent {agent_id}",
            deny=f"{principal} may not delegate to agent {agent_id}")

    def check_cron_delete(self, principal: str, schedule_id: str, *, owner: str) -> Decision:
        """May ``principal`` delete schedule ``schedule_id`` (Cedar ``cron.delete``)?
        Shipped rule: operators only."""
        return self._verdict(
            self._ask(principal, "cron.delete", "Schedule", schedule_id,
                      {"principal_name": principal, "owner": owner}),
            allow=f"{principal} may delete schedule {schedule_id}",
            deny=f"{principal} may not delete schedule {schedule_id} (an operator may)")

    def check_posture_change(
        self,
        principal: str,
        tool_name: str,
        posture: str,
        capabilities: frozenset[str] | None,
        *,
        session_id: str = "",
        channel: str = "",
    ) -> Decision:
        """May ``principal`` set ``tool_name``'s posture to ``posture`` in a session?

        Shipped rules: anyone may make a tool stricter or clear an override;
        only operators may set ``always_allow`` on a sensitive (or unknown) tool.
        ``capabilities`` None means the tool is not registered.
        """
        sensitive = capabilities is None or is_sensitive(capabilities)
        return self._verdict(
            self._authorize_cached(
                principal, "session.set_posture", "Tool", tool_name,
                {"principal_name": principal, "tool_name": tool_name, "posture": posture,
                 "is_sensitive": sensitive, "session_id": session_id, "channel": channel}),
            allow=f"{principal} may set {tool_name} to {posture}",
            deny=f"{principal} may not set {posture} for "
                 f"{'sensitive ' if sensitive else ''}tool {tool_name} (an operator may)")
