"""Where an HTTP turn waits: timestamps on both sides of the SSE stream, joined per run.

With ``BENCH_HTTP_TRACE=<prefix>`` in the environment of ``python -m bench tool-loop
--transport http --http-client lean``, the bench's lean client sends its send time
(``x-bench-t0``) with each request and keeps each answer chunk's arrival time, and the
daemon (through ``bench/_site``) stamps, per request: its read of the request's bytes,
the start of the ASGI task, ``Engine.start_run`` (the session resolved and the accept
commit durable), the stream's first item and each write. Both sides use
``CLOCK_MONOTONIC`` (one clock for every process on the machine) and write their
records to ``<prefix>.<pid>`` at exit; ``python -m bench.http_trace <prefix>`` joins
them by run id and tape sequence and prints the distributions.

Nothing of this runs unless the variable is set: it is measurement, not the product.
"""

from __future__ import annotations

import atexit
import contextvars
import glob
import itertools
import json
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

ENV = "BENCH_HTTP_TRACE"
HEADER = "x-bench-t0"
now = time.monotonic_ns

RECORDS: list[list[Any]] = []
_stream: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "bench_http_trace_stream", default=None)
_RUN = re.compile(rb'"runId":"([^"]+)"')
_SEQ = re.compile(rb"^id: (\d+)$", re.M)


def enabled() -> bool:
    """Whether this process traces (``BENCH_HTTP_TRACE`` is set)."""
    return bool(os.environ.get(ENV))


def record(*fields: Any) -> None:
    """Keep one record for the dump at exit."""
    RECORDS.append(list(fields))


def _dump() -> None:
    prefix = os.environ.get(ENV)
    if prefix and RECORDS:
        with open(f"{prefix}.{os.getpid()}", "w", encoding="utf-8") as out:
            for row in RECORDS:
                out.write(json.dumps(
                    [f.decode("utf-8", "replace") if isinstance(f, bytes) else f for f in row]))
                out.write("\n")


_DUMPING: list[bool] = []


def start_dump_at_exit() -> None:
    """Write this process's records to ``<prefix>.<pid>`` when it exits (once)."""
    if not _DUMPING:
        _DUMPING.append(True)
        atexit.register(_dump)


def last_frame_of(chunk: bytes) -> tuple[str, int] | None:
    """The run id and tape sequence of the last tape frame in an SSE chunk, if any."""
    runs, seqs = _RUN.findall(chunk), _SEQ.findall(chunk)
    if not runs or not seqs:
        return None
    return runs[-1].decode(), int(seqs[-1])


def install_in_daemon() -> None:
    """Stamp the daemon's side of every HTTP request (called by ``bench/_site``)."""
    from palyra.engine import Engine
    from palyra.transport.http import _limits, _spec_front, _sse, server

    made = _limits.bounded_protocol

    def bounded_protocol(*args: Any, **kwargs: Any) -> Any:
        base = made(*args, **kwargs)

        class Traced(base):  # type: ignore[misc,valid-type]
            _bench_read = 0

            def data_received(self, data: bytes) -> None:
                self._bench_read = now()
                super().data_received(data)

            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                if self.cycle is not None:
                    self.cycle.scope["bench.read"] = self._bench_read

        return Traced

    _limits.bounded_protocol = server.bounded_protocol = bounded_protocol

    serve = _spec_front.SpecFront.serve

    async def traced_serve(self: Any, scope: Any, receive: Any, send: Any, path: str) -> None:
        scope["bench.serve"] = now()
        await serve(self, scope, receive, send, path)

    _spec_front.SpecFront.serve = traced_serve  # type: ignore[method-assign]

    call = _sse.SseResponse.__call__

    async def traced_call(self: Any, scope: Any, receive: Any, send: Any) -> None:
        sent = next((int(v) for k, v in scope["headers"] if k == HEADER.encode()), 0)
        stamps = {"t0": sent, "read": scope.get("bench.read", 0),
                  "serve": scope.get("bench.serve", 0), "first": 0}
        _stream.set(stamps)

        async def traced_send(message: Any) -> None:
            # Stamped as the frame is handed to the server, not after: once the socket
            # has it, the client can read it before this task runs again (a stamp taken
            # after the send made "written → client read" negative now and then).
            at = now()
            await send(message)
            found = last_frame_of(message.get("body", b""))
            if found is not None:
                if stamps.get("written") is None:
                    stamps["written"] = at
                    record("first", found[0], found[1], stamps)
                else:
                    record("w", found[0], found[1], at)

        await call(self, scope, receive, traced_send)

    _sse.SseResponse.__call__ = traced_call  # type: ignore[method-assign]

    first = _sse._first

    async def traced_first(source: Any, request_id: str) -> Any:
        item = await first(source, request_id)
        stamps = _stream.get()
        if stamps is not None:
            stamps["first"] = now()
        return item

    _sse._first = traced_first

    start_run = Engine.start_run

    async def traced_start_run(self: Any, identity: Any, start: Any) -> Any:
        began = now()
        started = await start_run(self, identity, start)
        record("start_run", started.run.run_id, began, now())
        return started

    Engine.start_run = traced_start_run  # type: ignore[method-assign]
    start_dump_at_exit()


# --- the join -----------------------------------------------------------------------------

FIRST_PARTS = (
    ("client send → daemon read", "t0", "read"),
    ("daemon read → ASGI task", "read", "serve"),
    ("ASGI task → start_run", "serve", "start_in"),
    ("start_run (session, accept commit)", "start_in", "start_out"),
    ("start_run → first item", "start_out", "first"),
    ("first item → written", "first", "written"),
    ("written → client read", "written", "arrived"),
    ("client send → client read", "t0", "arrived"),
)


def _pct(values: list[int], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] / 1e6, 2)


def breakdown(rows: Iterable[list[Any]]) -> dict[str, Any]:
    """p50/p90/p99 ms of each part of a turn's first answer, and of a later frame's trip."""
    arrived: dict[tuple[str, int], int] = {}
    firsts: list[tuple[str, int, dict[str, int]]] = []
    writes: list[tuple[str, int, int]] = []
    starts: dict[str, tuple[int, int]] = {}
    for row in rows:
        kind = row[0]
        if kind == "r":
            chunk = row[2]  # bytes in memory, text once dumped
            found = last_frame_of(chunk.encode() if isinstance(chunk, str) else chunk)
            if found is not None:
                arrived.setdefault(found, row[1])
        elif kind == "first":
            firsts.append((row[1], row[2], row[3]))
        elif kind == "w":
            writes.append((row[1], row[2], row[3]))
        elif kind == "start_run":
            starts[row[1]] = (row[2], row[3])
    parts: dict[str, list[int]] = defaultdict(list)
    for run, seq, stamps in firsts:
        at = dict(stamps)
        if run in starts:
            at["start_in"], at["start_out"] = starts[run]
        if (run, seq) in arrived:
            at["arrived"] = arrived[run, seq]
        for name, a, b in FIRST_PARTS:
            if at.get(a) and at.get(b):
                parts[name].append(at[b] - at[a])
    later = [arrived[run, seq] - t for run, seq, t in writes if (run, seq) in arrived]
    out: dict[str, Any] = {"turns": len(firsts), "first_answer": {},
                           **_gaps(firsts, writes, arrived)}
    for name, _, _ in FIRST_PARTS:
        values = parts.get(name, [])
        out["first_answer"][name] = [_pct(values, 50), _pct(values, 90), _pct(values, 99)]
    out["later_frame_written_to_read"] = [_pct(later, 50), _pct(later, 90), _pct(later, 99)]
    return out


def _gaps(firsts: list[tuple[str, int, dict[str, int]]], writes: list[tuple[str, int, int]],
          arrived: dict[tuple[str, int], int]) -> dict[str, list[float | None]]:
    """Each stream's gaps between its writes, at the daemon and as the client read them:
    where the two tails match, a later step's tail is the daemon's, not the wire's."""
    written: dict[str, list[int]] = defaultdict(list)
    read: dict[str, list[int]] = defaultdict(list)
    for run, seq, at in [(r, s, st["written"]) for r, s, st in firsts] + writes:
        written[run].append(at)
        if (run, seq) in arrived:
            read[run].append(arrived[run, seq])
    out: dict[str, list[float | None]] = {}
    for name, by_run in (("daemon_write_gap", written), ("client_read_gap", read)):
        gaps = []
        for times in by_run.values():
            ordered = sorted(times)
            gaps += [b - a for a, b in itertools.pairwise(ordered)]
        out[name] = [_pct(gaps, 50), _pct(gaps, 90), _pct(gaps, 99)]
    return out


def read_records(prefix: str) -> list[list[Any]]:
    """Every record of every process that traced under ``prefix``."""
    rows: list[list[Any]] = []
    for path in glob.glob(f"{glob.escape(prefix)}.*"):
        if not path.rpartition(".")[2].isdigit():
            continue  # not a process's records (<prefix>.<pid>): another file beside them
        with open(path, encoding="utf-8") as src:
            rows.extend(json.loads(line) for line in src)
    return rows


def main(argv: list[str]) -> int:
    """``python -m bench.http_trace <prefix>``: print the join of a traced run."""
    if len(argv) != 1:
        print("usage: python -m bench.http_trace <prefix>", file=sys.stderr)
        return 2
    result = breakdown(read_records(argv[0]))
    print(f"a turn's first answer, {result['turns']} turns (ms: p50, p90, p99)")
    for name, values in result["first_answer"].items():
        print(f"  {name:38s} " + "  ".join(f"{v if v is not None else '-':>8}" for v in values))
    later = result["later_frame_written_to_read"]
    print("  later frames, written → client read    " + "  ".join(f"{v:>8}" for v in later))
    print("a stream's gaps between frames (ms: p50, p90, p99)")
    for key, name in (("daemon_write_gap", "written by the daemon"),
                      ("client_read_gap", "read by the client")):
        print(f"  {name:38s} " + "  ".join(f"{v:>8}" for v in result[key]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
