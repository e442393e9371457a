"""``palyra approvals list | approve ID | deny ID``."""

from __future__ import annotations

import argparse
import asyncio

from palyra_gen.palyra import v1

from palyra.cli._client import add_connection_flags, connect, report_error
from palyra.cli._render import enum_name, format_ms, print_table

SCOPES = {"once": v1.ApprovalScope.ONCE, "session": v1.ApprovalScope.SESSION,
          "timeboxed": v1.ApprovalScope.TIMEBOXED}
STATES = {name.lower(): member for name, member in v1.ApprovalState.__members__.items()
          if name != "UNSPECIFIED"}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``approvals list|approve|deny``."""
    approvals = commands.add_parser("approvals", help="list and decide tool-call approvals")
    sub = approvals.add_subparsers(dest="approvals_command", metavar="SUBCOMMAND",
                                   title="subcommands")
    listing = sub.add_parser("list", help="list approvals (pending by default)")
    listing.add_argument("--state", choices=[*STATES, "all"], default="pending")
    listing.add_argument("--run", default="", help="only this run's approvals")
    add_connection_flags(listing)
    listing.set_defaults(handler=lambda args: asyncio.run(_list(args)))
    for verb in ("approve", "deny"):
        decide = sub.add_parser(verb, help=f"{verb} a pending approval")
        decide.add_argument("approval_id")
        decide.add_argument("--scope", choices=list(SCOPES), default="once")
        decide.add_argument("--ttl", type=int, default=0, help="seconds, for --scope timeboxed")
        decide.add_argument("--reason", default="")
        add_connection_flags(decide)
        decide.set_defaults(handler=lambda args, verb=verb: asyncio.run(_decide(args, verb)))


async def _list(args: argparse.Namespace) -> int:
    state = v1.ApprovalState.UNSPECIFIED if args.state == "all" else STATES[args.state]
    try:
        async with connect(args) as stubs:
            page = await stubs.approvals.list_approvals(
                v1.ListApprovalsRequest(state=state, run_id=args.run, limit=500))
    except Exception as exc:
        return report_error(exc)
    rows = [[a.approval_id, enum_name(a.state), a.tool_name, a.args_json[:40], a.run_id,
             format_ms(a.created_at_unix_ms), a.decided_by or "-"] for a in page.approvals]
    print_table(rows, ["APPROVAL", "STATE", "TOOL", "ARGS", "RUN", "CREATED", "DECIDED BY"])
    return 0


async def _decide(args: argparse.Namespace, verb: str) -> int:
    request = v1.DecideApprovalRequest(
        approval_id=args.approval_id,
        decision=v1.ApprovalDecision.APPROVE if verb == "approve" else v1.ApprovalDecision.DENY,
        scope=SCOPES[args.scope], ttl_seconds=args.ttl, reason=args.reason,
    )
    try:
        async with connect(args) as stubs:
            result = await stubs.approvals.decide_approval(request)
    except Exception as exc:
        return report_error(exc)
    approval = result.approval or v1.Approval()
    print(f"{approval.approval_id}: {enum_name(approval.state)} by {approval.decided_by}")
    return 0
