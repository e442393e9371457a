"""``palyra runs tail RUN [--after-seq N] [--follow]``, ``palyra runs expand RUN SEQ`` and
``palyra runs abort RUN``."""

from __future__ import annotations

import argparse
import asyncio

from palyra_gen.palyra import v1

from palyra.cli._client import add_connection_flags, connect, report_error
from palyra.cli._render import enum_name, print_event


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``runs tail|expand|abort``."""
    runs = commands.add_parser("runs", help="follow or abort runs")
    sub = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", title="subcommands")
    tail = sub.add_parser("tail", help="print a run's tape from a cursor")
    tail.add_argument("run_id")
    tail.add_argument("--after-seq", type=int, default=-1,
                      help="exclusive cursor (default -1: from the start)")
    tail.add_argument("--follow", "-f", action="store_true",
                      help="keep following the live run until it ends")
    add_connection_flags(tail)
    tail.set_defaults(handler=lambda args: asyncio.run(_tail(args)))
    expand = sub.add_parser("expand", help="print the tape events a compaction summarised")
    expand.add_argument("run_id")
    expand.add_argument("compaction_seq", type=int,
                        help="tape seq of the session_compaction event")
    add_connection_flags(expand)
    expand.set_defaults(handler=lambda args: asyncio.run(_expand(args)))
    abort = sub.add_parser("abort", help="cancel a run")
    abort.add_argument("run_id")
    abort.add_argument("--reason", default="cli_abort_requested")
    add_connection_flags(abort)
    abort.set_defaults(handler=lambda args: asyncio.run(_abort(args)))


async def _tail(args: argparse.Namespace) -> int:
    request = v1.WatchRunRequest(run_id=args.run_id, after_seq=args.after_seq,
                                 no_follow=not args.follow, batch=True)
    try:
        async with connect(args) as stubs:
            async for response in stubs.gateway.watch_run(request):
                for event in response.events:  # one commit (or replay page) per response
                    print_event(event)
    except Exception as exc:
        return report_error(exc)
    return 0


async def _expand(args: argparse.Namespace) -> int:
    after = -1
    try:
        async with connect(args) as stubs:
            while True:
                page = await stubs.gateway.expand_compaction(v1.ExpandCompactionRequest(
                    run_id=args.run_id, compaction_seq=args.compaction_seq, after_seq=after))
                if after < 0 and page.compaction is not None:
                    print_event(page.compaction)
                for event in page.events:
                    print_event(event)
                if page.next_after_seq is None:
                    break
                after = page.next_after_seq
    except Exception as exc:
        return report_error(exc)
    verdict = "matches" if page.digest_matches else "DOES NOT MATCH"
    print(f"digest {page.digest_sha256} {verdict} the compaction's")
    return 0 if page.digest_matches else 1


async def _abort(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            result = await stubs.gateway.abort_run(
                v1.AbortRunRequest(run_id=args.run_id, reason=args.reason))
    except Exception as exc:
        return report_error(exc)
    print(f"{result.run_id}: cancel requested={result.cancel_requested} "
          f"state={enum_name(result.state)}")
    return 0
