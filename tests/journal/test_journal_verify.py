"""verify / export / checkpoint: live data dir, bundles, signatures, the CLI."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import pytest

from palyra.cli import journal_cmd
from palyra.journal import JournalStore, export_bundle, verify_bundle, verify_store
from palyra.journal._env import journal_dir
from palyra.journal.format.signing import KEY_FILE, Signer

from .helpers import delete_records, draft, raw_record, rewrite_record


async def _fill(data_dir: Path, events: int = 30, *, checkpoint_at: tuple[int, ...] = ()) -> None:
    async with JournalStore.open(data_dir) as store:
        for i in range(events):
            await store.append(
                [
                    draft(
                        i,
                        session_id=f"s{i % 3}",
                        run_id=f"r{i % 2}",
                        tape=True,
                        payload={"i": i, "api_key": "k"},
                    )
                ]
            )
            if i + 1 in checkpoint_at:
                await store.checkpoint()


def _run(command: str, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = journal_cmd.main([command, *argv])
    return code, capsys.readouterr().out.splitlines()


async def test_verify_live_dir_ok(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await _fill(data_dir, checkpoint_at=(10, 30))
    code, out = _run("verify", "--data-dir", str(data_dir), capsys=capsys)
    assert code == 0
    assert out[0].startswith("OK events=30 checkpoints=2 head_position=30 head=")


async def test_verify_names_first_tampered_position(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _fill(data_dir)
    rewrite_record(data_dir, 17, ts_ms=1)
    rewrite_record(data_dir, 20, payload=b"\x80")
    code, out = _run("verify", "--data-dir", str(data_dir), capsys=capsys)
    assert code == 1
    assert out[0].startswith("TAMPERED position=17: record under key 17 (position 17): hash is ")


async def test_verify_detects_rehashed_event(data_dir: Path) -> None:
    # An attacker who also recomputes the record hash still breaks the next link.
    await _fill(data_dir)
    from palyra.core.canonical import canonical_bytes

    rewrite_record(data_dir, 5, payload=canonical_bytes({"i": 999}), rehash=True)
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 5
    assert report.problem.reason.startswith("record under key 5 (position 5): global_hash is ")


async def test_verify_detects_undecodable_and_missing_records(data_dir: Path) -> None:
    await _fill(data_dir)
    raw_record(data_dir, 3, b"garbage")
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 3
    raw_record(data_dir, 3, raw_record(data_dir, 4))
    assert verify_store(data_dir).problem.position == 3  # type: ignore[union-attr]


async def test_truncation_is_caught_by_a_later_checkpoint(data_dir: Path) -> None:
    await _fill(data_dir, checkpoint_at=(30,))
    delete_records(data_dir, [28, 29, 30])
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 28
    assert "beyond the verified chain at 27" in report.problem.reason


async def test_deleting_a_middle_record_is_caught(data_dir: Path) -> None:
    await _fill(data_dir)
    delete_records(data_dir, [12])
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 12


async def test_export_and_verify_bundle(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _fill(data_dir, checkpoint_at=(0, 15, 30))
    out = tmp_path / "bundle.ndjson"
    code, lines = _run("export", "--data-dir", str(data_dir), "--out", str(out), capsys=capsys)
    assert code == 0 and lines[0].startswith("exported events=30 checkpoints=2")
    assert out.stat().st_mode & 0o777 == 0o600
    code, lines = _run("verify", "--bundle", str(out), capsys=capsys)
    assert code == 0 and lines[0].startswith("OK events=30 checkpoints=2")
    content = out.read_text().splitlines()
    header, trailer = json.loads(content[0]), json.loads(content[-1])
    assert header["type"] == "header" and header["version"] == 5
    assert trailer["type"] == "trailer" and trailer["events"] == 30
    assert trailer["head_hash"] == verify_store(data_dir).head_hash


def test_a_session_export_is_its_records_with_proofs_and_verify_checks_it(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export --session`` writes the session's records with their inclusion proofs (it
    signs the tree first: no daemon holds the data dir); ``verify --bundle`` checks it,
    and with the key refuses one whose newest record was cut off."""
    asyncio.run(_fill(data_dir))
    out = tmp_path / "s1.proofs"
    code, lines = _run("export", "--data-dir", str(data_dir), "--out", str(out),
                       "--session", "s1", capsys=capsys)  # fmt: skip
    assert code == 0 and lines == [f"exported records=10 of session s1 with inclusion proofs "
                                   f"to {out}"]  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["format"] == "palyra.journal.session-proofs"
    assert [r["type"] for r in rows].count("record") == 10  # nothing of s0 or s2
    key = Signer.load_or_create(journal_dir(data_dir)).public_key.hex()
    code, lines = _run("verify", "--bundle", str(out), "--public-key", key, capsys=capsys)
    assert code == 0 and lines[0].startswith("OK session=s1 records=10 events=10 checkpoint=")
    code, lines = _run("verify", "--bundle", str(out), capsys=capsys)
    assert code == 0 and "unsigned check" in lines[0]
    assert journal_cmd.main(["traces", "--bundle", str(out)]) == 2  # no event lines to read
    assert "--links" in capsys.readouterr().err
    text = out.read_text().splitlines()
    end = json.loads(text[-1])
    end["records"], end["session_head"] = 9, _entry(rows[-3]["record"])
    cut = [*text[:-2], json.dumps(end, separators=(",", ":"), sort_keys=True)]
    end["sha256"] = hashlib.sha256("".join(t + "\n" for t in cut[:-1]).encode()).hexdigest()
    cut[-1] = json.dumps(end, separators=(",", ":"), sort_keys=True)
    out.write_text("".join(t + "\n" for t in cut))
    code, lines = _run("verify", "--bundle", str(out), capsys=capsys)
    assert code == 0  # without the key, a cut file is consistent
    code, lines = _run("verify", "--bundle", str(out), "--public-key", key, capsys=capsys)
    assert code == 1 and lines[0].startswith("TAMPERED: ") and "seal" in lines[0]


def _entry(record_b64: str) -> str:
    return base64.b64decode(record_b64)[1:33].hex()


async def test_a_session_bundle_with_links_verifies_without_other_sessions_content(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _fill(data_dir, checkpoint_at=(20,))
    out = tmp_path / "s1.ndjson"
    code, _ = _run(
        "export", "--data-dir", str(data_dir), "--out", str(out), "--session", "s1", "--links",
        capsys=capsys,
    )
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    events = [r for r in rows if r["type"] == "event"]
    assert {e["session_id"] for e in events} == {"s1"} and len(events) == 10
    assert all("payload" not in r for r in rows if r["type"] == "link")
    report = verify_bundle(out)
    assert report.ok and report.events == 10 and report.links == 20 and report.checkpoints == 1
    # Replacing one of the session's events by a bare link breaks its session chain.
    lines = out.read_text().splitlines()
    i = next(k for k, r in enumerate(rows) if r["type"] == "event" and r["position"] == 5)
    lines[i] = json.dumps(
        {
            "global_hash": rows[i]["global_hash"],
            "hash": rows[i]["hash"],
            "position": 5,
            "type": "link",
        },
        separators=(",", ":"),
    )
    out.write_text("\n".join(lines) + "\n")
    report = verify_bundle(out)
    assert report.problem is not None and report.problem.position == 8


async def test_bundle_tamper_reports_first_position(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _fill(data_dir)
    out = tmp_path / "b.ndjson"
    export_bundle(data_dir, out)
    lines = out.read_text().splitlines()
    row = json.loads(lines[17])
    assert row["position"] == 17
    row["payload"]["i"] = 1000
    lines[17] = json.dumps(row, separators=(",", ":"), sort_keys=True)
    out.write_text("\n".join(lines) + "\n")
    code, printed = _run("verify", "--bundle", str(out), capsys=capsys)
    assert code == 1
    assert printed[0].startswith("TAMPERED position=17: line 18 (event): hash is ")


def test_checkpoint_cli_and_key(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_fill(data_dir, events=3))
    code, out = _run("checkpoint", "--data-dir", str(data_dir), capsys=capsys)
    assert code == 0 and out[0].startswith("checkpoint position=3 head=")
    key = data_dir / "journal" / KEY_FILE
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    public = out[0].split("key=")[1].split()[0]
    code, out = _run("verify", "--data-dir", str(data_dir), "--public-key", public, capsys=capsys)
    assert code == 0 and "checkpoints=1" in out[0]
    code, out = _run(
        "verify", "--data-dir", str(data_dir), "--public-key", "00" * 32, capsys=capsys
    )
    assert code == 1 and out[0].startswith(
        "TAMPERED position=3: checkpoint record at position 3: public_key is ")
    assert "expected one of the trusted keys" in out[0]


async def test_forged_checkpoint_is_rejected(data_dir: Path) -> None:
    await _fill(data_dir, events=5, checkpoint_at=(5,))
    async with JournalStore.open(data_dir) as store:
        [cp] = store.checkpoints()
    import lmdb
    import msgspec

    from palyra.journal import _env as names
    from palyra.journal.format.record import decode_checkpoint, encode_record

    env = lmdb.open(str(data_dir / "journal"), max_dbs=32)
    db = env.open_db(names.CHECKPOINTS.encode())
    with env.begin(write=True) as txn:
        key, value = next(iter(txn.cursor(db=db)))
        record = decode_checkpoint(value)
        forged = bytes([record.signature[0] ^ 1]) + record.signature[1:]
        txn.put(key, encode_record(msgspec.structs.replace(record, signature=forged)), db=db)
    env.close()
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 5
    assert "signature" in report.problem.reason
    assert cp.position == 5


async def test_checkpoint_while_daemon_holds_the_lock(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with JournalStore.open(data_dir) as store:
        await store.append([draft()])
        code = journal_cmd.checkpoint(["--data-dir", str(data_dir)])
        assert code == 2
        assert "DATA_DIR_LOCKED" in capsys.readouterr().err


async def test_verify_while_writer_is_running(data_dir: Path) -> None:
    # Read-only verification in another process must work next to a live writer.
    import subprocess
    import sys

    async with JournalStore.open(data_dir) as store:
        await store.append([draft(i) for i in range(50)])
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "palyra.cli.journal_cmd",
            "verify",
            "--data-dir",
            str(data_dir),
            stdout=subprocess.PIPE,
        )
        for i in range(20):
            await store.append([draft(100 + i)])
        stdout, _ = await proc.communicate()
        assert proc.returncode == 0, stdout
        assert stdout.decode().startswith("OK events=")


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert journal_cmd.main([]) == 2
    assert journal_cmd.main(["verify", "--data-dir", str(tmp_path / "none")]) == 2
    assert "ERROR NOT_FOUND" in capsys.readouterr().err
    assert journal_cmd.main(["export"]) == 2  # --out is required
    assert journal_cmd.main(["verify", "--bundle", str(tmp_path / "none.ndjson")]) == 2


async def test_a_checkpoint_time_past_i64_is_tampered_not_a_crash(tmp_path: Path) -> None:
    # Found by the outsider's random byte flips: the signed message packs ts_ms as
    # an i64, so a stored value past it must be reported, not raise struct.error.
    import lmdb
    import msgspec

    data = tmp_path / "data"
    async with JournalStore.open(data) as store:
        await store.append([draft(0)])
        await store.checkpoint()
    env = lmdb.open(str(next(data.rglob("data.mdb")).parent), max_dbs=64)
    try:
        db = env.open_db(b"_checkpoints")
        with env.begin(write=True) as txn:
            [(key, raw)] = list(txn.cursor(db=db))
            record = msgspec.msgpack.decode(raw)
            record["ts_ms"] = 2**63 + 5
            txn.put(key, msgspec.msgpack.encode(record), db=db)
    finally:
        env.close()
    report = verify_store(data)
    assert report.problem is not None and "undecodable checkpoint" in report.problem.reason
