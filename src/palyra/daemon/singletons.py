"""Work that runs on one daemon at a time when several daemons share one journal.

A schedule loop and a channel's poller (Telegram ``getUpdates``, a Discord
Gateway connection) are singletons: their writes are deduped by key, but two
daemons running one would both poll the platform and race each other's
commits. On a shared journal (PostgreSQL) each runs under a lease row of its
own (``singleton:<name>``, the same row compare-and-set and fencing epoch as a
session's lease): the daemon that holds it runs the work, renewing every third
of the TTL, and every append the work makes is fenced by the lease
(``journal.fencing``), so a holder whose term was taken over writes nothing more
even before it notices. The others try to take the lease every third of the TTL,
so when the holder dies its work resumes elsewhere within twice the TTL (at most one TTL
for its term to run out, a third of one for the next try); a clean stop
releases the lease, so another daemon takes over at its next try.

On LMDB one daemon writes the journal: the work simply runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from palyra.engine import LeaseStore, daemon_owner_name
from palyra.journal import JournalStore, Lease, fenced_writes

SINGLETON_PREFIX = "singleton:"
_log = logging.getLogger("palyra.daemon")

Work = Callable[[], Awaitable[None]]


async def stop(job: asyncio.Future[None]) -> None:
    """Cancel a :meth:`Singletons.run` and wait for it: its lease is released before the
    journal closes, so another daemon takes the work over at its next try, not after a TTL."""
    job.cancel()
    await asyncio.wait({job}, timeout=5.0)  # bounded: a stop never hangs on it


class Singletons:
    """Runs each named piece of work on the one daemon holding its lease."""

    def __init__(self, store: JournalStore, ttl_s: float, owner: str = "") -> None:
        self._store = store if isinstance(store, LeaseStore) else None
        self.ttl_s = ttl_s
        # An owner name of its own, never a restarted daemon's: a new process is a new
        # holder, so it cannot mistake its dead predecessor's unexpired term for its own.
        self.owner = owner or daemon_owner_name()

    async def run(self, name: str, work: Work) -> None:
        """Run ``work`` whenever this daemon holds ``name``'s lease, until cancelled.

        The work is cancelled when the lease is lost and started again (from what the
        journal holds) when this daemon takes the lease back; a failure is retried. Work
        that returns is done on this daemon (the lease is released for another to try).
        """
        store = self._store
        if store is None:
            await work()
            return
        lease_name = SINGLETON_PREFIX + name
        while True:
            try:
                lease = await asyncio.to_thread(store.acquire_lease, lease_name, self.owner,
                                                self.ttl_s)
                if lease is not None:
                    # The last holder's writes are read as the last word: catch up first.
                    await asyncio.to_thread(store.catch_up_with_others)
            except Exception:
                _log.warning("could not take the lease on %s", lease_name, exc_info=True)
                lease = None
            if lease is None:
                await asyncio.sleep(self.ttl_s / 3)
                continue
            if await self._hold(store, lease, work):
                return  # it ended by itself (an adapter stopped for good), as on LMDB

    async def _hold(self, store: LeaseStore, lease: Lease, work: Work) -> bool:
        """Run ``work`` fenced by ``lease`` while renewing it; release it after.

        True: the work returned (it is done here); False: it failed or the lease was lost.
        """
        async def fenced() -> None:
            with fenced_writes(lease):
                await work()

        job = asyncio.ensure_future(fenced())
        try:
            while True:
                await asyncio.wait({job}, timeout=self.ttl_s / 3)
                if job.done():
                    if job.cancelled() or job.exception() is None:
                        return True
                    _log.warning("%s failed", lease.name, exc_info=job.exception())
                    await asyncio.sleep(self.ttl_s / 3)  # then try it again
                    return False
                if not await self._renewed(store, lease):
                    _log.warning("lost the lease on %s: stopping it here", lease.name)
                    return False
        finally:
            job.cancel()
            await asyncio.wait({job})  # never raises the job's error, nor swallows our cancel
            if not job.cancelled():
                job.exception()  # retrieved: logged above where it mattered
            with contextlib.suppress(Exception):
                await asyncio.to_thread(store.release_lease, lease, settled=True)

    async def _renewed(self, store: LeaseStore, lease: Lease) -> bool:
        try:
            renewed = await asyncio.to_thread(store.renew_leases, self.owner, [lease],
                                              self.ttl_s)
        except Exception:
            _log.warning("could not renew the lease on %s", lease.name, exc_info=True)
            return False
        return lease.name in renewed
