"""``palyra sessions list | posture SESSION TOOL POSTURE``."""

from __future__ import annotations

import argparse
import asyncio

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs, add_connection_flags, connect, report_error
from palyra.cli._render import format_ms, print_table
from palyra.core.ids import is_ulid


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sessions list`` and ``sessions posture``."""
    sessions = commands.add_parser("sessions", help="list sessions, set tool postures")
    sub = sessions.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND",
                                  title="subcommands")
    listing = sub.add_parser("list", help="list your sessions")
    listing.add_argument("--all", action="store_true", help="include archived sessions")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--owner", default="", metavar="PRINCIPAL",
                         help="(operators) that principal's sessions on every device, e.g. "
                              "the ones the README's curl made for user:me")
    add_connection_flags(listing)
    listing.set_defaults(handler=lambda args: asyncio.run(_list(args)))
    posture = sub.add_parser(
        "posture", help="set how one tool is gated in one session",
        description="Set a session's posture for one tool: always_allow (no approval), "
                    "ask_each_time (an approval per call), disabled (never runs), or "
                    "inherit (drop the session's override; the configured posture applies).")
    posture.add_argument("session", help="session id or session key")
    posture.add_argument("tool", help="tool name, e.g. add or http.fetch")
    posture.add_argument("posture", choices=list(POSTURES))
    add_connection_flags(posture)
    posture.set_defaults(handler=lambda args: asyncio.run(_posture(args)))


async def _list(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            rows: list[list[str]] = []
            after = ""
            while True:
                page = await stubs.gateway.list_sessions(v1.ListSessionsRequest(
                    after_session_key=after, limit=min(args.limit, 500),
                    include_archived=args.all, owner=args.owner))
                for s in page.sessions:
                    rows.append([s.session_id, s.session_key, s.label or "-", str(s.run_count),
                                 s.last_run_id or "-", format_ms(s.updated_at_unix_ms),
                                 s.identity.device_id if s.identity else "-"])
                after = page.next_after_session_key
                if not after or len(rows) >= args.limit:
                    break
    except Exception as exc:
        return report_error(exc)
    print_table(rows, ["SESSION", "KEY", "LABEL", "RUNS", "LAST RUN", "UPDATED", "DEVICE"])
    return 0


POSTURES = {"always_allow": v1.ToolPosture.ALWAYS_ALLOW,
            "ask_each_time": v1.ToolPosture.ASK_EACH_TIME,
            "disabled": v1.ToolPosture.DISABLED,
            "inherit": v1.ToolPosture.UNSPECIFIED}


async def set_posture(stubs: Stubs, session: str, tool: str, posture: str) -> v1.Session:
    """Set ``tool``'s posture in ``session`` (an id, else a key of an existing session)."""
    if not is_ulid(session):
        resolved = await stubs.gateway.resolve_session(v1.ResolveSessionRequest(
            session_key=session, require_existing=True))
        if resolved.session is None:
            raise RuntimeError("the daemon answered ResolveSession without the session")
        session = resolved.session.session_id
    answer = await stubs.gateway.set_tool_posture(v1.SetToolPostureRequest(
        session_id=session, tool_name=tool, posture=POSTURES[posture]))
    if answer.session is None:
        raise RuntimeError("the daemon answered SetToolPosture without the session")
    return answer.session


async def _posture(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            session = await set_posture(stubs, args.session, args.tool, args.posture)
    except Exception as exc:
        return report_error(exc)
    print(f"session {session.session_id} ({session.session_key}): {args.tool} -> "
          f"{args.posture}")
    return 0
