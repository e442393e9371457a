"""Policy reload at run time: the daemon's SIGHUP and ``palyra policy reload``.

The gate reads the policy files again and switches to them between two
decisions. A set that fails to load changes nothing: the one in force stays,
readiness fails naming the file and line, and the next good reload clears it.
A set that changed is recorded on the journal (``policy.reloaded``, with the
previous and the new hash), beside the decisions that carry each hash.
"""

from __future__ import annotations

import structlog

from palyra.core.errors import PalyraError
from palyra.journal import EventDraft, JournalStore
from palyra.policy import PolicyGate

ACTOR = "system:daemon"
_log = structlog.get_logger("palyra.policy")


async def reload_policy(gate: PolicyGate, store: JournalStore) -> None:
    """Reload ``gate``'s policy files; log (and journal, when it changed) what happened."""
    previous = gate.policy_hash
    try:
        current = gate.reload()
    except PalyraError as exc:
        _log.error("policy_reload_failed", error=exc.message, enforcing=previous)
        return
    if current != previous:
        await store.append([EventDraft(
            kind="policy.reloaded", actor=ACTOR, principal=ACTOR,
            payload={"previous_hash": previous, "policy_hash": current,
                     "policy_ids": list(gate.policy_ids)})])
    _log.info("policy_reloaded", policy_hash=current, previous_hash=previous,
              changed=current != previous)
