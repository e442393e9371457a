"""Compaction digests recomputed from the doc, against the journal's verifier."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palyra.journal import (
    EventDraft,
    JournalConfig,
    JournalStore,
    export_bundle,
    prune_older_than,
)

from . import verifier as V
from .journals import (
    A,
    check_bundle,
    check_dir,
    drafts,
    records,
)

# -- compaction digests ---------------------------------------------------------------------

Digest = Callable[[int, int], str]


def compaction_journal(d: Path, claim: Callable[[Digest], dict[str, Any]], *,
                       prune: bool = False) -> list[Path]:
    """Run `rc` tapes seqs 0..5, then a compaction whose payload is `claim(digest)`, where
    `digest(a, b)` is computed here, from the doc, over seqs a..b as the store reads them."""
    from ._layout import canon

    async def go() -> list[Path]:
        store = JournalStore.open(d / "data", config=JournalConfig(sync=False))
        try:
            for t in range(3):
                await store.append(drafts(A("sc", "rc", True, 2, t, False), 1_000 + t))
                await store.append(drafts(A("sx", "", False, 1, t, False), 1_000 + t))
            tape = store.read_tape("rc").events

            def digest(a: int, b: int) -> str:
                return V.tape_digest((e.tape_seq, e.kind, canon(e.payload))
                                     for e in tape[a:b + 1])

            payload = claim(digest)
            if prune:
                await prune_older_than(store, 1, now_ms=1_002)
            await store.append([EventDraft("tape.session_compaction", "system:engine",
                                           session_id="sc", run_id="rc", tape=True,
                                           payload=payload, ts_ms=1_010)])
            await store.checkpoint()
            export_bundle(store, d / "full.ndjson")
            export_bundle(store, d / "sc.ndjson", session_id="sc")
        finally:
            store.close()
        return [d / "full.ndjson", d / "sc.ndjson"]

    return asyncio.run(go())


def span(first: Any, last: Any, a: int = 1, b: int = 3) -> Callable[[Digest], dict[str, Any]]:
    """A compaction payload naming `first..last` (None: left out) with the digest of a..b."""
    def claim(digest: Digest) -> dict[str, Any]:
        out = {"firstSeq": first, "lastSeq": last, "digestSha256": digest(a, b)}
        return {k: v for k, v in out.items() if v is not None}
    return claim


CLAIMS: dict[str, tuple[Callable[[Digest], dict[str, Any]], bool]] = {
    "valid": (span("1", "3"), True),
    "wrong digest": (lambda dg: {"firstSeq": "1", "lastSeq": "3", "digestSha256": "0" * 64},
                     False),
    "other range": (span("1", "2"), False),
    "reversed": (span("3", "1"), False),
    "not before it": (span("1", "6", 1, 5), False),
    "no digest": (lambda dg: {"firstSeq": "1", "lastSeq": "3"}, False),
    "not a number": (span("x", "3"), False),
    "json ints": (span(1, 3), True),
    "first omitted is 0": (span(None, "3", 0, 3), True),
    "first omitted, digest of 1..3": (span(None, "3"), False),
}


@pytest.mark.parametrize("what", sorted(CLAIMS))
def test_compaction_digest(tmp_path: Path, what: str) -> None:
    claim, ok = CLAIMS[what]
    bundles = compaction_journal(tmp_path, claim)
    check_dir(tmp_path / "data", ok=ok)
    for b in bundles:
        check_bundle(b, ok=ok)


def test_compaction_over_a_pruned_span(tmp_path: Path) -> None:
    bundles = compaction_journal(tmp_path, CLAIMS["wrong digest"][0], prune=True)
    assert {r.fmt for r in records(tmp_path / "data")} == {2, 3}
    check_dir(tmp_path / "data", ok=True)
    for b in bundles:
        check_bundle(b, ok=True)


