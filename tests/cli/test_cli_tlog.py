"""The transparency log against a live daemon: ``/tlog/`` over HTTP, the RPCs, and one
approval proven with ``palyra journal prove`` then checked offline with ``verify-proof``."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from palyra.journal.format.signing import Signer
from palyra.journal.tlog.merkle import leaf_hash, verify_consistency
from palyra.journal.tlog.note import parse_checkpoint, parse_note, verify_checkpoint
from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}, **extra}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", "journal", *args],
                          capture_output=True, text=True, env=_env(), timeout=60, check=False)


def _approved_run(base: str, headers: dict[str, str]) -> tuple[str, str]:
    """A run that asked for one approval, approved and done: (run id, approval id)."""
    sid = httpx.post(f"{base}/v1/sessions:resolve", headers=headers,
                     json={"sessionKey": "hitl"}).json()["session"]["sessionId"]
    httpx.post(f"{base}/v1/sessions/{sid}/tool-postures", headers=headers,
               json={"toolName": "add", "posture": "ask_each_time"})
    run = httpx.post(f"{base}/v1/runs", headers=headers, timeout=30, json={
        "sessionId": sid, "complete": True, "wait": True, "input": {
            "text": "Start from 0 and add 1 to the running total 1 times, one add tool call "
                    "per step, then reply with the final result."}}).json()["run"]["runId"]
    approval = httpx.get(f"{base}/v1/approvals?state=pending&run_id={run}",
                         headers=headers).json()["approvals"][0]["approvalId"]
    httpx.post(f"{base}/v1/approvals/{approval}:decide", headers=headers,
               json={"decision": "approve"})
    for _ in range(300):
        state = httpx.get(f"{base}/v1/runs/{run}", headers=headers).json()["run"]["state"]
        if state == "RUN_STATE_DONE":
            break
        time.sleep(0.05)
    return run, approval


def _signed_size(base: str, at_least: int) -> bytes:
    """The served checkpoint once it covers ``at_least`` entries (the daemon signs within 1 s)."""
    for _ in range(100):
        got = httpx.get(f"{base}/tlog/checkpoint")
        if got.status_code == 200 and parse_checkpoint(parse_note(got.content).body).size >= at_least:
            return got.content
        time.sleep(0.1)
    raise AssertionError("the daemon did not sign the grown tree")


def test_an_approval_proven_offline_and_the_log_served_over_http(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with DaemonProcess(data_dir, env=_env()) as daemon:
        headers = {"authorization": f"Bearer {daemon.token}", "x-palyra-principal": "admin:t",
                   "x-palyra-device-id": "01J00000000000000000000000"}
        base = f"http://127.0.0.1:{daemon.http_port}"
        run, approval = _approved_run(base, headers)
        first = _signed_size(base, 1)
        rpc_note = httpx.get(f"{base}/v1/journal/tlog/checkpoint", headers=headers).json()
        assert int(rpc_note["treeSize"]) >= parse_checkpoint(parse_note(first).body).size
        assert parse_note(rpc_note["note"].encode()).signatures
        (tmp_path / "old.checkpoint").write_bytes(first)
        # Proven through the daemon (ProveEntry over gRPC), then checked with nothing else.
        made = _cli("prove", "--approval", approval, "--data-dir", str(data_dir),
                    "--out", str(tmp_path / "approval.tlog-proof"))
        assert made.returncode == 0, made.stderr
        public_key = Signer.load_or_create(data_dir / "journal").public_key.hex()
        checked = _cli("verify-proof", str(tmp_path / "approval.tlog-proof"),
                       "--public-key", public_key)
        assert checked.returncode == 0, checked.stderr
        assert "kind=tape.tool_approval_response" in checked.stdout
        # The same by run and tape seq, and a wrong key is refused.
        by_seq = _cli("prove", "--run", run, "--seq", "0", "--data-dir", str(data_dir),
                      "--out", str(tmp_path / "seq0.tlog-proof"))
        assert by_seq.returncode == 0, by_seq.stderr
        wrong = _cli("verify-proof", str(tmp_path / "seq0.tlog-proof"), "--public-key", "11" * 32)
        assert wrong.returncode == 1 and "INVALID" in wrong.stderr
        # The run's session with its records' proofs, read beside the daemon, checked offline.
        session = httpx.get(f"{base}/v1/runs/{run}", headers=headers).json()["run"]["sessionId"]
        exported = _cli("export", "--session", session, "--data-dir", str(data_dir),
                        "--out", str(tmp_path / "session.proofs"))
        assert exported.returncode == 0, exported.stderr
        whole = _cli("verify-proof", str(tmp_path / "session.proofs"), "--public-key", public_key)
        assert whole.returncode == 0 and f"session={session}" in whole.stdout, whole.stderr
        verified = _cli("verify", "--bundle", str(tmp_path / "session.proofs"),
                        "--public-key", public_key)
        assert verified.returncode == 0 and f"OK session={session}" in verified.stdout
        # tlog-tiles: the level-0 tile's hashes are the leaves of the entry bundle's entries.
        note = _signed_size(base, 1)
        tree_size = parse_checkpoint(parse_note(note).body).size
        width = min(tree_size, 256)
        suffix = "" if width == 256 else f".p/{width}"
        tile = httpx.get(f"{base}/tlog/tile/0/000{suffix}").content
        bundle = httpx.get(f"{base}/tlog/tile/entries/000{suffix}").content
        entries = [bundle[i + 2:i + 34] for i in range(0, len(bundle), 34)]
        assert tile == b"".join(leaf_hash(e) for e in entries) and len(entries) == width
        assert httpx.get(f"{base}/tlog/tile/0/x001/000").status_code == 404
        assert httpx.get(f"{base}/tlog/tile/00/000").status_code == 404
        # More events, a later checkpoint: consistent with the first, by the CLI and the RPC.
        httpx.post(f"{base}/v1/runs", headers=headers, timeout=30, json={
            "input": {"text": "hello"}, "complete": True, "wait": True})
        later = _signed_size(base, tree_size + 1)
        (tmp_path / "new.checkpoint").write_bytes(later)
        consistent = _cli("consistency", str(tmp_path / "old.checkpoint"),
                          str(tmp_path / "new.checkpoint"), "--public-key", public_key,
                          "--data-dir", str(data_dir))
        assert consistent.returncode == 0 and consistent.stdout.startswith("OK"), consistent.stderr
        inverted = _cli("consistency", str(tmp_path / "new.checkpoint"),
                        str(tmp_path / "old.checkpoint"), "--public-key", public_key,
                        "--data-dir", str(data_dir))
        assert inverted.returncode != 0
        _n, old = verify_checkpoint(first, None, bytes.fromhex(public_key))
        rpc = httpx.get(f"{base}/v1/journal/tlog:consistency?old_size={old.size}"
                        f"&new_size={tree_size}", headers=headers)
        assert rpc.status_code == 200, rpc.text
        _n, mid = verify_checkpoint(note, old.origin, bytes.fromhex(public_key))
        hashes = [base64.b64decode(h) for h in rpc.json().get("hashes", [])]
        assert verify_consistency(old.size, mid.size, old.root, mid.root, hashes)


async def _fill(data_dir: Path, records: int) -> None:
    """``records`` records written before the daemon starts (one event each)."""
    from palyra.journal import EventDraft, JournalConfig, JournalStore

    store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
    try:
        for i in range(records):
            await store.append([EventDraft("t.fill", "t", session_id=f"s{i % 3}",
                                           payload={"i": i})])  # fmt: skip
    finally:
        store.close()


def test_tiles_are_cached_for_good_and_the_checkpoint_for_a_second(tmp_path: Path) -> None:
    """``tlog-tiles``: a tile never changes once it exists (full or partial: ``.p/<W>``
    names its width), so caches keep it; the checkpoint moves, so they must not; a tile
    past the tree appears later, so its 404 is not kept either."""
    data_dir = tmp_path / "data"
    asyncio.run(_fill(data_dir, 300))
    with DaemonProcess(data_dir, env=_env()) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        size = parse_checkpoint(parse_note(_signed_size(base, 300)).body).size
        immutable = "public, max-age=31536000, immutable"
        for path in ("tile/0/000", "tile/entries/000", f"tile/0/001.p/{size - 256}",
                     f"tile/entries/001.p/{size - 256}", "tile/1/000.p/1"):
            got = httpx.get(f"{base}/tlog/{path}")
            assert got.status_code == 200, path
            assert got.headers["cache-control"] == immutable, path
        checkpoint = httpx.get(f"{base}/tlog/checkpoint")
        assert checkpoint.headers["cache-control"] == "public, max-age=1"
        for missing in ("tile/0/002", f"tile/0/001.p/{size - 255}", "tile/0/1"):
            got = httpx.get(f"{base}/tlog/{missing}")
            assert got.status_code == 404, missing
            assert got.headers["cache-control"] == "no-store", missing
