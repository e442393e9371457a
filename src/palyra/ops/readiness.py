"""Readiness: can this daemon take work right now, and if not, why.

``/healthz`` only says the process answers. Readiness asks what work needs:
recovery has finished, the journal can commit (its writer's last commit did
not fail, LMDB holds every logged commit, and a probe write with its flush
succeeds on the journal's disk), the map has room or can grow into the free
disk, and the policy set is loaded. ``/readyz`` answers 503 with the failing
checks; ``GetHealth`` carries the same list.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from palyra.journal import JournalStore

PROBE_FILE = "ready.probe"  # in the data dir, on the journal's file system
COMMIT_LOG = "commit.log"  # the journal's commit point (palyra.journal.write.commitlog)
MAP_NEAR_FULL = 0.9  # share of the map in use beyond which growth must be possible
DISK_RESERVE = 16 * 1024 * 1024  # below this much free disk LMDB's next pages may not fit


class PolicyState(Protocol):
    """What readiness reads of the policy gate (:class:`palyra.policy.PolicyGate`)."""

    @property
    def policy_hash(self) -> str: ...
    @property
    def reload_error(self) -> str: ...
    @property
    def reloads(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Check:
    """One named check: ``ok``, and what was seen (``detail``)."""

    name: str
    ok: bool
    detail: str


def map_check(used: int, size: int, disk_free: int) -> Check:
    """The map is fine below 90 % use, or above it when the disk can hold its doubling."""
    share = used / size if size else 1.0
    detail = f"{used:,} of {size:,} bytes in use ({share:.0%}); {disk_free:,} bytes free on disk"
    if share < MAP_NEAR_FULL or disk_free >= size:
        return Check("journal_map", True, detail)
    return Check("journal_map", False, detail + ": near its limit with no room to grow")


class Readiness:
    """The readiness checks of one daemon; :meth:`checks` is cheap enough per probe.

    The probe write (one small ``pwrite`` and ``fdatasync``) runs at most once per
    ``probe_every_s``; between probes its last answer stands.
    """

    def __init__(self, store: JournalStore, policy: PolicyState, *,
                 probe_every_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 disk_free: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free) -> None:
        self._store = store
        self._policy_state = policy
        self._every = probe_every_s
        self._clock = clock
        self._disk_free = disk_free
        self._probed_at = -float("inf")
        self._probe = Check("journal_commit", True, "not probed yet")
        self.recovered = False

    def checks(self) -> list[Check]:
        """Every check, in a fixed order."""
        return [self._recovery(), self._commit(), self._map(), self._policy()]

    def not_ready(self) -> list[Check]:
        """The failing checks (empty when ready)."""
        return [c for c in self.checks() if not c.ok]

    def _recovery(self) -> Check:
        if self.recovered:
            return Check("recovery", True, "finished")
        return Check("recovery", False, "recovery of runs and tasks has not finished")

    def _commit(self) -> Check:
        store = self._store
        broken = store.env.durable.broken if store.env.durable is not None else None
        if broken is not None:
            return Check("journal_commit", False, f"the journal must be reopened: {broken}")
        now = self._clock()
        if now - self._probed_at >= self._every:
            self._probed_at = now
            self._probe = _probe_write(store.env.path, store.data_dir / PROBE_FILE,
                                       self._disk_free(store.env.path))
        timings, _writes = store.commit_timings()
        if self._probe.ok and timings is not None and timings.last_failure:
            return Check("journal_commit", True,
                         f"{self._probe.detail} (the last commit failed: {timings.last_failure})")
        return self._probe

    def _map(self) -> Check:
        store = self._store
        return map_check(store.map_used(), store.stats().map_size,
                         self._disk_free(store.env.path))

    def _policy(self) -> Check:
        return policy_check(self._policy_state)


def policy_check(policy: PolicyState) -> Check:
    """Loaded, and the last reload (if any) did not fail; the detail counts reloads, so a
    caller that asked for one sees when it was done."""
    digest = policy.policy_hash
    if not digest:
        return Check("policy", False, "no policy set is loaded")
    reloads = f" (reload {policy.reloads})" if policy.reloads else ""
    if policy.reload_error:
        return Check("policy", False, f"the policy files failed to load{reloads}: "
                     f"{policy.reload_error}; still enforcing policy set {digest[:12]}")
    return Check("policy", True, f"policy set {digest[:12]} loaded{reloads}")


def _probe_write(journal_dir: Path, probe: Path, disk_free: int) -> Check:
    """Whether the journal can commit: its commit log opens for writing (not read-only,
    not immutable), a probe beside it is written and flushed, and the disk has room."""
    if disk_free < DISK_RESERVE:
        return Check("journal_commit", False,
                     f"the journal's disk is nearly full ({disk_free:,} bytes free)")
    try:
        log = journal_dir / COMMIT_LOG
        if log.exists():
            os.close(os.open(log, os.O_WRONLY))
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, time.time_ns().to_bytes(8, "big"), 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return Check("journal_commit", False, f"the journal cannot commit: {exc}")
    return Check("journal_commit", True, "the commit log takes writes")
