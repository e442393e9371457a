"""Engine tuning: one frozen dataclass, passed explicitly (no module globals)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How runs, the agent loop and approvals behave.

    Attributes:
        delegation_max_depth: how deep ``agent.delegate`` may nest child runs (a
            child of a top-level run is at depth 1).
        delegation_max_children: child runs one run may start.
        max_turns: most model calls per agent loop (one loop per user input).
            The reference caps this at 8; the tool-loop workload needs K+1, so
            the default leaves room for K=20 and callers may raise it. A loop
            that hits it ends with the reply "stopped: turn limit (N) reached"
            and ``end_reason`` ``turn_limit`` (see ``run.loop.terminate``).
        max_wall_s: active wall-clock budget of one agent loop, in seconds.
            Time parked in ``waiting_for_approval`` is not counted: a human
            may take minutes, and the budget guards runaway model/tool work.
            Running out ends the loop like the turn limit, with
            ``wall_clock_limit``.
        approval_timeout_s: how long a pending approval waits before it times
            out (the tool call is then denied and the model sees the denial).
            300 s rather than the reference's 60 s: the wait is durable, so a
            decision may come from another client or after a daemon restart,
            and 60 s is shorter than a restart plus a human glance at a phone.
        token_words_per_event: text deltas are taped as ``model_token`` events
            of at most this many words (the reference uses 16), so a long
            answer is neither one huge event nor one event per word.
        token_chars_per_event: a ``model_token`` event also ends at this many
            characters, so text without whitespace is grouped too.
        token_flush_s: streamed token events are committed at most this
            often (the first at once); the groups in between ride in one
            append, so a long reply costs time linear in its length, not one
            durable commit per group.
        max_reply_chars: the longest text a ``provider_turn_output`` or
            ``message_replied`` event carries (one journal payload is capped;
            see ``JournalConfig.max_payload_bytes``). A longer reply keeps its
            full text in the turn's ``model_token`` events; these two carry a
            prefix ending in a note that says so.
        parallel_read_only_tools: how many of a turn's leading read-only calls
            that the policy allows outright run at once (their proposals and
            results are one append, in the model's order); 1 runs them one by one.
        decision_ride_s: how long an approved read-only call may keep its decider
            waiting so that its decision and its result are one commit; a slower
            call has its decision committed alone then, and the decider answered,
            so approving never hangs on a tool (``run.toolflow``).
        max_tool_args_bytes: a tool call whose canonical JSON arguments are
            longer is taped with a placeholder and denied (the model hears
            why), instead of failing the run on an oversized journal payload.
        max_pending_inputs: inputs queued behind a busy loop before
            ``send_input`` answers RESOURCE_EXHAUSTED.
        drain_grace_s: on SIGTERM, how long an in-flight tool may finish so
            its result is journaled before the run is parked.
        idle_complete_s: the idle-run policy (no run is
            ever stuck). A run whose agent loop is idle (nothing running,
            nothing queued, not waiting for approval) and that has had no
            activity (an input, a loop step, a decision) for this long is
            completed: it ends ``done`` with ``end_reason`` ``idle_timeout``
            and a ``status`` tape event saying so. Without it an API run
            created with ``complete=false`` whose client never sends
            ``CompleteRun`` would stay ``in_progress`` forever, across
            restarts too. The deadline counts from the run record's journaled
            ``last_active_ms``, so a restart neither resets nor loses it (a run
            already past it completes at recovery). Approval waits are
            governed by ``approval_timeout_s``, not by this. 0 disables it.
        context_budget_tokens: the most tokens of conversation sent to the model
            in one turn (estimated: see ``engine.model.prune``); older turns are
            left out beyond it, and the tape says so. 0 disables pruning.
        compaction_enabled: session compaction (``session_window_v1``,
            ``engine.model.compaction``) when a new input starts a loop.
        compaction_trigger_tokens: compact only when the estimated provider
            input reaches this many tokens.
        compaction_min_saved_tokens: ... and the covered messages weigh this
            much, and the summary saves at least this much (120).
        compaction_cooldown_s: seconds after a run's last compaction before the
            next (300).
        compaction_keep_user_messages: the most recent user messages that are
            pinned, never summarised (6).
        compaction_max_per_run: compaction attempts per run, failed ones
            included, so compaction can never loop (3).
        service_version: reported by ``get_health``.
    """

    max_turns: int = 32
    delegation_max_depth: int = 2
    delegation_max_children: int = 8
    max_wall_s: float = 120.0
    approval_timeout_s: float = 300.0
    token_words_per_event: int = 16
    token_chars_per_event: int = 4096
    token_flush_s: float = 0.05
    max_reply_chars: int = 64 * 1024
    max_tool_args_bytes: int = 64 * 1024
    max_pending_inputs: int = 64
    parallel_read_only_tools: int = 8
    decision_ride_s: float = 0.05
    drain_grace_s: float = 5.0
    idle_complete_s: float = 3600.0
    context_budget_tokens: int = 100_000
    compaction_enabled: bool = True
    compaction_trigger_tokens: int = 480
    compaction_min_saved_tokens: int = 120
    compaction_cooldown_s: float = 300.0
    compaction_keep_user_messages: int = 6
    compaction_max_per_run: int = 3
    service_version: str = "0.1.0"

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if self.max_wall_s <= 0 or self.approval_timeout_s <= 0:
            raise ValueError("max_wall_s and approval_timeout_s must be > 0")
        if self.idle_complete_s < 0:
            raise ValueError("idle_complete_s must be >= 0 (0 disables it)")
        if self.token_words_per_event < 1 or self.token_chars_per_event < 1:
            raise ValueError("token_words_per_event and token_chars_per_event must be >= 1")
        if self.decision_ride_s < 0:
            raise ValueError("decision_ride_s must be >= 0")
        if self.token_flush_s < 0 or self.max_reply_chars < 256 or self.max_tool_args_bytes < 1:
            raise ValueError("token_flush_s must be >= 0, max_reply_chars >= 256 and "
                             "max_tool_args_bytes >= 1")
        if (self.compaction_trigger_tokens < 0 or self.compaction_min_saved_tokens < 0
                or self.compaction_cooldown_s < 0 or self.compaction_keep_user_messages < 0
                or self.compaction_max_per_run < 0):
            raise ValueError("compaction_* settings must be >= 0")
