"""What admission hands to dispatch in memory, so the hot path reads nothing back.

Reading the journal right after writing it is not free here: a read waits until
the writer has applied every commit it answered (one LMDB transaction forced per
read under load), on the event loop's thread. Admission and dispatch run in the
same process, so admission keeps what it just committed where dispatch finds it:

* the admitted messages, by envelope id (bounded: the oldest go first; a message
  not found here, after a restart or a long wait in the queue, is read from the
  journal as before);
* which conversations (session keys) may have messages kept for context: a run
  reads them only when there are some, instead of scanning for them every time.
  Another daemon on the same PostgreSQL journal keeps context rows this one never
  hears of: once its commits have written the channels table, every run looks.

Memory follows the journal only after a commit is durable, as the task queue
does, so nothing here is ever newer than what a restart would find.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from palyra.channels import records
from palyra.channels.records import InboundRec
from palyra.journal import JournalStore

MESSAGES = 4096
"""Admitted messages kept for their dispatch; more than a burst the workers drain."""
CONTEXT_SESSIONS = 10_000
"""Conversations with context messages tracked one by one; past this, every run looks."""


class Recent:
    """Admitted messages awaiting dispatch, and the conversations holding context rows."""

    def __init__(self, *, messages: int = MESSAGES,
                 context_sessions: int = CONTEXT_SESSIONS,
                 foreign: Callable[[], int] = lambda: 0) -> None:
        self._limit = messages
        # Context rows another daemon keeps never pass through here: once its commits
        # have written the channels table (``JournalStore.foreign_writes``), every run looks.
        self._foreign = foreign
        self._foreign_at = foreign()
        self._messages: OrderedDict[str, InboundRec] = OrderedDict()
        self._context_limit = context_sessions
        # Session key -> when its latest context row was kept (a counter), or None:
        # too many to track, so every run looks for context rows.
        self._context: dict[str, int] | None = {}
        self._generation = 0

    def admitted(self, rec: InboundRec) -> None:
        """``rec`` is durable (called after its admission's commit)."""
        self._messages[rec.envelope.envelope_id] = rec
        while len(self._messages) > self._limit:
            self._messages.popitem(last=False)

    def message(self, envelope_id: str) -> InboundRec | None:
        """The admitted message if it is still held here."""
        return self._messages.get(envelope_id)

    def dispatched(self, envelope_ids: list[str]) -> None:
        """Their dispatch answered them: a repeat reads the journal."""
        for envelope_id in envelope_ids:
            self._messages.pop(envelope_id, None)

    def context_kept(self, session_key: str) -> None:
        """A message kept for context in ``session_key`` is durable."""
        if self._context is None:
            return
        self._generation += 1
        self._context[session_key] = self._generation
        if len(self._context) > self._context_limit:
            self._context = None

    def context_known(self, session_keys: list[str]) -> None:
        """The conversations holding context rows at start (one scan of the table)."""
        for key in session_keys:
            self.context_kept(key)

    def context_mark(self, session_key: str) -> int | None:
        """None when ``session_key`` certainly has no context rows; else a mark to hand
        to :meth:`context_consumed` after reading and consuming them."""
        if self._context is None or self._foreign() != self._foreign_at:
            return -1
        return self._context.get(session_key)

    def context_consumed(self, session_key: str, mark: int) -> None:
        """A run consumed the context rows it read after :meth:`context_mark` gave
        ``mark``; unless more were kept since, the conversation has none left."""
        if self._context is not None and self._context.get(session_key) == mark:
            del self._context[session_key]


def context_sessions(store: JournalStore, limit: int = CONTEXT_SESSIONS + 1) -> list[str]:
    """The session keys with context rows in the journal (at most ``limit`` of them)."""
    found: dict[str, None] = {}
    after = ""
    while len(found) < limit:
        rows = store.scan_entities(records.TABLE, records.CTX, after, 1000)
        for key, _value in rows:
            found[key[len(records.CTX):].partition("\x1f")[0]] = None
        if len(rows) < 1000:
            break
        after = rows[-1][0]
    return list(found)
