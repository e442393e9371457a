"""Learning from a finished run, as data: candidates, thresholds, procedures, the prompt.

Pure functions only. :mod:`palyra.learning.reflection` runs them over a run's
tape and the model's answer, and journals the result.

Thresholds (basis points): a candidate below its kind's review floor is
dropped; at or above its auto-write threshold it is applied at once (a memory
item); in between it waits for review. Procedures are found by the daemon,
not the model (a tool sequence the run repeated), and always wait for review.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

MAX_CANDIDATES = 24
REVIEW_FLOOR_BPS: Mapping[str, int] = {"durable_fact": 7500, "preference": 8000,
                                       "procedure": 8500}
AUTO_WRITE_BPS: Mapping[str, int] = {"durable_fact": 9000, "preference": 9000}
KINDS = tuple(REVIEW_FLOOR_BPS)
MAX_TEXT = 500
REFLECTION_MARKER = "palyra.reflection.v1"
REFLECTION_PROMPT = f"""{REFLECTION_MARKER}
You review a finished conversation between a user and an agent. List what is worth
remembering for later conversations with this user: durable facts the user stated
(kind "durable_fact") and the user's preferences (kind "preference"). Only what the
user said, never guesses. Answer with JSON only:
{{"candidates": [{{"kind": "durable_fact" | "preference", "text": "...",
  "confidence_bps": 0..10000, "tape_seqs": [the [seq N] numbers it came from]}}]}}"""


class State(enum.StrEnum):
    """Mirrors ``palyra.v1.LearningCandidateState``."""

    PENDING_REVIEW = "pending_review"
    APPLIED = "applied"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """One learning candidate as stored (``memory`` table, ``candidate:<id>``)."""

    candidate_id: str
    kind: str
    text: str
    confidence_bps: int
    state: str
    session_id: str
    run_id: str
    principal: str
    tape_seqs: list[int]
    positions: list[int]
    source_sha256: str
    task_id: str = ""
    memory_id: str = ""
    decided_by: str = ""
    decided_ms: int = 0
    reason: str = ""
    created_ms: int = 0


@dataclass(frozen=True, slots=True)
class Proposal:
    """A candidate before it is stored: what, how sure, and from which tape events."""

    kind: str
    text: str
    confidence_bps: int
    tape_seqs: tuple[int, ...]


def candidate_id(run_id: str, kind: str, text: str) -> str:
    """Deterministic: reflecting on the same run twice finds the same ids."""
    return "lc" + hashlib.sha256(f"{run_id}\0{kind}\0{text}".encode()).hexdigest()[:30]


def fingerprint(principal: str, kind: str, text: str) -> str:
    """The same proposal for the same person, whatever run it came from.

    Case and spacing do not make a proposal new: a preference stated in every
    session is proposed once, not once per run.
    """
    normal = " ".join(text.casefold().split())
    return hashlib.sha256(f"{principal}\0{kind}\0{normal}".encode()).hexdigest()[:32]


def initial_state(kind: str, confidence_bps: int) -> State | None:
    """Applied, pending review, or None (below the kind's review floor: dropped)."""
    if confidence_bps < REVIEW_FLOOR_BPS.get(kind, 10_001):
        return None
    auto = AUTO_WRITE_BPS.get(kind)
    return State.APPLIED if auto is not None and confidence_bps >= auto else State.PENDING_REVIEW


def sampled(run_id: str, percent: int) -> bool:
    """Whether to reflect on ``run_id``: its SHA-256's first byte, scaled to 0..99, is
    below ``percent`` (100: every run; 0: none). Deterministic per run."""
    return hashlib.sha256(run_id.encode()).digest()[0] * 100 // 256 < percent


def procedures(calls: Sequence[tuple[int, str]], *, longest: int = 4) -> list[Proposal]:
    """Tool sequences the run repeated: every run of 2..``longest`` consecutive tool
    names seen at least twice, except one inside a longer sequence seen as often.

    ``calls`` are ``(tape_seq, tool_name)`` in tape order.
    """
    names = [name for _seq, name in calls]
    found: dict[tuple[str, ...], list[int]] = {}
    for size in range(2, longest + 1):
        for start in range(len(names) - size + 1):
            found.setdefault(tuple(names[start:start + size]), []).append(start)
    repeated = {seq: starts for seq, starts in found.items() if len(starts) >= 2}
    out = []
    for seq, starts in sorted(repeated.items(), key=lambda kv: (-len(kv[0]), kv[0])):
        if any(len(other) > len(seq) and len(repeated[other]) >= len(starts)
               and _contains(other, seq) for other in repeated):
            continue
        count = len(starts)
        seqs = tuple(sorted({calls[s + i][0] for s in starts for i in range(len(seq))}))
        out.append(Proposal("procedure", f"tool sequence {' -> '.join(seq)} (seen {count} times)",
                            min(9900, 8500 + 250 * (count - 2)), seqs))
    return out


def _contains(longer: tuple[str, ...], shorter: tuple[str, ...]) -> bool:
    return any(longer[i:i + len(shorter)] == shorter
               for i in range(len(longer) - len(shorter) + 1))


def transcript(lines: Sequence[tuple[int, str, str]]) -> str:
    """The prompt's conversation: ``[seq N] role: text`` per ``(seq, role, text)``."""
    return "\n".join(f"[seq {seq}] {role}: {' '.join(text.split())}" for seq, role, text in lines)


def parse_reflection(text: str, known_seqs: set[int]) -> list[Proposal]:
    """The model's candidates, validated: known kinds (not procedures: those are
    the daemon's), text 1..500 chars, confidence clamped to 0..10000, tape seqs
    that exist in the run. Anything malformed is skipped, never fatal."""
    start, end = text.find("{"), text.rfind("}")
    try:
        data: Any = msgspec.json.decode(text[start:end + 1]) if start >= 0 < end else {}
    except msgspec.DecodeError:
        return []
    items = data.get("candidates", []) if isinstance(data, dict) else []
    out: list[Proposal] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind, body = item.get("kind"), item.get("text")
        bps, seqs = item.get("confidence_bps"), item.get("tape_seqs", [])
        if kind not in ("durable_fact", "preference") or not isinstance(body, str):
            continue
        body = " ".join(body.split())[:MAX_TEXT]
        if not body or not isinstance(bps, int) or isinstance(bps, bool):
            continue
        good = tuple(sorted({s for s in seqs if isinstance(s, int) and s in known_seqs})
                     ) if isinstance(seqs, list) else ()
        if not good:
            continue  # a candidate must point at where it came from
        out.append(Proposal(kind, body, max(0, min(10_000, bps)), good))
    return out
