"""The transparency log's cost, part of ``python -m bench journal`` (``--only tlog``: alone).

* ``tlog_appends``: durable appends per second at 1, 16 and 256 appenders into two
  stores in alternating slices, one maintaining the tree (as shipped) and one whose
  planner grows no tree (``write.plan.extend`` swapped for a no-op during its
  slices only), so the difference is the tree's: hashing the leaves and nodes and
  writing one row per record. ``tree_cost`` = 1 - with / without.
* ``tlog_proof_size``: the bytes of a ``tlog-proof`` without its record (the
  ``extra`` line), for trees of 10^3 .. 10^6 entries built with the pure
  functions (``tlog.merkle``), the entry in the middle and the last one.
* ``tlog_verify``: the time ``verify_proof`` takes on a real proof of a real
  record (median of many), what ``palyra journal verify-proof`` does past start-up.
* ``tlog_session_export``: the bytes of one session's export (6 one-event records)
  among 1,200 and 12,000 records of other sessions: the session's records with
  their proofs (``export --session``) beside the older session bundle with a link
  line per position (``export --session --links``).
"""

from __future__ import annotations

import base64
import statistics
import time
from collections.abc import Callable, Coroutine
from hashlib import sha256
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palyra.journal import JournalStore
from palyra.journal.format.signing import Signer
from palyra.journal.tlog.merkle import Frontier, MemoryTree, inclusion_proof, leaf_hash, root_at
from palyra.journal.tlog.note import default_origin, sign_checkpoint
from palyra.journal.tlog.proof import encode_proof, verify_proof
from palyra.journal.write import plan

PROOF_SIZES = (1_000, 10_000, 100_000, 1_000_000)
EXPORT_OTHERS = (1_200, 12_000)
EXPORT_OWN = 6


def _no_tree(frontier: Frontier, entries: Any, prefix: bytes) -> tuple[Frontier, list[Any]]:
    for _ in entries:  # consume, as the real one does
        pass
    return frontier, []


async def appends(root: Path, appenders: int, events: int, rounds: int,
                  drive: Callable[..., Coroutine[Any, Any, float]],
                  draft: Callable[[int], Any]) -> dict[str, Any]:  # fmt: skip
    """Appends per second with and without the tree, alternating slices."""
    with_tree = JournalStore.open(root / f"tlog-on-{appenders}")
    without = JournalStore.open(root / f"tlog-off-{appenders}")
    real = plan.extend
    on_s = off_s = on_cpu = off_cpu = 0.0
    try:
        for r in range(rounds):
            part = range(events * r // rounds, events * (r + 1) // rounds)
            # Who goes first alternates: a slice right after the other's is not favoured.
            for tree in (True, False) if r % 2 == 0 else (False, True):
                store = with_tree if tree else without
                if not tree:
                    plan.extend = _no_tree  # type: ignore[assignment]
                try:
                    cpu = time.process_time()
                    wall = await drive(appenders, part, lambda i, s=store: s.append([draft(i)]))
                    cpu = time.process_time() - cpu
                finally:
                    plan.extend = real
                if tree:
                    on_s, on_cpu = on_s + wall, on_cpu + cpu
                else:
                    off_s, off_cpu = off_s + wall, off_cpu + cpu
        records = with_tree.tree_size()
    finally:
        with_tree.close()
        without.close()
    with_rate, without_rate = events / on_s, events / off_s
    return {"config": "tlog_appends", "appenders": appenders, "events": events,
            "records": records, "with_tree_per_s": round(with_rate),
            "without_tree_per_s": round(without_rate),
            "tree_cost": round(1 - with_rate / without_rate, 3),
            "cpu_us_per_event_with": round(on_cpu / events * 1e6, 1),
            "cpu_us_per_event_without": round(off_cpu / events * 1e6, 1)}  # fmt: skip


def proof_sizes(sizes: tuple[int, ...] = PROOF_SIZES) -> list[dict[str, Any]]:
    """A proof's bytes besides the record, at each tree size."""
    signer = Signer(Ed25519PrivateKey.generate())
    lines = []
    for size in sizes:
        tree = MemoryTree(leaf_hash(sha256(i.to_bytes(8, "big")).digest()) for i in range(size))
        root = root_at(size, tree.hash_at)
        note = sign_checkpoint(default_origin(signer.public_key), size, root,
                               signer.public_key, signer.sign)  # fmt: skip
        out: dict[str, Any] = {"config": "tlog_proof_size", "entries": size,
                               "checkpoint_bytes": len(note)}  # fmt: skip
        for name, index in (("middle", size // 2), ("last", size - 1)):
            path = inclusion_proof(index, size, tree.hash_at)
            proof = encode_proof(b"", index, path, note)
            out[f"{name}_hashes"] = len(path)
            out[f"{name}_bytes_without_record"] = len(proof) - len(b"extra \n")
        lines.append(out)
    return lines


def verify_time(store_dir: Path, runs: int = 2000) -> dict[str, Any]:
    """Median and p99 of ``verify_proof`` on a proof from a real store (its last record)."""
    store = JournalStore.open(store_dir)
    try:
        import asyncio

        asyncio.run(store.sign_tree())
        proof = store.prove_position(store.head().count)
    finally:
        store.close()
    key = Signer.load_or_create(store_dir / "journal").public_key
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        verify_proof(proof, key)
        times.append(time.perf_counter() - started)
    times.sort()
    record = base64.b64decode(proof.split(b"\n")[1][6:])
    return {"config": "tlog_verify", "proof_bytes": len(proof), "record_bytes": len(record),
            "median_us": round(statistics.median(times) * 1e6, 1),
            "p99_us": round(times[int(len(times) * 0.99)] * 1e6, 1)}  # fmt: skip


def plan_cpu(draft: Callable[[int], Any], batch: int = 256, runs: int = 300) -> dict[str, Any]:
    """CPU of ``plan_commit`` for one batch of ``batch`` one-event appends, with and without
    the tree (the planner alone: no disk, so steadier than appends/s on a shared machine)."""
    import asyncio

    from palyra.core.chain import GENESIS
    from palyra.journal import JournalConfig
    from palyra.journal.write.plan import Heads, plan_commit
    from palyra.journal.write.prepare import prepare
    from palyra.journal.write.requests import Append

    loop = asyncio.new_event_loop()
    try:
        requests = [Append(loop, loop.create_future(), prepare([draft(i)], JournalConfig()))
                    for i in range(batch)]  # fmt: skip
    finally:
        loop.close()
    sessions = {e.session_id: GENESIS for r in requests for e in r.events}
    tapes = {e.run_id: 0 for r in requests for e in r.events if e.tape}
    frontier = plan.extend(Frontier(), [(bytes(32), i) for i in range(12345)], b"\0\0")[0]
    heads = Heads(1, GENESIS, sessions, tapes, frontier)
    out: dict[str, Any] = {"config": "tlog_plan", "batch": batch}
    real = plan.extend
    for name in ("with", "without", "with_again", "without_again"):
        if name.startswith("without"):
            plan.extend = _no_tree  # type: ignore[assignment]
        try:
            times = []
            for _ in range(runs):
                started = time.process_time()
                plan_commit(requests, heads)
                times.append(time.process_time() - started)
        finally:
            plan.extend = real
        out[f"{name}_us"] = round(statistics.median(times) * 1e6, 1)
    with_us = min(out["with_us"], out["with_again_us"])
    without_us = min(out["without_us"], out["without_again_us"])
    out["tree_share_of_plan"] = round(1 - without_us / with_us, 3)
    return out


async def session_export_sizes(root: Path, others: tuple[int, ...] = EXPORT_OTHERS
                               ) -> list[dict[str, Any]]:  # fmt: skip
    """Both session exports of one 6-record session, at each journal size."""
    from palyra.journal import EventDraft, JournalConfig, export_bundle

    lines = []
    for count in others:
        data_dir = root / f"export-{count}"
        store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
        try:
            spacing = count // EXPORT_OWN
            for i in range(count):
                if i % spacing == 0 and i // spacing < EXPORT_OWN:
                    await store.append([EventDraft("t.mine", "t", session_id="mine",
                                                   payload={"i": i})])  # fmt: skip
                await store.append([EventDraft("t.other", "t", session_id=f"o{i % 9}",
                                               payload={"i": i})])  # fmt: skip
            await store.sign_tree()
            proofs, bundle = root / f"mine-{count}.proofs", root / f"mine-{count}.ndjson"
            store.export_session_proofs("mine", proofs)
            export_bundle(store, bundle, session_id="mine")
        finally:
            store.close()
        lines.append({"config": "tlog_session_export", "session_records": EXPORT_OWN,
                      "other_records": count, "proofs_bytes": proofs.stat().st_size,
                      "links_bundle_bytes": bundle.stat().st_size})  # fmt: skip
    return lines
