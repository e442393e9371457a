"""Every record-level verify failure names where it is, the field and what was expected.

Issue 35 item 10: a reader must be able to find the record (data dir) or the line
(bundle) and see what disagrees. The expected values are recomputed here from the
stored bytes (SHA-256, the link rule of docs/journal/format.md), not copied from the
verifier's output.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import lmdb
import msgspec

from palyra.core.chain import GENESIS, link_hash
from palyra.journal import JournalStore, export_bundle, verify_bundle, verify_store
from palyra.journal import _env as names
from palyra.journal.format.record import (
    GLOBAL_AT,
    HASH_AT,
    HASHED_AT,
    PREV_AT,
    SESSION_AT,
    decode_checkpoint,
    decode_record,
    encode_record,
)

from .helpers import draft, raw_record


async def _fill(data_dir: Path, *, checkpoint: bool = False) -> None:
    """Records: 1..3 of s (one append), 4 of t, 5..6 of s, 7 of t."""
    async with JournalStore.open(data_dir) as store:
        await store.append([draft(i, session_id="s") for i in range(3)])
        await store.append([draft(3, session_id="t")])
        await store.append([draft(i, session_id="s") for i in (4, 5)])
        await store.append([draft(6, session_id="t")])
        if checkpoint:
            await store.checkpoint()


def _rehashed(value: bytes) -> bytes:
    """A format 2 record with its own hash recomputed (what a keyless attacker does)."""
    return value[:HASH_AT] + hashlib.sha256(value[HASHED_AT:]).digest() + value[GLOBAL_AT:]


def _reason(data_dir: Path) -> tuple[int | None, str]:
    report = verify_store(data_dir)
    assert report.problem is not None
    return report.problem.position, report.problem.reason


async def test_a_changed_record_names_its_key_hash_and_the_recomputed_one(data_dir: Path) -> None:
    await _fill(data_dir)
    value = raw_record(data_dir, 6)
    forged = value[:-1] + bytes([value[-1] ^ 1])  # the last payload byte
    raw_record(data_dir, 6, forged)
    position, reason = _reason(data_dir)
    want = hashlib.sha256(forged[HASHED_AT:]).hexdigest()
    assert position == 5
    assert reason.startswith(f"record under key 6 (positions 5..6): hash is "
                             f"{value[HASH_AT:GLOBAL_AT].hex()}, expected {want} (")


async def test_a_broken_session_chain_names_prev_hash_and_the_previous_record(
        data_dir: Path) -> None:  # fmt: skip
    await _fill(data_dir)
    value = raw_record(data_dir, 6)
    previous = raw_record(data_dir, 3)  # s's record before 5..6
    raw_record(data_dir, 6, _rehashed(value[:PREV_AT] + bytes(32) + value[PREV_AT + 32:]))
    position, reason = _reason(data_dir)
    assert position == 5
    assert reason == (f"record under key 6 (positions 5..6): prev_hash is {bytes(32).hex()}, "
                      f"expected {previous[HASH_AT:GLOBAL_AT].hex()} (the hash of the session's "
                      "previous record; session 's')")


async def test_a_session_start_expects_the_genesis_hash(data_dir: Path) -> None:
    await _fill(data_dir)
    value = raw_record(data_dir, 4)  # t's first record
    raw_record(data_dir, 4, _rehashed(value[:PREV_AT] + b"\x01" * 32 + value[PREV_AT + 32:]))
    _, reason = _reason(data_dir)
    assert reason.startswith(f"record under key 4 (position 4): prev_hash is {'01' * 32}, "
                             f"expected {GENESIS.hex()} (the genesis hash: no earlier record")


async def test_a_rehashed_record_names_global_hash_and_the_link_it_should_be(
        data_dir: Path) -> None:  # fmt: skip
    await _fill(data_dir)
    value = raw_record(data_dir, 4)
    before = raw_record(data_dir, 3)[GLOBAL_AT:HASHED_AT]
    forged = _rehashed(value[:-1] + bytes([value[-1] ^ 1]))
    raw_record(data_dir, 4, forged)
    position, reason = _reason(data_dir)
    want = link_hash(before, 4, forged[HASH_AT:GLOBAL_AT]).hex()
    assert position == 4
    assert reason.startswith(f"record under key 4 (position 4): global_hash is "
                             f"{value[GLOBAL_AT:HASHED_AT].hex()}, expected {want} (the link of "
                             "the global hash at position 3 with this record's last position 4")


async def test_a_body_of_another_length_names_count_and_what_it_holds(data_dir: Path) -> None:
    await _fill(data_dir)
    value = raw_record(data_dir, 3)
    record = decode_record(value)
    at = SESSION_AT + len(record.session_id.encode())
    assert value[at] == 0x93  # a fixarray of the record's 3 events
    raw_record(data_dir, 3, _rehashed(value[:at] + b"\x92" + value[at + 1:]))
    _, reason = _reason(data_dir)
    assert reason == ("record under key 3 (positions 1..3): undecodable record (count is 3, "
                      "the body holds 2 events; expected equal)")


async def test_an_undecodable_value_names_its_key(data_dir: Path) -> None:
    await _fill(data_dir)
    raw_record(data_dir, 4, b"garbage")
    position, reason = _reason(data_dir)
    assert position == 4 and reason.startswith("record under key 4: undecodable record (")


async def test_a_checkpoint_names_its_record_and_the_head_it_should_sign(data_dir: Path) -> None:
    await _fill(data_dir, checkpoint=True)
    head = raw_record(data_dir, 7)[GLOBAL_AT:HASHED_AT].hex()
    env = lmdb.open(str(data_dir / "journal"), max_dbs=32)
    db = env.open_db(names.CHECKPOINTS.encode())
    with env.begin(write=True) as txn:
        key, value = next(iter(txn.cursor(db=db)))
        record = decode_checkpoint(value)
        txn.put(key, encode_record(msgspec.structs.replace(record, head=bytes(32))), db=db)
    env.close()
    position, reason = _reason(data_dir)
    assert position == 7
    assert reason.startswith(f"checkpoint record at position 7: head_hash is {bytes(32).hex()}, "
                             f"expected {head} (the global hash at position 7")


# -- bundles: the line number -----------------------------------------------------------


async def _bundle(data_dir: Path, out: Path, session_id: str | None = None) -> list[dict[str, Any]]:
    await _fill(data_dir)
    return _export(data_dir, out, session_id)


def _export(data_dir: Path, out: Path, session_id: str | None = None) -> list[dict[str, Any]]:
    export_bundle(data_dir, out, session_id=session_id)
    return [json.loads(line) for line in out.read_text().splitlines()]


def _write(out: Path, rows: list[dict[str, Any]]) -> str:
    out.write_text("".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n"
                           for r in rows))
    problem = verify_bundle(out).problem
    assert problem is not None
    return problem.reason


def _line_of(rows: list[dict[str, Any]], position: int) -> int:
    return next(n for n, r in enumerate(rows, start=1) if r.get("position") == position
                and r["type"] in ("event", "link"))


async def test_a_changed_event_line_names_the_record_lines(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 6)
    rows[n - 1]["payload"] = {"i": 999}
    reason = _write(out, rows)
    assert reason.startswith(f"lines {n - 1}..{n} (events of one record): hash is "
                             f"{rows[n - 1]['hash']}, expected ")
    assert "(the SHA-256 of the record rebuilt from these lines" in reason


async def test_a_changed_single_event_line_is_named_as_format_2(data_dir: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 4)
    rows[n - 1]["payload"] = {"i": 999}
    reason = _write(out, rows)
    assert reason.startswith(f"line {n} (event): hash is {rows[n - 1]['hash']}, expected ")
    assert "rebuilt from these lines" in reason


async def test_a_missing_line_names_the_next_line_and_the_position(data_dir: Path,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 4)
    del rows[n - 1]
    assert _write(out, rows) == (f"line {n} (event): position is 5, expected 4 (positions "
                                 "4..4 are missing)")


async def test_lines_out_of_order_name_the_line(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 4)
    rows.insert(n, dict(rows[n - 2]))  # position 3 again after 4
    assert _write(out, rows) == (f"line {n + 1} (event): position is 3, expected 5 (out of "
                                 "order: position 3 was already verified)")


async def test_lines_of_one_record_that_disagree_name_the_field(data_dir: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 2)
    rows[n - 1]["session_id"] = "u"
    assert _write(out, rows).startswith(f"line {n} (event): session_id is 'u', expected 's' "
                                        f"(line {n - 1}'s: ")


async def test_a_bad_hex_hash_names_the_field(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 7)
    rows[n - 1]["global_hash"] = "zz"
    assert _write(out, rows) == (f"line {n} (event): global_hash is 'zz', expected 64 lowercase "
                                 "hex digits")


async def test_a_non_canonical_payload_names_the_line(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    rows = await _bundle(data_dir, out)
    n = _line_of(rows, 4)
    rows[n - 1]["payload"] = {"i": 2**70}  # no journal can hold it
    assert _write(out, rows).startswith(f"line {n} (event): payload is not canonical (")


async def test_another_sessions_event_in_a_session_bundle_names_session_id(
        data_dir: Path, tmp_path: Path) -> None:  # fmt: skip
    full, mine = tmp_path / "full.ndjson", tmp_path / "s.ndjson"
    rows = await _bundle(data_dir, full)
    session_rows = _export(data_dir, mine, "s")
    n = _line_of(session_rows, 4)
    assert session_rows[n - 1]["type"] == "link"
    session_rows[n - 1] = rows[_line_of(rows, 4) - 1]  # t's genuine event line
    assert _write(mine, session_rows).startswith(
        f"line {n} (event): session_id is 't', expected 's' (the bundle's session")


async def test_a_link_line_in_a_full_bundle_is_named(data_dir: Path, tmp_path: Path) -> None:
    full, mine = tmp_path / "full.ndjson", tmp_path / "s.ndjson"
    rows = await _bundle(data_dir, full)
    session_rows = _export(data_dir, mine, "s")
    n = _line_of(rows, 4)
    rows[n - 1] = session_rows[_line_of(session_rows, 4) - 1]
    assert _write(full, rows) == (f"line {n} (link): a link line in a full bundle, expected "
                                  "event lines (a full bundle holds every event)")


async def test_a_checkpoint_line_names_head_hash(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.ndjson"
    await _fill(data_dir, checkpoint=True)
    rows = _export(data_dir, out)
    n = next(i for i, r in enumerate(rows, start=1) if r["type"] == "checkpoint")
    want = rows[n - 1]["head_hash"]
    rows[n - 1]["head_hash"] = "00" * 32
    assert _write(out, rows).startswith(f"line {n} (checkpoint): head_hash is {'00' * 32}, "
                                        f"expected {want} (the global hash at position 7")
    rows[n - 1]["head_hash"], rows[n - 1]["public_key"] = want, "XY"
    assert _write(out, rows) == f"line {n} (checkpoint): public_key is 'XY', expected lowercase hex"
