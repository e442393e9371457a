"""The attachment store's layout and which blobs retention may drop, as functions over data.

An attachment is content-addressed: ``attachment:<sha256>`` in ``meta`` holds its
bytes once, however many inputs name it. Each run that names a blob (a user's
input, an MCP tool's image result) holds a *reference row*,
``attachment_ref:<sha256>:<run id>``, written in the same commit as the bytes
(or as the reference, when the bytes are already stored). A reference lives
as long as its run's tape: while the run is not terminal, and then until
retention has pruned the run's last tape event (the whole tape: retention
prunes a prefix of the log). A reference whose run never started (its input
was refused after the bytes landed, or the daemon died in between) lives for
:data:`ORPHAN_GRACE_MS`. A blob with no live reference is dropped; one without
any reference row at all (stored before references existed) is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

ATTACHMENT_TABLE = "meta"
ATTACHMENT_PREFIX = "attachment:"
REF_PREFIX = "attachment_ref:"
ORPHAN_GRACE_MS = 24 * 3_600_000
"""How long a reference whose run never started keeps its blob (a day: far longer
than the gap between storing an input's attachments and starting its run)."""


class RefRow(msgspec.Struct, frozen=True):
    """A reference row's value: when the reference was taken (ms since the epoch)."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What retention needs to know of a run that references attachments.

    Attributes:
        started: the run has a record.
        terminal: it ended (done, failed or cancelled).
        tape_pruned: retention pruned its last tape event (so its whole tape).
    """

    started: bool
    terminal: bool = False
    tape_pruned: bool = False


def blob_key(sha256: str) -> str:
    """The row holding an attachment's bytes."""
    return ATTACHMENT_PREFIX + sha256


def ref_key(sha256: str, run_id: str) -> str:
    """The row by which ``run_id`` keeps the attachment ``sha256``."""
    return f"{REF_PREFIX}{sha256}:{run_id}"


def parse_ref_key(key: str) -> tuple[str, str]:
    """``(sha256, run id)`` of a reference row's key."""
    sha256, _, run_id = key.removeprefix(REF_PREFIX).partition(":")
    return sha256, run_id


def ref_alive(facts: RunFacts, at_ms: int, now_ms: int) -> bool:
    """Whether a reference (taken at ``at_ms`` by a run with ``facts``) still keeps its blob."""
    if not facts.started:
        return now_ms - at_ms < ORPHAN_GRACE_MS
    return not (facts.terminal and facts.tape_pruned)


def collect(refs: Sequence[tuple[str, str, int]], facts: Mapping[str, RunFacts], now_ms: int
            ) -> tuple[list[tuple[str, str]], list[str]]:
    """The references and blobs one group of rows lets go.

    ``refs`` are ``(sha256, run id, at_ms)`` for *every* reference row of the
    blobs they name (a blob's rows all in one call); ``facts`` has each run.
    Returns the dead references and the blobs none of whose references live.

    >>> dead = RunFacts(True, True, True)
    >>> collect([("a", "r1", 0), ("a", "r2", 0), ("b", "r1", 0)],
    ...         {"r1": dead, "r2": RunFacts(True)}, 1)
    ([('a', 'r1'), ('b', 'r1')], ['b'])
    """
    dead_refs: list[tuple[str, str]] = []
    alive: dict[str, bool] = {}
    for sha256, run_id, at_ms in refs:
        live = ref_alive(facts[run_id], at_ms, now_ms)
        alive[sha256] = alive.get(sha256, False) or live
        if not live:
            dead_refs.append((sha256, run_id))
    return dead_refs, [sha256 for sha256, live in alive.items() if not live]
