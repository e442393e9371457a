"""``palyra learning list | accept | reject``: what post-run reflection proposes to remember."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.cli._render import enum_name, format_ms

_STATES = {enum_name(s).removeprefix("learning_candidate_state_"): s
           for s in v1.LearningCandidateState if s.value}


def _row(c: v1.LearningCandidate) -> list[str]:
    return [c.candidate_id, c.kind, enum_name(c.state), str(c.confidence_bps), c.run_id or "-",
            format_ms(c.created_at_unix_ms), " ".join(c.text.split())[:60]]


async def _list(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.learning.list_candidates(v1.ListCandidatesRequest(
        state=_STATES.get(args.state, v1.LearningCandidateState.UNSPECIFIED), run_id=args.run,
        limit=args.limit))
    return Shown(answer.candidates, ["CANDIDATE", "KIND", "STATE", "CONFIDENCE BPS", "RUN",
                                     "CREATED", "TEXT"], [_row(c) for c in answer.candidates])


async def _accept(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.learning.accept_candidate(v1.AcceptCandidateRequest(
        candidate_id=args.candidate_id, reason=args.reason))
    c = answer.candidate or v1.LearningCandidate()
    return Shown(c, line=f"candidate {c.candidate_id}: {enum_name(c.state)}"
                 + (f" (memory {c.memory_id})" if c.memory_id else ""))


async def _reject(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.learning.reject_candidate(v1.RejectCandidateRequest(
        candidate_id=args.candidate_id, reason=args.reason))
    c = answer.candidate or v1.LearningCandidate()
    return Shown(c, line=f"candidate {c.candidate_id}: {enum_name(c.state)}")


def add_parser(commands: SubParsers) -> None:
    """Register the ``learning`` group."""
    sub = add_group(commands, "learning", "review what post-run reflection proposes to "
                                          "remember")
    listing = add_command(sub, "list", "learning candidates (yours; all for operators)", _list)
    listing.add_argument("--state", choices=sorted(_STATES), default="")
    listing.add_argument("--run", default="", help="only this run's candidates")
    listing.add_argument("--limit", type=int, default=100)
    for name, run, verb in (("accept", _accept, "store it as memory"),
                            ("reject", _reject, "drop it")):
        decide = add_command(sub, name, f"{name} a candidate ({verb})", run)
        decide.add_argument("candidate_id")
        decide.add_argument("--reason", default="", help="recorded with the decision")
