"""Which sessions this daemon owns, when several daemons share one journal.

On PostgreSQL several daemons serve one journal. Each session (and so each of
its runs) is written by one daemon at a time: the holder of the session's
lease row (``journal/postgres/lease.py``: row compare-and-set, a fencing
epoch per term). Every write of a run carries its session's lease as the
append's fence, so a daemon whose lease was taken over cannot write even
before it notices. On LMDB there is one daemon and no lease: the engine has
no ``SessionLeases`` at all and its runs write unfenced, as before.

A daemon holds a session's lease while it has a run of that session live
(an actor) or is accepting one; the last one to end releases it *settled*
(nothing to recover). A daemon that dies leaves its leases unsettled: once
their term runs out they are orphans, which :meth:`SessionLeases.orphans`
lists for the engine's takeover sweep.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from palyra.core.ids import new_ulid
from palyra.engine.sessions.locks import KeyedLocks
from palyra.journal import JournalStore, Lease

SESSION_LEASE_PREFIX = "session:"

_log = logging.getLogger("palyra.engine")


@dataclass(frozen=True, slots=True)
class Claim:
    """A session's lease as one claim found it."""

    session_id: str
    lease: Lease
    new_term: bool
    """This claim acquired the lease (it was not held here already)."""


def lease_name(session_id: str) -> str:
    """The lease row's name for ``session_id``."""
    return SESSION_LEASE_PREFIX + session_id


@runtime_checkable
class LeaseStore(Protocol):
    """The lease compare-and-sets a shared journal offers (PostgreSQL's store)."""

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None: ...

    def renew_leases(self, owner: str, leases: list[Lease], ttl_s: float) -> set[str]: ...

    def release_lease(self, lease: Lease, *, settled: bool = False) -> None: ...

    def orphaned_leases(self, prefix: str, limit: int = 1000) -> list[str]: ...

    def catch_up_with_others(self) -> None: ...


class SessionLeases:
    """This daemon's session leases: claim, hold, renew, release.

    The lease calls are blocking database round trips: they run in a thread,
    never on the event loop. Claims of one session are serialised here, so two
    runs of one session starting together in this daemon share one term
    instead of the second acquire fencing out the first.
    """

    def __init__(self, store: LeaseStore, owner: str, ttl_s: float) -> None:
        self._store = store
        self.owner = owner
        self.ttl_s = ttl_s
        self._held: dict[str, Lease] = {}
        self._users: dict[str, int] = {}
        self._unsettled: set[str] = set()
        self._locks = KeyedLocks()

    def fence(self, session_id: str) -> Lease | None:
        """The lease this daemon holds on ``session_id`` now, if any."""
        return self._held.get(session_id)

    def held(self) -> list[str]:
        """Sessions whose lease this daemon holds."""
        return list(self._held)

    async def claim(self, session_id: str) -> Claim | None:
        """Hold ``session_id``'s lease (acquiring it if needed); None: another daemon owns it.

        A successful claim must be balanced by one :meth:`unhold`. A claim that
        starts a new term (``Claim.new_term``) may follow an unsettled one: the
        caller then resumes the runs that term left (``run.takeover``).
        """
        async with self._locks.hold(session_id):
            lease = self._held.get(session_id)
            new_term = lease is None
            if lease is None:
                lease = await asyncio.to_thread(self._store.acquire_lease,
                                                lease_name(session_id), self.owner, self.ttl_s)
                if lease is None:
                    return None
                # A new term: the session's rows are read next as their last word, so
                # this daemon's caches first catch up with every daemon's commits.
                await asyncio.to_thread(self._store.catch_up_with_others)
                self._held[session_id] = lease
            self._users[session_id] = self._users.get(session_id, 0) + 1
            return Claim(session_id, lease, new_term)

    def leave_unsettled(self, session_id: str) -> None:
        """Work of ``session_id`` may be left here (a resume failed): the last
        :meth:`unhold` releases the lease unsettled, for another sweep to retry."""
        self._unsettled.add(session_id)

    def hold(self, session_id: str) -> None:
        """One more holder of a lease already claimed (a run's actor); balance with unhold."""
        self._users[session_id] = self._users.get(session_id, 0) + 1

    async def unhold(self, session_id: str, *, settled: bool = True) -> None:
        """Balance one :meth:`claim` or :meth:`hold`; the last one releases the lease.

        ``settled=False``: this holder leaves work behind (a run parked, not
        ended), so the release leaves the session an orphan for another daemon
        to take over at once.
        """
        async with self._locks.hold(session_id):
            if not settled:
                self._unsettled.add(session_id)
            users = self._users.get(session_id, 0) - 1
            if users > 0:
                self._users[session_id] = users
                return
            self._users.pop(session_id, None)
            lease = self._held.pop(session_id, None)
            settled = session_id not in self._unsettled
            self._unsettled.discard(session_id)
            if lease is not None:
                try:
                    await asyncio.to_thread(self._store.release_lease, lease, settled=settled)
                except Exception:
                    # The term then simply runs out; the session's runs have ended,
                    # so a sweep that takes it over finds nothing to resume.
                    _log.warning("could not release the lease on session %s", session_id,
                                 exc_info=True)

    async def renew(self) -> list[str]:
        """Extend every held lease; return the sessions whose lease was lost (forgotten here)."""
        leases = list(self._held.values())
        if not leases:
            return []
        renewed = await asyncio.to_thread(self._store.renew_leases, self.owner, leases,
                                          self.ttl_s)
        lost: list[str] = []
        for lease in leases:
            session_id = lease.name.removeprefix(SESSION_LEASE_PREFIX)
            if lease.name not in renewed and self._held.get(session_id) is lease:
                del self._held[session_id]
                lost.append(session_id)
        return lost

    async def orphans(self, limit: int = 1000) -> list[str]:
        """Sessions whose owner's term ran out with work left (takeover candidates)."""
        names = await asyncio.to_thread(self._store.orphaned_leases, SESSION_LEASE_PREFIX, limit)
        return [name.removeprefix(SESSION_LEASE_PREFIX) for name in names]


def session_leases(store: JournalStore, owner: str, ttl_s: float) -> SessionLeases | None:
    """Session leases when ``store`` is shared by several daemons (PostgreSQL), else None."""
    return SessionLeases(store, owner, ttl_s) if isinstance(store, LeaseStore) else None


def daemon_owner_name() -> str:
    """A lease owner name unique to this daemon process (host, pid, a fresh ULID).

    Never reused by a restart: a restarted daemon is a new owner, so it cannot
    mistake its dead predecessor's unexpired leases for its own.
    """
    return f"{socket.gethostname()}/{os.getpid()}/{new_ulid()}"
