"""The read side of sessions: one record by id, key or label, and caller-scoped pages."""

from __future__ import annotations

from palyra.core.errors import ErrorCode
from palyra.engine.model.errors import coded, not_found
from palyra.engine.model.records import (
    SESSIONS,
    IdentityRec,
    SessionRecord,
    decode,
    session_index_key,
    session_key,
)
from palyra.engine.sessions.selectors import Selectors
from palyra.journal import JournalStore

_DECODED_LIMIT = 1024


class SessionReader:
    """Reads committed session records; never writes."""

    def __init__(self, store: JournalStore) -> None:
        self._store = store
        # The last record decoded per session, with the bytes it came from: the
        # store's entity cache hands back the same bytes object until the row is
        # written again, so a hot session (read on every tool call) decodes once.
        self._decoded: dict[str, tuple[bytes, SessionRecord]] = {}

    def get(self, session_id: str) -> SessionRecord | None:
        """The session record, or None."""
        raw = self._store.get_entity(SESSIONS, session_key(session_id)) if session_id else None
        if raw is None:
            return None
        known = self._decoded.get(session_id)
        if known is not None and known[0] is raw:
            return known[1]
        record = decode(SessionRecord, raw)
        if len(self._decoded) >= _DECODED_LIMIT:
            self._decoded.clear()
        self._decoded[session_id] = (raw, record)
        return record

    def require(self, session_id: str) -> SessionRecord:
        """The session record.

        Raises:
            NotFound: no such session.
        """
        record = self.get(session_id)
        if record is None:
            raise not_found("session", session_id)
        return record

    def by_key(self, key: str) -> SessionRecord | None:
        """The session currently holding ``key``, or None."""
        raw = self._store.get_entity(SESSIONS, session_index_key(key))
        return self.get(raw.decode()) if raw is not None else None

    def by_label(self, label: str) -> SessionRecord | None:
        """Most recently updated non-archived session with ``label`` (global lookup)."""
        best: SessionRecord | None = None
        after = ""
        while True:
            rows = self._store.scan_entities(SESSIONS, "id:", after, 1000)
            for _key, value in rows:
                rec = decode(SessionRecord, value)
                if rec.label == label and not rec.archived and (
                    best is None or rec.updated_ms > best.updated_ms
                ):
                    best = rec
            if len(rows) < 1000:
                return best
            after = rows[-1][0]

    def list_for(
        self, identity: IdentityRec, after_key: str, limit: int, include_archived: bool,
        *, any_device: bool = False,
    ) -> tuple[list[SessionRecord], str]:
        """Caller-scoped keyset page ordered by session key; returns (page, next_after_key).

        ``any_device``: every session of ``identity``'s principal, whatever its
        device and channel (an operator's view).
        """
        out: list[SessionRecord] = []
        cursor = session_index_key(after_key) if after_key else ""
        while len(out) < limit:
            rows = self._store.scan_entities(SESSIONS, "key:", cursor, 500)
            for key, value in rows:
                cursor = key
                rec = self.get(value.decode())
                if rec is None or not (rec.identity.principal == identity.principal
                                       if any_device else rec.identity == identity):
                    continue
                if rec.archived and not include_archived:
                    continue
                out.append(rec)
                if len(out) >= limit:
                    break
            if len(rows) < 500:
                break
        more = len(out) >= limit and bool(
            self._store.scan_entities(SESSIONS, "key:", cursor, 1)
        )
        return out, (cursor[len("key:") :] if more else "")

    def lookup(self, sel: Selectors) -> SessionRecord | None:
        """The session the selectors name, or None.

        Raises:
            PalyraError: ``STATE_CONFLICT`` when id and key name different sessions.
        """
        by_id = self.get(sel.session_id) if sel.session_id else None
        if sel.session_key:
            by_key = self.by_key(sel.session_key)
            if sel.session_id and (by_id is not None or by_key is not None) and (
                by_id is None or by_key is None or by_id.session_id != by_key.session_id
            ):
                raise coded(ErrorCode.STATE_CONFLICT,
                            "session_id and session_key name different sessions")
            return by_key
        if sel.session_id:
            return by_id
        if sel.label:
            return self.by_label(sel.label)
        return None
