"""Verification of a live data dir and of an exported bundle."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from palyra.core.chain import GENESIS, seal_message
from palyra.journal._store import JournalStore
from palyra.journal._types import JournalConfig
from palyra.journal.format.bundle_format import (
    BUNDLE_FORMAT,
    READABLE_VERSIONS,
    SEAL_DIGEST_VERSION,
    CheckpointLine,
    EventLine,
    HeaderLine,
    Line,
    LinkLine,
    PrunedLine,
    SealLine,
    TrailerLine,
    decode_line,
    parse_hash,
)
from palyra.journal.format.signing import signature_valid
from palyra.journal.verify.bundle_records import LineGroups, line_hash
from palyra.journal.verify.chainwalk import ChainVerifier, Tampered
from palyra.journal.verify.covers import COVERING_KINDS, Cover, SpanDigests, cover_of
from palyra.journal.verify.parallel import walk_parallel, worker_pool
from palyra.journal.verify.storewalk import StoreWalk, UnindexedTombstone
from palyra.journal.verify.tree import TreeCheck

if TYPE_CHECKING:
    from multiprocessing.pool import Pool


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Outcome of a verification; ``problem`` is None when intact.

    ``keyed``: trusted keys were given, so authenticity was checked: then
    ``signed_through`` is how far their signatures reach (a full verify fails
    unless they cover the head) and ``sealed`` whether a bundle carries a valid
    exporter's seal. Without keys only the chain's integrity is checked: anyone
    can recompute unkeyed hashes, so the summary says so. ``pruned``: positions
    retention turned into tombstones (their links verify, their content is gone).
    """

    events: int
    links: int
    checkpoints: int
    head_position: int
    head_hash: str
    problem: Tampered | None
    signed_through: int = 0
    sealed: bool = False
    keyed: bool = False
    pruned: int = 0

    @property
    def ok(self) -> bool:
        """True when everything checked out."""
        return self.problem is None

    def summary(self) -> str:
        """One line: ``TAMPERED position=N: why`` or ``OK events=… head=…`` and the trust."""
        if self.problem is not None:
            return self.problem.describe()
        links = f" links={self.links}" if self.links else ""
        links += f" pruned={self.pruned}" if self.pruned else ""
        base = (f"OK events={self.events}{links} checkpoints={self.checkpoints} "
                f"head_position={self.head_position} head={self.head_hash}")
        if not self.keyed:
            return (base + " (unsigned check: the chain is intact, but without a trusted "
                    "--public-key neither authenticity nor completeness is verified)")
        seal = ", sealed by the exporter" if self.sealed else ""
        return (base + f" signed through position {self.signed_through} of "
                f"{self.head_position}{seal}")


def _report(verifier: ChainVerifier, problem: Tampered | None,
            sealed: bool = False) -> VerifyReport:
    return VerifyReport(
        verifier.events,
        verifier.links,
        verifier.checkpoints,
        verifier.position,
        verifier.head.hex(),
        problem,
        verifier.position if sealed else verifier.signed_through,
        sealed,
        bool(verifier.trusted_keys),
        verifier.pruned,
    )


def _require_coverage(verifier: ChainVerifier, what: str) -> None:
    """With trusted keys, the head must be covered by their signatures."""
    if verifier.trusted_keys and verifier.signed_through < verifier.position:
        raise Tampered(
            verifier.signed_through + 1,
            f"signed through position {verifier.signed_through} of {verifier.position}: "
            f"{what} after it is not covered by a signature from a trusted key")


def verify_store(
    source: Path | JournalStore,
    *,
    trusted_keys: Collection[bytes] = (),
    progress: Callable[[int], None] | None = None,
    jobs: int = 1,
) -> VerifyReport:
    """Verify every event and checkpoint of a data dir (opened read-only) or an open store.

    ``progress``, if given, is called with each position once it is verified.
    ``jobs``: processes to hash with; above 1, a data dir (not an open store: the
    workers fork before the journal is opened) long enough is checked in segments on
    that many worker processes (``verify.parallel``), with the same report, failures
    included, as one process gives.
    """
    if isinstance(source, JournalStore):
        return _verify_open_store(source, trusted_keys, progress, None, jobs)
    # Workers fork before the journal is opened here (see verify.parallel).
    with worker_pool(Path(source), jobs) as pool:
        store = JournalStore.open(Path(source), config=JournalConfig(readonly=True))
        try:
            return _verify_open_store(store, trusted_keys, progress, pool, jobs)
        finally:
            store.close()


def _verify_open_store(
    store: JournalStore, trusted_keys: Collection[bytes],
    progress: Callable[[int], None] | None, pool: Pool | None, jobs: int,
) -> VerifyReport:  # fmt: skip
    verifier = ChainVerifier(trusted_keys=trusted_keys)
    unindexed = UnindexedTombstone()
    try:
        with store.env.read() as txn:
            tree = TreeCheck(store.env, txn)
        walk = StoreWalk(store.env, verifier, tree, progress, unindexed)
        walk.check_checkpoints(0)
        walk_parallel(walk, pool, jobs)
        walk.walk()
        walk.end()
        verifier.finish()
        unindexed.raise_first()
        tree.finish()
        _require_coverage(verifier, "the journal (sign the head with `palyra journal "
                                    "checkpoint`)")
    except Tampered as problem:
        return _report(verifier, problem)
    return _report(verifier, None)


def verify_bundle(
    path: Path,
    *,
    trusted_keys: Collection[bytes] = (),
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Verify an exported bundle file; needs no data dir.

    ``progress``, if given, is called with each position (event or link line) once read.
    """
    verifier = ChainVerifier(trusted_keys=trusted_keys)
    covers: list[Cover | tuple[int, str]] = []
    found: Tampered | None = None
    sealed = False
    try:
        with open(path, "rb") as handle:
            sealed = _walk_bundle(handle, verifier, progress, covers)
        verifier.finish()
        if verifier.trusted_keys and not sealed:
            # Checkpoints alone cannot prove the bundle was not cut short (a
            # prefix ending at a checkpoint verifies) or, for a session bundle,
            # that no event of the session was turned into a link line.
            raise Tampered(None, f"signed through position {verifier.signed_through} of "
                                 f"{verifier.position}: the bundle carries no seal by a trusted "
                                 "key, so its end and completeness are unproven")
    except Tampered as problem:
        found = problem
    if covers:
        # Compaction digests: a second pass feeds the covered events (bounded memory).
        bad = _bundle_covers(path, covers, pruned=verifier.pruned > 0)
        if bad is not None and (found is None or found.position is None
                                or bad[0] < found.position):
            found = Tampered(*bad)
    if found is not None:
        return _report(verifier, found)
    return _report(verifier, None, sealed)


def _bundle_covers(path: Path, covers: list[Cover | tuple[int, str]], *,
                   pruned: bool = False) -> tuple[int, str] | None:
    """The first compaction of a bundle whose digest does not recompute, and why."""
    problems = [(p, f"malformed compaction: {why}") for p, why in
                (c for c in covers if isinstance(c, tuple))]
    spans = SpanDigests([c for c in covers if not isinstance(c, tuple)])
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                line = decode_line(raw.rstrip(b"\n"))
            except ValueError:
                continue  # the chain walk reports malformed lines
            if isinstance(line, EventLine) and line.tape_seq >= 0:
                spans.add(line.run_id, line.tape_seq, line.kind, line.payload)
    problems += spans.problems(pruned=pruned)
    return min(problems) if problems else None


def _walk_bundle(
    lines: Iterable[bytes],
    verifier: ChainVerifier,
    progress: Callable[[int], None] | None = None,
    covers: list[Cover | tuple[int, str]] | None = None,
) -> bool:
    """Walk every line; return whether a valid seal ended the bundle."""
    digest = hashlib.sha256()
    header: HeaderLine | None = None
    trailer: TrailerLine | None = None
    sealed = False
    # Event and link lines are checked a whole record at a time (verify/bundle_records).
    groups = LineGroups(verifier, legacy_only=True, progress=progress)
    for number, raw in enumerate(lines, start=1):
        if trailer is not None:
            raise Tampered(None, f"line {number}: data after the trailer")
        line = _decode_numbered(raw, number, groups, verifier)
        if header is None:
            if not isinstance(line, HeaderLine):
                raise Tampered(None, "line 1 is not a bundle header")
            header = _check_header(line, verifier)
            # Versions 1 and 2 hold format 1 records, one per line.
            groups = LineGroups(verifier, legacy_only=header.version == 1, progress=progress)
        elif sealed and not isinstance(line, TrailerLine):
            raise Tampered(verifier.position + 1, f"line {number}: entries after the seal")
        elif isinstance(line, EventLine | LinkLine):
            groups.add(line, number)
            if covers is not None and isinstance(line, EventLine):
                _note_cover(line, covers)
        elif isinstance(line, PrunedLine):
            groups.flush()
            if header.version < 4:
                raise Tampered(line.position, f"line {number}: a pruned record in a version "
                                              f"{header.version} bundle")
            _bundle_tombstone(line, verifier, number)
        elif isinstance(line, CheckpointLine):
            groups.flush()
            _bundle_checkpoint(line, verifier, number)
        elif isinstance(line, SealLine):
            groups.flush()
            if sealed or header.version < 2:
                raise Tampered(None, f"line {number}: unexpected seal")
            _check_seal(line, header, verifier, number, digest.digest())
            sealed = True
        elif isinstance(line, TrailerLine):
            groups.flush()
            trailer = line
            _check_trailer(line, verifier, digest.hexdigest(), number)
            continue
        else:
            groups.flush()
            raise Tampered(
                verifier.position + 1, f"line {number}: unexpected {type(line).__name__}"
            )
        digest.update(raw)
    if trailer is None:
        groups.flush()
        raise Tampered(verifier.position + 1, "bundle truncated (no trailer)")
    return sealed


def _decode_numbered(raw: bytes, number: int, groups: LineGroups,
                     verifier: ChainVerifier) -> Line:
    """Bundle line ``number``, decoded; a cut or malformed line is tampering (what was
    grouped before it is checked first, so an earlier break is the one reported)."""
    if not raw.endswith(b"\n"):
        groups.flush()
        raise Tampered(verifier.position + 1, f"bundle truncated (line {number} is incomplete)")
    try:
        return decode_line(raw[:-1])
    except ValueError as exc:
        groups.flush()
        raise Tampered(verifier.position + 1, f"line {number}: {exc}") from exc


def _note_cover(line: EventLine, covers: list[Cover | tuple[int, str]]) -> None:
    """The span a covering event (a compaction) vouches for, to recompute after the walk."""
    if line.kind in COVERING_KINDS:
        cover = cover_of(line.position, line.run_id, line.tape_seq, line.kind, line.payload)
        if cover is not None:
            covers.append((line.position, cover) if isinstance(cover, str) else cover)


def _check_seal(line: SealLine, header: HeaderLine, verifier: ChainVerifier, number: int,
                lines_sha256: bytes) -> None:
    """The exporter's signature over the head, the session's head and count and (v5 on)
    the digest of every line before it. Checked with or without a key."""
    position = verifier.position
    if line.head_position != position:
        raise Tampered(position + 1, f"line {number} (seal): head_position is "
                                     f"{line.head_position}, expected {position} (the last "
                                     "position of the bundle: entries removed or added)")
    if line.head_hash != verifier.head.hex():
        raise Tampered(position + 1, f"line {number} (seal): head_hash is {line.head_hash}, "
                                     f"expected {verifier.head.hex()} (the global hash at "
                                     f"position {position})")
    if header.scope == "session":
        own_head = verifier.session_heads.get(header.session_id, GENESIS).hex()
        if (line.session_head, line.session_events) != (own_head, verifier.events):
            raise Tampered(None, f"line {number} (seal): session_events is "
                                 f"{line.session_events} and session_head {line.session_head}, "
                                 f"expected {verifier.events} and {own_head}: the bundle holds "
                                 f"that much of session {header.session_id} (events left out "
                                 "or turned into links)")
    elif (line.session_head, line.session_events) != (GENESIS.hex(), 0):
        raise Tampered(None, f"line {number} (seal): a full bundle's seal must have "
                             "session_head GENESIS (64 zeros) and session_events 0")
    digest = lines_sha256 if header.version >= SEAL_DIGEST_VERSION else None
    if digest is not None and line.sha256 != digest.hex():
        raise Tampered(None, f"line {number} (seal): sha256 is {line.sha256 or 'absent'}, "
                             f"expected {digest.hex()} (the SHA-256 of lines 1..{number - 1}: "
                             "a line before the seal was altered)")
    if digest is None and line.sha256:
        raise Tampered(None, f"line {number} (seal): sha256 in a version {header.version} "
                             f"bundle (only version {SEAL_DIGEST_VERSION} seals carry it)")
    try:
        public_key, signature = bytes.fromhex(line.public_key), bytes.fromhex(line.signature)
    except ValueError as exc:
        raise Tampered(None, f"line {number} (seal): public_key or signature is not hex"
                       ) from exc
    if verifier.trusted_keys and public_key not in verifier.trusted_keys:
        raise Tampered(None, f"line {number} (seal): bundle sealed by an untrusted key "
                             f"({line.public_key})")
    if verifier.trusted_keys and digest is None and verifier.pruned:
        raise Tampered(None, f"line {number} (seal): a version {header.version} seal does not "
                             "cover pruned lines' session_id and prev_hash; re-export the "
                             f"bundle (version {SEAL_DIGEST_VERSION} seals cover every line)")
    message = seal_message(header.scope, header.session_id, line.head_position,
                           verifier.head, parse_hash(line.session_head), line.session_events,
                           line.ts_ms, digest)
    if not signature_valid(public_key, message, signature):
        raise Tampered(None, f"line {number} (seal): the seal's signature is invalid")


def _check_header(line: HeaderLine, verifier: ChainVerifier) -> HeaderLine:
    if line.format != BUNDLE_FORMAT:
        raise Tampered(None, f"line 1 (header): format is {line.format!r}, expected "
                             f"{BUNDLE_FORMAT!r}")
    if line.version not in READABLE_VERSIONS:
        raise Tampered(None, f"line 1 (header): version is {line.version}, expected one of "
                             f"{', '.join(map(str, sorted(READABLE_VERSIONS)))}")
    if line.hash != "sha256":
        raise Tampered(None, f"line 1 (header): hash is {line.hash!r}, expected 'sha256'")
    if line.scope == "session":
        verifier.session_id = line.session_id
    elif line.scope != "full":
        raise Tampered(None, f"line 1 (header): scope is {line.scope!r}, expected 'full' or "
                             "'session'")
    elif line.session_id:
        raise Tampered(None, f"line 1 (header): session_id is {line.session_id!r}, expected "
                             "'' (a full bundle names no session)")
    return line


def _bundle_tombstone(line: PrunedLine, verifier: ChainVerifier, number: int) -> None:
    first, where = line.position, f"line {number} (pruned)"
    if line.last < first:
        raise Tampered(first, f"{where}: last is {line.last}, expected at least position "
                              f"{first}")
    verifier.tombstone(first, line.last, line.session_id,
                       line_hash(line.prev_hash, first, where, "prev_hash"),
                       line_hash(line.hash, first, where, "hash"),
                       line_hash(line.global_hash, first, where, "global_hash"), where)


def _bundle_checkpoint(line: CheckpointLine, verifier: ChainVerifier, number: int) -> None:
    position, where = verifier.position, f"line {number} (checkpoint)"
    for field, text in (("public_key", line.public_key), ("signature", line.signature)):
        try:
            ok = bytes.fromhex(text).hex() == text
        except ValueError:
            ok = False
        if not ok:
            raise Tampered(position, f"{where}: {field} is {text!r}, expected lowercase hex")
    verifier.checkpoint(
        line.position, line_hash(line.head_hash, position, where, "head_hash"), line.ts_ms,
        bytes.fromhex(line.public_key), bytes.fromhex(line.signature), where,
    )


def _check_trailer(line: TrailerLine, verifier: ChainVerifier, digest: str, number: int) -> None:
    where = f"line {number} (trailer)"
    if line.head_position != verifier.position:
        raise Tampered(verifier.position + 1,
                       f"{where}: head_position is {line.head_position}, expected "
                       f"{verifier.position} (entries removed or added)")
    if line.head_hash != verifier.head.hex():
        raise Tampered(verifier.position + 1,
                       f"{where}: head_hash is {line.head_hash}, expected {verifier.head.hex()} "
                       f"(the global hash at position {verifier.position})")
    for name, got, want in (("events", line.events, verifier.events),
                            ("links", line.links, verifier.links),
                            ("checkpoints", line.checkpoints, verifier.checkpoints)):
        if got != want:
            raise Tampered(None, f"{where}: {name} is {got}, expected {want} (the bundle's "
                                 f"{name} lines)")
    session = verifier.session_id
    expected = verifier.session_heads.get(session, GENESIS).hex() if session is not None else ""
    if line.session_head != expected:
        raise Tampered(None, f"{where}: session_head is {line.session_head!r}, expected "
                             f"{expected!r}")
    if line.sha256 != digest:
        raise Tampered(None, f"{where}: sha256 is {line.sha256}, expected {digest} (the "
                             f"SHA-256 of lines 1..{number - 1}: a line was added, removed "
                             "or altered)")
