"""The channel router: one face over admission, dispatch and the built-in commands.

:mod:`~palyra.channels.admission` keeps each inbound message exactly once
before the platform is told; :mod:`~palyra.channels.dispatch` answers admitted
messages in runs and queues the replies; :mod:`~palyra.channels.commands`
answers ``/status``, ``/cancel``, ``/reset`` and pairing requests. The daemon,
RouteMessage and the adapters' ingress only see :class:`ChannelRouter`.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from palyra.channels.admission import ACTOR, COMMAND_TASK, DISPATCH_TASK, Admission, Admitter
from palyra.channels.commands import Commands, decide_pairing
from palyra.channels.config import ChannelsConfig
from palyra.channels.counters import ChannelCounters
from palyra.channels.dispatch import Dispatcher, DispatchOutcome
from palyra.channels.pairing import PairingBook
from palyra.channels.recent import Recent, context_sessions
from palyra.channels.records import InboundRec, QuarantineRec
from palyra.channels.routing import Envelope
from palyra.engine import ApprovalDecision, ApprovalRecord, Engine
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.policy import PolicyGate
from palyra.tasks import Done, TaskQueue
from palyra.tasks.worker import TaskContext, TaskWorker


def _now() -> int:
    return time.time_ns() // 1_000_000


class ChannelRouter:
    """Admission, dispatch and built-in commands over the journal, engine and task queue.

    ``reply_caps`` bounds a reply chunk per sink below the channel's ``reply_max_bytes``
    (Telegram's 4,096 characters, Discord's 2,000): a chunk of at most N UTF-8 bytes
    has at most N characters.
    """

    def __init__(self, store: JournalStore, engine: Engine, tasks: TaskQueue,
                 pairing: PairingBook, gate: PolicyGate, config: ChannelsConfig, *,
                 now_ms: Callable[[], int] = _now, reply_caps: Mapping[str, int] | None = None
                 ) -> None:
        self.pairing = pairing
        self.config = config
        self._tasks = tasks
        self._store = store
        recent = Recent()
        recent.follow(store)  # before the scan: a row kept meanwhile is heard of
        recent.context_known(context_sessions(store))
        # Sessions under leases: other daemons may share this journal (read through
        # getattr: admission-only tests build a router without an engine).
        self._admitter = Admitter(store, tasks, pairing, config, now_ms, recent,
                                  shared=getattr(engine, "leases", None) is not None)
        self._dispatcher = Dispatcher(
            store, engine, tasks, Commands(store, engine, pairing, gate, config, now_ms), config,
            message=self._admitter.message, quarantine=self._admitter.quarantine,
            reply_caps=reply_caps or {}, recent=recent)

    def hand_dispatches_to(self, worker: TaskWorker) -> None:
        """Admit each message's dispatch task claimed by ``worker`` (its ``channel.dispatch``
        worker) and hand it over at once, while that worker can take more."""
        self._admitter.dispatcher = worker

    @property
    def counters(self) -> ChannelCounters:
        """What ingress answered without a commit (duplicates, signature failures)."""
        return self._admitter.counters

    async def decide_pairing(self, record: ApprovalRecord,
                             decision: ApprovalDecision) -> ApprovalRecord:
        """Decide a ``dm_pairing:`` approval and tell the sender (the engine's subject
        decider for pairing approvals)."""
        return await decide_pairing(self.pairing, self._tasks, record, decision)

    # admit and dispatch hand back their part's own coroutine: an ``async def`` that only
    # awaited it was one more frame resumed at each of its suspensions, every message.
    def admit(self, envelope: Envelope, *, dedupe: tuple[str, str, str] | None = None,
              sink: str = "", also: Sequence[EntityWrite] = (), hint: bool = True
              ) -> Coroutine[Any, Any, Admission]:
        """Keep one inbound message durably (see :meth:`Admitter.admit`)."""
        return self._admitter.admit(envelope, dedupe=dedupe, sink=sink, also=also, hint=hint)

    async def record(self, writes: Sequence[EntityWrite], kind: str) -> None:
        """Commit adapter state with no message (a polling offset past ignored updates)."""
        await self._store.append([EventDraft(kind=kind, actor=ACTOR,
                                             entity_writes=tuple(writes))])

    def dispatch(self, ctx: TaskContext) -> Coroutine[Any, Any, Done]:
        """The ``channel.dispatch`` and ``channel.command`` task handler."""
        return self._dispatcher.dispatch(ctx)

    async def outcome(self, task_id: str, timeout_s: float) -> DispatchOutcome | None:
        """The dispatch's outcome once its task ends (None if it is still going)."""
        return await self._dispatcher.outcome(task_id, timeout_s)

    async def sweep(self) -> int:
        """Drop dedupe records past their window; returns how many."""
        return await self._admitter.sweep()

    async def sweep_every(self, interval_s: float = 3600.0) -> None:
        """Sweep now and then every ``interval_s`` (a daemon background task)."""
        await self._admitter.sweep_every(interval_s)

    def quarantined(self, channel: str = "", limit: int = 1000) -> list[QuarantineRec]:
        """The quarantine (of one channel, or all), oldest first, at most ``limit``."""
        return self._admitter.quarantined(channel, limit)

    def quarantine_sizes(self) -> dict[str, int]:
        """Quarantined messages per channel (a scan of the whole quarantine)."""
        return dict(Counter(rec.envelope.channel
                            for rec in self._admitter.quarantined(limit=sys.maxsize)))

    def message(self, envelope_id: str) -> InboundRec | None:
        """An admitted message, or None."""
        return self._admitter.message(envelope_id)


__all__ = ["COMMAND_TASK", "DISPATCH_TASK", "Admission", "ChannelRouter", "DispatchOutcome"]
