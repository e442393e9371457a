"""``palyra sessions list``."""

from __future__ import annotations

import argparse
import asyncio

from palyra_gen.palyra import v1

from palyra.cli._client import add_connection_flags, connect, report_error
from palyra.cli._render import format_ms, print_table


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sessions list``."""
    sessions = commands.add_parser("sessions", help="list sessions")
    sub = sessions.add_subparsers(dest="sessions_command", required=True)
    listing = sub.add_parser("list", help="list your sessions")
    listing.add_argument("--all", action="store_true", help="include archived sessions")
    listing.add_argument("--limit", type=int, default=100)
    add_connection_flags(listing)
    listing.set_defaults(handler=lambda args: asyncio.run(_list(args)))


async def _list(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            rows: list[list[str]] = []
            after = ""
            while True:
                page = await stubs.gateway.list_sessions(v1.ListSessionsRequest(
                    after_session_key=after, limit=min(args.limit, 500),
                    include_archived=args.all))
                for s in page.sessions:
                    rows.append([s.session_id, s.session_key, s.label or "-", str(s.run_count),
                                 s.last_run_id or "-", format_ms(s.updated_at_unix_ms)])
                after = page.next_after_session_key
                if not after or len(rows) >= args.limit:
                    break
    except Exception as exc:
        return report_error(exc)
    print_table(rows, ["SESSION", "KEY", "LABEL", "RUNS", "LAST RUN", "UPDATED"])
    return 0
