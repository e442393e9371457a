"""Workload tool-loop v1 (the scripted provider's rule, ``palyra.providers._scripted``), as the client sees it.

The harness reaches palyra only through a :class:`Driver` (prepare a session,
start a turn, watch it to the end, decide an approval): in process
(bench/inproc.py) or over gRPC or HTTP against a daemon (bench/transports.py).
:func:`drive` runs N sessions through C closed-loop workers and returns a
:class:`Tally` of client-side latencies; it checks every turn's ``result=K``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from palyra_gen.palyra import v1 as pb

OnEvent = Callable[[pb.TapeEvent], Awaitable[None]]


def user_message(k: int, tool: str) -> str:
    """The workload's user message (K is read back by the scripted model)."""
    return (f"Start from 0 and add 1 to the running total {k} times, one `{tool}` tool call "
            "per step, then reply with the final result.")


class Driver(Protocol):
    """How the harness reaches palyra: in process, over gRPC or over HTTP."""

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        """With ``hitl``, create the session and make the tool ask each time; without,
        nothing (the turn's run creates the session in its first commit, as a client
        that just sends a message would)."""
        ...

    async def start_turn(self, session_key: str, text: str) -> str:
        """Start a run with one user message (done when the loop ends); return its id."""
        ...

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        """Deliver the run's tape events in order until it ends; return the final run."""
        ...

    async def decide_approval(self, approval_id: str) -> None:
        """Approve once, as a different principal than the run's."""
        ...


def _events_of(response: pb.RunStreamResponse) -> list[pb.TapeEvent]:
    return list(response.events) or ([response.event] if response.event is not None else [])


class StreamedTurn:
    """One turn over RunStream (``batch``): its responses, and the run as its tape tells it.

    A client on RunStream (like ``palyra chat``) sends the message and reads the run's
    tape until it ends; the outcome it shows is the tape's: the terminal status and
    the reply. :meth:`run` builds the ``pb.Run`` the harness checks from those.
    """

    def __init__(self, responses: AsyncIterator[pb.RunStreamResponse]) -> None:
        self._responses = responses
        self._first: list[pb.TapeEvent] = []
        self.run_id = ""
        self.state = pb.RunState.UNSPECIFIED
        self.reply = ""

    async def start(self) -> str:
        """Read up to the first response (the accept commit); the run id."""
        async for response in self._responses:
            self._first = _events_of(response)
            if self._first:
                self.run_id = self._first[0].run_id
                return self.run_id
        raise RuntimeError("RunStream ended before its first event")

    async def follow(self, on_event: OnEvent) -> pb.Run:
        """Deliver every event to the end of the stream; the run it ended as."""
        async def each(events: list[pb.TapeEvent]) -> None:
            for event in events:
                if event.status is not None:
                    self.state = event.status.state
                elif event.message_replied is not None:
                    self.reply = event.message_replied.reply_text
                await on_event(event)

        await each(self._first)
        async for response in self._responses:
            await each(_events_of(response))
        return pb.Run(run_id=self.run_id, state=self.state, final_text=self.reply)


@dataclass
class Tally:
    """Client-side measurements of one phase."""

    steps: list[float] = field(default_factory=list)
    by_index: dict[int, list[float]] = field(default_factory=dict)
    turns: list[float] = field(default_factory=list)
    # The turn's call to its first answer (the accept commit's events): the part of
    # the first step before the run's loop starts, as the client sees it.
    accepts: list[float] = field(default_factory=list)
    finals: list[float] = field(default_factory=list)
    runs: int = 0
    approvals: int = 0
    # --hitl: each DecideApproval call to its answer (the decision durable).
    decides: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def one_turn(driver: Driver, session_key: str, k: int, tool: str, tally: Tally) -> None:
    """Drive one turn; record step, final-answer and turn latencies; check ``result=K``."""
    started = time.perf_counter()
    last = started
    results = 0
    run_id = await driver.start_turn(session_key, user_message(k, tool))
    tally.accepts.append(time.perf_counter() - started)
    tally.runs += 1

    async def on_event(event: pb.TapeEvent) -> None:
        nonlocal last, results
        if event.tool_approval_request is not None:
            asked = time.perf_counter()
            await driver.decide_approval(event.tool_approval_request.approval_id)
            tally.decides.append(time.perf_counter() - asked)
            tally.approvals += 1
        elif event.tool_result is not None:
            now = time.perf_counter()
            tally.steps.append(now - last)
            tally.by_index.setdefault(results, []).append(now - last)
            last = now
            results += 1 if event.tool_result.success else 0

    run = await driver.wait(run_id, on_event)
    ended = time.perf_counter()
    tally.turns.append(ended - started)
    tally.finals.append(ended - last)
    if run.state != pb.RunState.DONE or run.final_text != f"result={k}" or results != k:
        tally.failures.append(f"{run_id}: {run.state.name} {run.final_text!r} steps={results}")


async def drive(driver: Driver, args: argparse.Namespace, n: int, prefix: str) -> Tally:
    """N sessions x T turns through C closed-loop workers."""
    tally = Tally()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            key = f"{prefix}-{i}"
            await driver.prepare_session(key, hitl=args.hitl)
            for _ in range(args.turns):
                await one_turn(driver, key, args.steps, args.tool, tally)

    async with asyncio.TaskGroup() as tg:
        for _ in range(args.concurrency):
            tg.create_task(worker())
    return tally


def add_shape_arguments(parser: argparse.ArgumentParser, *, concurrency: int) -> None:
    """The workload's shape on a bench's command line: K steps, N sessions, C workers."""
    parser.add_argument("-k", "--steps", type=int, default=10, help="K tool calls per turn")
    parser.add_argument("-n", "--sessions", type=int, default=200, help="N sessions")
    parser.add_argument("-c", "--concurrency", type=int, default=concurrency,
                        help="C closed-loop workers")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile of seconds, in ms."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return round(ordered[int(rank) - 1] * 1000, 3)


def dist(values: list[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean of seconds, in ms."""
    return {"p50": pct(values, 50), "p90": pct(values, 90), "p99": pct(values, 99),
            "max": round(max(values, default=0) * 1000, 3),
            "mean": round(statistics.fmean(values) * 1000, 3) if values else 0.0}
