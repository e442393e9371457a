"""The ``journal.pruned`` event a prune appends, planned the same way by every backend.

Retention rewrites the oldest records as tombstones (``retention.prune``); the
commit that does so also appends one ``journal.pruned`` event in the retention
session, planned here on the writer's heads.
"""

from __future__ import annotations

from palyra.journal._types import EventDraft, JournalConfig
from palyra.journal.format.record import PRUNED_ACTOR, PRUNED_KIND, RETENTION_SESSION
from palyra.journal.retention.prune import PruneResult, Tombstoned
from palyra.journal.write.plan import CommitPlan, Heads, plan_commit
from palyra.journal.write.prepare import prepare
from palyra.journal.write.requests import Append, Prune


def pruned_event_plan(request: Prune, done: Tombstoned, heads: Heads,
                      config: JournalConfig) -> tuple[PruneResult, CommitPlan]:
    """The prune's answer and the plan of its ``journal.pruned`` event after ``heads``.

    ``heads.sessions`` must hold the retention session's head.
    """
    events = done.last - done.first + 1
    drafts = [EventDraft(
        kind=PRUNED_KIND, actor=PRUNED_ACTOR, session_id=RETENTION_SESSION,
        payload={"first": done.first, "through": done.last, "records": done.records,
                 "events": events, "bytes_freed": done.bytes_freed,
                 "head_hash": done.global_hash.hex(), "before_ms": request.order.before_ms})]
    claim = Append(request.loop, request.future, prepare(drafts, config))
    plan = plan_commit([claim], heads)
    result = PruneResult(done.first, done.last, done.records, events, done.bytes_freed,
                         done.global_hash.hex(), heads.next_position)
    return result, plan
