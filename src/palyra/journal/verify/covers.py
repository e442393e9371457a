"""Covered-span digests: events that vouch for a span of their run's tape.

A tape event of a kind in :data:`COVERING_KINDS` (today the engine's
``tape.session_compaction``) states that it stands for tape seqs
``firstSeq..lastSeq`` of its own run and carries ``digestSha256``, the digest of
those events as stored (:mod:`palyra.core.tape_digest`; docs/journal/format.md,
"Compaction digests"). Verification recomputes it. The journal knows these by
kind name and payload keys only (the proto3 JSON of the spec's message), never
by importing the engine, so it stays a generic log.

Retention may prune a covered span while its compaction (later on the log) is
kept: the digest can then no longer be recomputed, and verification passes over
it, because the pruned events are gone for everyone alike and the tombstones
that replaced them are themselves checked (docs/journal/design.md, "Retention"). On a
verified chain a span can only be incomplete that way: tape seqs are dense and
a cover's range lies before it on its own tape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.tape_digest import TapeDigest
from palyra.journal._env import JournalEnv
from palyra.journal.format.record import decode_record
from palyra.journal.read import reads as _reads

COVERING_KINDS = frozenset({"tape.session_compaction"})
#: A cheap pre-filter over raw record bytes: only records holding it are decoded.
MARKER = b"tape.session_compaction"
_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Cover:
    """One covering event: where it is and what it vouches for."""

    position: int
    run_id: str
    tape_seq: int
    first_seq: int
    last_seq: int
    digest: str


def _as_int(value: Any) -> int:
    # proto3 JSON writes 64-bit integers as strings.
    if isinstance(value, bool):
        raise ValueError("not an integer")
    return int(value)


def cover_of(position: int, run_id: str, tape_seq: int, kind: str,
             payload: Mapping[str, Any]) -> Cover | str | None:
    """The span an event vouches for; a reason string if it is malformed; None if none."""
    if kind not in COVERING_KINDS:
        return None
    try:
        first, last = _as_int(payload.get("firstSeq", 0)), _as_int(payload.get("lastSeq", 0))
    except (TypeError, ValueError):
        return "its covered range is not a pair of integers"
    digest = payload.get("digestSha256", "")
    if not isinstance(digest, str) or not run_id:
        return "it names no digest or run"
    if not 0 <= first <= last < tape_seq:
        return f"its covered range {first}..{last} is not before it on its tape"
    return Cover(position, run_id, tape_seq, first, last, digest)


def covers_in(value: bytes) -> list[Cover | tuple[int, str]]:
    """The covering events of one stored record (``(position, reason)`` for a malformed one)."""
    out: list[Cover | tuple[int, str]] = []
    for event in decode_record(value).events():
        found = cover_of(event.position, event.run_id, event.tape_seq, event.kind, event.payload)
        if isinstance(found, str):
            out.append((event.position, found))
        elif found is not None:
            out.append(found)
    return out


def span_digest(env: JournalEnv, run_id: str, first: int, last: int) -> str | None:
    """The digest of tape seqs ``first..last`` of ``run_id`` as stored (None: a seq is missing)."""
    digest = TapeDigest()
    after = first - 1
    while after < last:
        page = _reads.read_tape(env, run_id, after, min(_PAGE, last - after), 1 << 62)
        for event in page.events:
            if event.tape_seq > last:
                break
            if event.tape_seq != after + 1:
                return None
            digest.add(event.tape_seq, event.kind, event.payload)
            after = event.tape_seq
        if page.next_after_seq is None:
            break
    return digest.hexdigest() if after == last else None


def check(env: JournalEnv, cover: Cover) -> str | None:
    """Why ``cover`` does not hold (None when its digest recomputes, or when retention
    pruned the span so that nothing is left to recompute)."""
    try:
        digest = span_digest(env, cover.run_id, cover.first_seq, cover.last_seq)
    except PalyraError as exc:
        if exc.code is ErrorCode.CURSOR_TRUNCATED:
            return None
        raise
    return verdict(cover, digest)


def verdict(cover: Cover, digest: str | None) -> str | None:
    """Why ``cover`` does not hold, given the digest recomputed (None: a seq was missing)."""
    if digest is None:
        return (f"compaction at tape seq {cover.tape_seq} of run {cover.run_id} covers seqs "
                f"{cover.first_seq}..{cover.last_seq}, which are not all on the tape")
    if digest != cover.digest:
        return (f"compaction digest mismatch: tape seqs {cover.first_seq}..{cover.last_seq} "
                f"of run {cover.run_id} no longer match the digest its compaction recorded")
    return None


class SpanDigests:
    """Recompute many covers' digests in one pass over events in position order (bundles).

    Covered events come before their cover, so a second pass over the same lines
    feeds each event to the covers whose span holds it.
    """

    def __init__(self, covers: list[Cover]) -> None:
        self._by_run: dict[str, list[tuple[Cover, TapeDigest]]] = {}
        self._pruned_head: set[int] = set()  # covers whose first fed event was past first_seq
        for cover in covers:
            self._by_run.setdefault(cover.run_id, []).append((cover, TapeDigest()))

    def add(self, run_id: str, tape_seq: int, kind: str, payload: Mapping[str, Any]) -> None:
        """Feed one event (any order of runs, each run's events in tape order)."""
        for cover, digest in self._by_run.get(run_id, ()):
            if cover.first_seq <= tape_seq <= cover.last_seq:
                expected = cover.first_seq if digest.next_seq is None else digest.next_seq
                if digest.next_seq is None and tape_seq > expected:
                    self._pruned_head.add(cover.position)
                if tape_seq == expected:
                    digest.add(tape_seq, kind, payload)
                else:
                    digest.next_seq = -1  # a gap: the span is not all there (stays -1)

    def problems(self, *, pruned: bool = False) -> list[tuple[int, str]]:
        """``(cover position, why)`` for each cover that does not hold; with ``pruned``
        (the bundle holds tombstones), a span missing its head or all of it was pruned
        and is passed over."""
        out: list[tuple[int, str]] = []
        for entries in self._by_run.values():
            for cover, digest in entries:
                if pruned and (digest.next_seq is None or cover.position in self._pruned_head):
                    continue
                whole = (digest.next_seq == cover.last_seq + 1
                         and digest.count == cover.last_seq - cover.first_seq + 1)
                problem = verdict(cover, digest.hexdigest() if whole else None)
                if problem is not None:
                    out.append((cover.position, problem))
        return out
