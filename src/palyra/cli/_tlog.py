"""``palyra journal prove|verify-proof|consistency``: the transparency log's proofs.

``prove`` asks the running daemon (``ProveEntry`` over gRPC, found through
``daemon.json`` like ``palyra journal checkpoint``), else reads the data dir and,
when no checkpoint covers the record yet, signs one itself (``--offline`` reads
the data dir even beside a daemon, which signs within a second of an append). ``verify-proof`` needs nothing but the proof file
and the log's public key. ``consistency`` checks that one signed checkpoint
extends another, with the proof from the data dir or the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from palyra.cli._client import Target, running_daemon_target
from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError
from palyra.journal import (
    JournalConfig,
    JournalStore,
    NoteError,
    Witness,
    decode_record,
    position_of,
    verify_checkpoint,
    verify_consistency,
    verify_lines,
    verify_proof,
)

EXIT_OK, EXIT_BAD, EXIT_ERROR = 0, 1, 2
_DAEMON_TIMEOUT_S = 15.0


def _locator(args: argparse.Namespace) -> dict[str, str]:
    if args.position is not None:
        return {"position": str(args.position)}
    if args.approval is not None:
        return {"approval": args.approval}
    if args.run is not None and args.seq is not None:
        return {"run": args.run, "seq": str(args.seq)}
    raise InvalidArgument("name the entry: --position N, --approval ID or --run ID --seq N")


def _prove_local(data_dir: Path, locator: dict[str, str]) -> bytes:
    store = JournalStore.open(data_dir, config=JournalConfig(readonly=True))
    try:
        from palyra.engine import ApprovalReader

        approvals = ApprovalReader(store)
        position = position_of(store, locator,
                               lambda i: (r.run_id if (r := approvals.get(i)) else None))
        try:
            return store.prove_position(position)
        except NotFound:
            if store.tree_size() == 0 or store.head().count < position:
                raise
    finally:
        store.close()
    return _sign_then_prove(data_dir, position)


def _sign_then_prove(data_dir: Path, position: int) -> bytes:
    """No checkpoint covers ``position`` and no daemon signs one: sign it here."""

    async def sign() -> bytes:
        store = JournalStore.open(data_dir)  # DATA_DIR_LOCKED while a daemon runs
        try:
            await store.sign_tree()
            return store.prove_position(position)
        finally:
            store.close()

    try:
        return asyncio.run(sign())
    except PalyraError as exc:
        if exc.code is ErrorCode.DATA_DIR_LOCKED:
            raise NotFound(f"position {position} is newer than the daemon's last signed "
                           "checkpoint; it signs one within a second, try again") from exc
        raise


async def _prove_remote(target: Target, locator: dict[str, str]) -> bytes:
    """``ProveEntry`` of the running daemon (it signs what the data dir would lack)."""
    from grpclib.client import Channel
    from grpclib.exceptions import GRPCError
    from palyra_gen.palyra import v1

    request = v1.ProveEntryRequest(
        position=int(locator.get("position", 0)), approval_id=locator.get("approval", ""),
        run_id=locator.get("run", ""), seq=int(locator.get("seq", 0)))
    channel = Channel(target.host, target.port)
    try:
        stub = v1.JournalServiceStub(channel, metadata=target.metadata)
        reply = await stub.prove_entry(request, timeout=_DAEMON_TIMEOUT_S)
    except GRPCError as exc:
        raise PalyraError(f"the daemon refused: {exc.status.name}: {exc.message}",
                          code=ErrorCode.UNAVAILABLE) from exc
    finally:
        channel.close()
    return reply.proof.encode()


def prove(argv: Sequence[str], data_dir: Path) -> int:
    """Write the ``tlog-proof`` of one journal entry."""
    parser = argparse.ArgumentParser(
        prog="palyra journal prove",
        description="Write a self-contained C2SP tlog-proof of the record holding one event: "
                    "the record, its inclusion proof and the signed checkpoint.")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--position", type=int, help="the event's journal position")
    parser.add_argument("--approval", help="the event deciding (else requesting) this approval")
    parser.add_argument("--run", help="with --seq: the event at this tape seq of the run")
    parser.add_argument("--seq", type=int)
    parser.add_argument("--out", type=Path, help="write here (default stdout)")
    parser.add_argument("--offline", action="store_true",
                        help="read the data dir even when a daemon runs on it")
    args = parser.parse_args(list(argv))
    data_dir = args.data_dir or data_dir
    try:
        locator = _locator(args)
        target = None if args.offline else running_daemon_target(data_dir)
        proof = (asyncio.run(_prove_remote(target, locator)) if target is not None
                 else _prove_local(data_dir, locator))  # fmt: skip
    except (PalyraError, OSError, ValueError) as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.out:
        args.out.write_bytes(proof)
        print(f"wrote {len(proof)} bytes to {args.out}")
    else:
        sys.stdout.buffer.write(proof)
    return EXIT_OK


def _witnesses(specs: Sequence[str]) -> list[Witness]:
    out = []
    for spec in specs:
        name, _, key = spec.partition("=")
        out.append(Witness(name, bytes.fromhex(key)))
    return out


def verify_proof_cmd(argv: Sequence[str]) -> int:
    """Check a ``tlog-proof`` file offline; print the record's events."""
    parser = argparse.ArgumentParser(
        prog="palyra journal verify-proof",
        description="Check a tlog-proof offline: the record's hash, its inclusion in the signed "
                    "checkpoint's tree and the log's signature (no data dir, no daemon).")
    parser.add_argument("file", type=Path)
    parser.add_argument("--public-key", required=True, metavar="HEX", help="the log's ed25519 key")
    parser.add_argument("--origin", help="require this checkpoint origin")
    parser.add_argument("--witness", action="append", default=[], metavar="NAME=HEX",
                        help="a trusted witness key (repeatable)")
    parser.add_argument("--quorum", type=int, default=0, help="witness cosignatures required")
    args = parser.parse_args(list(argv))
    try:
        key = bytes.fromhex(args.public_key)
        with args.file.open("rb") as handle:
            session_file = handle.read(1) == b"{"  # a session's records with their proofs
        if session_file:
            with args.file.open("rb") as handle:  # read a line at a time
                session = verify_lines(handle, key)
            print(f"OK session={session.session_id} records={session.records} "
                  f"events={session.events} checkpoint={session.checkpoint.origin}@"
                  f"{session.checkpoint.size} sealed")
            return EXIT_OK
        proven = verify_proof(args.file.read_bytes(), key, args.origin,
                              _witnesses(args.witness), args.quorum)  # fmt: skip
        record = decode_record(proven.record)
    except (NoteError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"INVALID {exc}", file=sys.stderr)
        return EXIT_BAD
    witnessed = f" witnesses={','.join(proven.witnesses)}" if proven.witnesses else ""
    print(f"OK entry={proven.index} positions={record.first}..{record.last} "
          f"session={record.session_id} checkpoint={proven.checkpoint.origin}@"
          f"{proven.checkpoint.size}{witnessed}")
    for event in record.events():
        print(f"  position={event.position} kind={event.kind} event_id={event.event_id} "
              f"run={event.run_id} tape_seq={event.tape_seq} actor={event.actor}")
    return EXIT_OK


def consistency_cmd(argv: Sequence[str], data_dir: Path) -> int:
    """Prove that checkpoint NEW extends checkpoint OLD (both signed by the log)."""
    parser = argparse.ArgumentParser(
        prog="palyra journal consistency",
        description="Check that a later signed checkpoint extends an earlier one (RFC 9162 "
                    "consistency proof from the data dir or the daemon).")
    parser.add_argument("old", type=Path, help="the earlier checkpoint file")
    parser.add_argument("new", type=Path, help="the later checkpoint file")
    parser.add_argument("--public-key", required=True, metavar="HEX")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(list(argv))
    try:
        key = bytes.fromhex(args.public_key)
        _n, old = verify_checkpoint(args.old.read_bytes(), None, key)
        _n, new = verify_checkpoint(args.new.read_bytes(), old.origin, key)
        if old.size > new.size:
            raise ValueError(f"the checkpoint of size {new.size} is older than the one of "
                             f"size {old.size}: give the earlier one first")
        # Read-only: works beside a running daemon (the tree only grows).
        store = JournalStore.open(args.data_dir or data_dir, config=JournalConfig(readonly=True))
        try:
            path = store.consistency(old.size, new.size)
        finally:
            store.close()
    except (NoteError, ValueError) as exc:
        print(f"INVALID {exc}", file=sys.stderr)
        return EXIT_BAD
    except (PalyraError, OSError) as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not verify_consistency(old.size, new.size, old.root, new.root, path):
        print(f"INCONSISTENT the checkpoint of size {new.size} does not extend the one of "
              f"size {old.size}", file=sys.stderr)
        return EXIT_BAD
    print(f"OK size {new.size} extends size {old.size} ({len(path)} hashes)")
    return EXIT_OK
