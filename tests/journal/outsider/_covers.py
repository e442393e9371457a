"""Compaction digests ("Compaction digests" in docs/journal/format.md), recomputed from the tape."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._layout import blob, i64, text
from ._walk import Bad

COMPACTION_KIND = "tape.session_compaction"
TAPE_DIGEST_TAG = b"palyra.tape.digest.v1\0"
assert len(TAPE_DIGEST_TAG) == 22


@dataclass
class Claim:
    """One compaction event: it covers tape seqs `first..last` of `run`."""

    position: int
    run: str
    first: int
    last: int
    digest: str
    found: list[tuple[int, str, bytes]] = field(default_factory=list)  # (seq, kind, payload)


def _seq(v: Any) -> int | None:
    # proto3 JSON writes uint64 as a decimal string and leaves out zero.
    if v is None:
        return 0
    if isinstance(v, str) and v.isdigit():
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    return None


def parse_claim(position: int, ev: dict[str, Any]) -> Claim:
    p = ev["payload"]
    if not isinstance(p, dict):
        raise Bad(position, "malformed compaction: payload is not an object")
    first, last = _seq(p.get("firstSeq")), _seq(p.get("lastSeq"))
    if first is None or last is None:
        raise Bad(position, "malformed compaction: range is not integers")
    if not first <= last < ev["tape_seq"]:
        raise Bad(position, f"malformed compaction: range {first}..{last} is not before it")
    digest = p.get("digestSha256")
    if not isinstance(digest, str) or not digest:
        raise Bad(position, "malformed compaction: no digest")
    return Claim(position, ev["run_id"], first, last, digest)


def claims_of(first_position: int, events: list[dict[str, Any]]) -> list[Claim]:
    return [parse_claim(first_position + i, ev) for i, ev in enumerate(events)
            if ev["kind"] == COMPACTION_KIND]


def tape_digest(items: Iterable[tuple[int, str, bytes]]) -> str:
    h = hashlib.sha256(TAPE_DIGEST_TAG)
    for seq, kind, payload in items:
        h.update(i64(seq) + text(kind) + blob(payload))
    return h.hexdigest()


def check_claim(claim: Claim, pruned: bool) -> None:
    """`found` holds what the tape has of the range; `pruned`: part of it was pruned."""
    seqs = [s for s, _, _ in claim.found]
    if seqs != list(range(claim.first, claim.last + 1)):
        if pruned:
            return  # retention took (part of) the span: nothing left to recompute
        raise Bad(claim.position, f"compaction covers seqs {claim.first}..{claim.last}, "
                                  f"which are not all on the tape")
    if tape_digest(claim.found) != claim.digest:
        raise Bad(claim.position, f"compaction digest mismatch: tape seqs {claim.first}.."
                                  f"{claim.last} of run {claim.run!r} no longer match")
