"""Public value types of the journal API."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from palyra.core.event_header import EventHeader

ENTITY_TABLES = frozenset(
    {"sessions", "runs", "approvals", "tasks", "memory", "agents", "channels", "meta"}
)
"""Entity tables callers may write with :class:`EntityWrite`."""

NO_TAPE_SEQ = -1
"""``tape_seq`` of an event that is not on a run's tape."""

MAX_TAPE_PAGE = 1000
DEFAULT_MAX_TAPE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class JournalConfig:
    """Tuning of one journal store.

    Attributes:
        sync: fsync every commit. Only turn off in tests and benchmarks that
            measure something other than durability.
        map_size: initial LMDB map size in bytes; the map doubles whenever it
            is full, so this is a starting point, not a ceiling.
        max_payload_bytes: cap on an event payload's canonical size before
            redaction; larger payloads get ``PAYLOAD_TOO_LARGE``.
        max_entity_bytes: cap on one entity value.
        max_batch_events: most events the writer puts into one group commit.
        readonly: open without the writer lock (``verify``/``export`` while a
            daemon may be running); ``append`` is then refused.
        follow_buffer_events: most committed events a live follower holds in
            memory for its consumer; past it (or ``follow_buffer_bytes``) the
            follower drops them and reads the store by cursor instead.
        follow_buffer_bytes: the same bound in stored bytes.
        retention_max_age_days: the daemon prunes records whose events are all
            older than this many days (hash tombstones stay, see
            ``docs/journal/api.md``); 0, the default, never drops anything.
        retention_interval_s: how often the daemon runs retention.
        retention_batch_records: most records one retention commit prunes.
        tlog_origin: the transparency log's checkpoint origin line (empty: the
            stored checkpoint's, else one derived from the signing key,
            ``palyra.local/<16 hex>``).
        tlog_witnesses: witness keys whose ``tlog-cosignature`` lines the log
            accepts, each ``"<key name>=<64 hex digits of the ed25519 key>"``.
        backend: ``"lmdb"`` (embedded, the default) or ``"postgres"`` (a
            PostgreSQL database shared by several daemons, ``docs/journal/postgres.md``).
        dsn: the PostgreSQL connection URI (``postgresql://user@host:port/db``).
        pool_size: most PostgreSQL connections the store's readers hold open
            (its writer holds one more).
        lease_ttl_s: PostgreSQL: how long a daemon's session lease lasts unless
            renewed (every third of it); a dead daemon's sessions are taken
            over by another within about 1.3 times this.
    """

    sync: bool = True
    map_size: int = 64 * 1024 * 1024
    max_payload_bytes: int = 256 * 1024
    max_entity_bytes: int = 4 * 1024 * 1024
    max_batch_events: int = 4096
    readonly: bool = False
    follow_buffer_events: int = 512
    follow_buffer_bytes: int = 2 * 1024 * 1024
    retention_max_age_days: float = 0.0
    retention_interval_s: float = 3600.0
    retention_batch_records: int = 512
    tlog_origin: str = ""
    tlog_witnesses: tuple[str, ...] = ()
    backend: str = "lmdb"
    dsn: str = ""
    pool_size: int = 4
    lease_ttl_s: float = 10.0


_FRESH_PAYLOAD: Mapping[str, Any] = MappingProxyType({})
"""The default of ``EventDraft.payload``: each draft gets a fresh empty dict."""


@dataclass(frozen=True, slots=True)
class RowExpectation:
    """A condition of an append: entity row ``table``/``key`` holds ``value`` (None: absent).

    Checked inside the commit's transaction where several daemons write one journal
    (PostgreSQL): an append whose expectation is unmet fails ``STATE_CONFLICT`` and
    writes nothing. A compare-and-set on rows, as a fence is on a lease row.

    ``before_ms`` (0: none): the expectation also holds only while the database's clock,
    read inside that transaction once the head row is locked, is before this instant
    (milliseconds since the epoch): a handed-over request whose asker stops waiting at
    that deadline is never applied after it, whatever the asker managed to commit.
    """

    table: str
    key: str
    value: bytes | None
    before_ms: int = 0


@dataclass(frozen=True, slots=True, init=False)
class EntityWrite:
    """Put (``value`` bytes) or delete (``value`` None) one entity row.

    Attributes:
        table: one of :data:`ENTITY_TABLES`.
        key: row key (UTF-8, at most 400 bytes).
        value: new value, or None to delete.
    """

    table: str
    key: str
    value: bytes | None

    def __init__(self, table: str, key: str, value: bytes | None) -> None:
        # As EventDraft's: the slots' own setters, not the frozen dataclass's
        # object.__setattr__ per field (a write is made per row, a task's two per task).
        _WRITE_TABLE(self, table)
        _WRITE_KEY(self, key)
        _WRITE_VALUE(self, value)


_WRITE_TABLE, _WRITE_KEY, _WRITE_VALUE = (
    EntityWrite.__dict__[name].__set__ for name in ("table", "key", "value")
)


@dataclass(frozen=True, slots=True, init=False)
class EventDraft:
    """An event to append. Empty ``event_id`` / zero ``ts_ms`` are filled in by the store.

    ``tape=True`` puts the event on ``run_id``'s tape with the next dense
    ``tape_seq``. ``entity_writes`` commit in the same transaction.

    The header fields here are ``palyra.core.event_header.DRAFT_FIELDS``
    (a test holds them equal); ``kind`` and ``actor`` come first because they
    are the only required ones.
    """

    kind: str
    actor: str
    session_id: str = ""
    run_id: str = ""
    tape: bool = False
    payload: Mapping[str, Any] = field(default_factory=dict)
    principal: str = ""
    device_id: str = ""
    channel: str = ""
    event_id: str = ""
    ts_ms: int = 0
    entity_writes: Sequence[EntityWrite] = ()
    # In-process only, never stored or hashed: the message ``payload`` was built
    # from, whose proto3 JSON ``payload`` is (so it is plain JSON by construction and
    # is not normalized again). When redaction changes nothing it reaches this
    # process's live followers as ``StoredEvent.origin``, so they need not decode
    # the payload. Only the engine sets it; API drafts never carry one.
    origin: Any = field(default=None, compare=False)

    def __init__(
        self,
        kind: str,
        actor: str,
        session_id: str = "",
        run_id: str = "",
        tape: bool = False,
        payload: Mapping[str, Any] = _FRESH_PAYLOAD,
        principal: str = "",
        device_id: str = "",
        channel: str = "",
        event_id: str = "",
        ts_ms: int = 0,
        entity_writes: Sequence[EntityWrite] = (),
        origin: Any = None,
    ) -> None:
        # The generated __init__ of a frozen dataclass sets each field through
        # object.__setattr__ (~1.1 µs for these 13); the slots' own setters do
        # the same in ~0.6 µs, and a draft is made per event. A test holds this
        # signature to the fields.
        s = _DRAFT_SETTERS
        s[0](self, kind)
        s[1](self, actor)
        s[2](self, session_id)
        s[3](self, run_id)
        s[4](self, tape)
        s[5](self, {} if payload is _FRESH_PAYLOAD else payload)
        s[6](self, principal)
        s[7](self, device_id)
        s[8](self, channel)
        s[9](self, event_id)
        s[10](self, ts_ms)
        s[11](self, entity_writes)
        s[12](self, origin)

    def with_writes(self, *writes: EntityWrite) -> EventDraft:
        """A copy of this draft with ``writes`` appended to its ``entity_writes``.

        Lets a caller attach its entity rows to the last event of a batch
        without rebuilding the draft field by field.
        """
        return replace(self, entity_writes=(*self.entity_writes, *writes))


_DRAFT_SETTERS: tuple[Callable[[EventDraft, Any], None], ...] = tuple(
    EventDraft.__dict__[f.name].__set__ for f in fields(EventDraft)
)


class StoredEvent(EventHeader, frozen=True, gc=False):
    """An event as committed: the header fields of :class:`EventHeader`, then the rest.

    Attributes:
        position: global position, dense from 1.
        tape_seq: position on the run's tape, or -1 when not a tape event.
        payload: the redacted payload.
        redactions: JSON paths that redaction changed (hashed with the event).
        hash: hex ``event_hash`` (session chain).
        prev_hash: hex ``event_hash`` of the previous event of the same
            session (64 zeros for the first).
        global_hash: hex global link hash at ``position``.
    """

    payload: dict[str, Any]
    redactions: list[str]
    hash: str
    prev_hash: str
    global_hash: str
    origin: Any = None
    """In-process only: the draft's ``origin`` (what the payload was built from) on
    events handed to live followers when redaction changed nothing; None when read
    from the store. Never stored, hashed or exported."""


@dataclass(frozen=True, slots=True)
class TapePage:
    """One page of a run's tape; ``next_after_seq`` is set only when more remain."""

    events: list[StoredEvent]
    next_after_seq: int | None


@dataclass(frozen=True, slots=True)
class JournalHead:
    """Number of events and the global head hash (64 zeros when empty)."""

    count: int
    head_hash: str


@dataclass(frozen=True, slots=True)
class JournalStats:
    """Counters since the store was opened.

    Attributes:
        commits: durable write transactions committed.
        appended_events: events committed.
        appended_bytes: stored record bytes committed.
        append_calls: ``append`` calls acknowledged.
        max_batch_calls: most ``append`` calls that shared one commit.
        map_size: current LMDB map size.
        map_grows: times the map was grown.
        records: journal records committed (one per session per commit, see
            ``docs/journal/design.md``), so ``appended_events / records`` is the
            number of events that shared one chain step.
    """

    commits: int
    appended_events: int
    appended_bytes: int
    append_calls: int
    max_batch_calls: int
    map_size: int
    map_grows: int
    records: int = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed statement that the global chain head at ``position`` is ``head_hash``."""

    position: int
    head_hash: str
    ts_ms: int
    public_key: str
    signature: str


@dataclass(frozen=True, slots=True)
class Lease:
    """One term of ownership of ``name`` (a session) by ``owner`` (a daemon).

    ``epoch`` is the fencing token: an append fenced by this lease commits only
    while the lease row still has this epoch (``docs/journal/postgres.md``).
    """

    name: str
    owner: str
    epoch: int
    previous_owner: str = ""
    """Who held the term before this one if it ended unsettled (its owner died,
    stalled past its term, or stopped with work parked), else empty: work that
    owner left under the name is this term's to resume."""
