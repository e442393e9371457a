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
  Another daemon on the same PostgreSQL journal keeps context rows too: its commits
  reach this note through the watcher that marks them (``JournalStore.on_foreign_rows``),
  and only a context row (``ctx:<session key>…``) it wrote adds its conversation here.
  Its other channel writes (admissions, dedupe keys, another row's deletion) leave the
  note as it is; where the watcher cannot tell which rows were written (it fell too far
  behind), every run looks from then on.

Memory follows the journal only after a commit is durable, as the task queue
does, so nothing here is ever newer than what a restart would find.
"""

from __future__ import annotations

import threading
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
                 context_sessions: int = CONTEXT_SESSIONS) -> None:
        self._limit = messages
        # Other daemons' commits (see :meth:`follow`): the conversations they kept
        # context rows in, filed by the watcher's thread and taken into the note by the
        # loop's (None: more than the note tracks). ``_unknown`` moves when the watcher
        # could not tell which rows some commits wrote.
        self._elsewhere_lock = threading.Lock()
        self._elsewhere: set[str] | None = set()
        self._unknown: Callable[[], int] = lambda: 0
        self._unknown_at = 0
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

    def follow(self, store: JournalStore) -> None:
        """Hear of the context rows other daemons' commits write to ``store`` (a shared
        journal; nothing to hear on LMDB). Call before the scan that :meth:`context_known`
        is given, so a row kept during the scan is heard of."""
        self._unknown = store.foreign_unknown
        self._unknown_at = store.foreign_unknown()
        store.on_foreign_rows(self._foreign_rows)

    def _foreign_rows(self, rows: list[tuple[str, str]]) -> None:
        """On the watcher's thread: other daemons' commits wrote ``rows``."""
        kept = {session_of(key) for table, key in rows
                if table == records.TABLE and key.startswith(records.CTX)}
        if not kept:
            return  # no context row: the note stands
        with self._elsewhere_lock:
            if self._elsewhere is not None:
                self._elsewhere |= kept
                if len(self._elsewhere) > self._context_limit:
                    self._elsewhere = None

    def _take_elsewhere(self) -> None:
        """File the conversations other daemons kept context rows in (loop's thread)."""
        with self._elsewhere_lock:
            kept, self._elsewhere = self._elsewhere, set()
        if kept is None or self._unknown() != self._unknown_at:
            self._context = None  # cannot tell which conversations: every run looks
            return
        for key in kept:
            self.context_kept(key)

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
        self._take_elsewhere()
        if self._context is None:
            return -1
        return self._context.get(session_key)

    def context_consumed(self, session_key: str, mark: int) -> None:
        """A run consumed the context rows it read after :meth:`context_mark` gave
        ``mark``; unless more were kept since, the conversation has none left."""
        self._take_elsewhere()  # one kept elsewhere since the mark moves it on
        if self._context is not None and self._context.get(session_key) == mark:
            del self._context[session_key]


def context_sessions(store: JournalStore, limit: int = CONTEXT_SESSIONS + 1) -> list[str]:
    """The session keys with context rows in the journal (at most ``limit`` of them)."""
    found: dict[str, None] = {}
    after = ""
    while len(found) < limit:
        rows = store.scan_entities(records.TABLE, records.CTX, after, 1000)
        for key, _value in rows:
            found[session_of(key)] = None
        if len(rows) < 1000:
            break
        after = rows[-1][0]
    return list(found)


def session_of(ctx_key: str) -> str:
    """The session key a context row's key (``records.ctx_key``) names."""
    return ctx_key[len(records.CTX):].partition("\x1f")[0]
