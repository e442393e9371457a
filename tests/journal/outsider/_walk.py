"""The chain walk shared by the data dir and the bundle: both chains, positions, retention."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._layout import GENESIS, PRUNED_KIND, link_hash

# -- report --------------------------------------------------------------------------------

@dataclass
class Report:
    """What a verification found. `position` is None for problems not tied to one."""

    ok: bool = True
    events: int = 0          # positions whose events are present (not pruned)
    records: int = 0
    pruned: int = 0          # positions held by tombstones / pruned lines
    links: int = 0
    checkpoints: int = 0
    head_position: int = 0
    head_hash: str = "0" * 64
    position: int | None = None
    reason: str = ""
    # Checkpoints signed by a key other than the data dir's own (informational: without
    # trusted keys any key is accepted, as by the journal's verifier).
    foreign_keys: int = 0


class Bad(Exception):
    """A verification failure at a position (None: not tied to one)."""

    def __init__(self, position: int | None, reason: str) -> None:
        super().__init__(f"position={position}: {reason}")
        self.position = position
        self.reason = reason


class LineBad(Bad):
    """A malformed or missing bundle line: named at the position after the verified ones."""

    def __init__(self, reason: str) -> None:
        super().__init__(None, reason)


@dataclass
class Rec:
    """One record, whatever its source (stored record or bundle lines)."""

    kind: str                 # "record" (format 1/2 or event lines), "tombstone", "link"
    first: int
    last: int
    session_id: str | None    # None for link lines
    prev_hash: bytes | None   # None for link lines
    hash: bytes
    global_hash: bytes
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Chain:
    """The walk's state: both chains, positions and the retention rules."""

    position: int = 0
    prev_global: bytes = GENESIS
    sessions: dict[str, bytes] = field(default_factory=dict)
    session_events: dict[str, int] = field(default_factory=dict)
    seen_unpruned: bool = False
    last_tombstone: tuple[int, bytes] | None = None    # (last position, global hash)
    pruned_claim: tuple[int, int, str] | None = None   # (position, through, head_hash)
    report: Report = field(default_factory=Report)

    def check_positions(self, first: int, last: int, key: int | None,
                        key_first: bool = False) -> int:
        """Positions continue the chain and the key is `last`.

        A gap or overlap names the position the walk expected; a key that is not `last`
        names the record's claimed first position. A record is checked for the gap first,
        a tombstone (`key_first`) for its key first.
        """
        expected = self.position + 1
        if key_first and key is not None and key != last:
            raise Bad(first, f"record under key {key} claims positions {first}..{last}")
        if first != expected:
            if first > expected:
                raise Bad(expected, f"position missing (next entry has position {first})")
            raise Bad(expected, f"entry for position {first} is out of order")
        if last < first:
            raise Bad(expected, f"record claims positions {first}..{last}")
        if key is not None and key != last:
            raise Bad(first, f"record under key {key} claims positions {first}..{last}")
        return expected

    def accept(self, rec: Rec) -> None:
        at = self.position + 1
        if rec.kind == "tombstone" and self.seen_unpruned:
            raise Bad(at, "pruned record after unpruned events")
        if rec.session_id is not None:
            assert rec.prev_hash is not None
            if rec.prev_hash != self.sessions.get(rec.session_id, GENESIS):
                raise Bad(at, f"prev_hash does not link to the previous record of session "
                              f"{rec.session_id!r}")
        if link_hash(self.prev_global, rec.last, rec.hash) != rec.global_hash:
            raise Bad(at, "global link mismatch (chain order or link hash changed)")
        n = rec.last - rec.first + 1
        if rec.session_id is not None:
            self.sessions[rec.session_id] = rec.hash
        if rec.kind == "record":
            # A seal's session_events counts the session's events present in full, not
            # its pruned positions.
            sid = rec.session_id or ""
            self.session_events[sid] = self.session_events.get(sid, 0) + n
        self.position = rec.last
        self.prev_global = rec.global_hash
        r = self.report
        r.records += 1
        if rec.kind == "tombstone":
            self.last_tombstone = (rec.last, rec.global_hash)
            r.pruned += n
        elif rec.kind == "link":
            r.links += n
        else:
            self.seen_unpruned = True
            r.events += n
            for i, ev in enumerate(rec.events):
                if ev["kind"] == PRUNED_KIND:
                    p = ev["payload"]
                    through = p.get("through") if isinstance(p, dict) else None
                    head = p.get("head_hash") if isinstance(p, dict) else None
                    self.pruned_claim = (rec.first + i, through if isinstance(through, int)
                                         else -1, head if isinstance(head, str) else "")

    def check_pruned_claim(self) -> None:
        """After a full walk: the latest `journal.pruned` event states the last tombstone."""
        if self.last_tombstone is None and self.pruned_claim is None:
            return
        last, glob = self.last_tombstone or (0, GENESIS)
        if self.pruned_claim is None:
            raise Bad(1, f"positions 1..{last} are pruned but no journal.pruned event "
                         f"records it")
        pos, through, head = self.pruned_claim
        if through != last or head != glob.hex():
            raise Bad(pos, f"journal.pruned says positions up to {through} were pruned, the "
                           f"log has tombstones up to {last}")

    def finish(self) -> Report:
        self.report.head_position = self.position
        self.report.head_hash = self.prev_global.hex()
        return self.report


def fail_report(report: Report, bad: Bad) -> Report:
    report.ok = False
    report.position = bad.position
    report.reason = bad.reason
    return report

