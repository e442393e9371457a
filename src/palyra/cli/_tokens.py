"""``palyra tokens issue | list | revoke``: per-principal bearer tokens (operators)."""

from __future__ import annotations

import argparse
import asyncio
import re

from palyra_gen.palyra import v1

from palyra.cli._client import add_connection_flags, connect, report_error
from palyra.cli._render import format_ms, print_table

_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d`` → seconds.

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 15m, 12h or 7d, not {text!r}")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tokens issue|list|revoke``."""
    tokens = commands.add_parser("tokens", help="issue, list and revoke per-principal tokens")
    sub = tokens.add_subparsers(dest="tokens_command", metavar="SUBCOMMAND",
                                title="subcommands")
    issue = sub.add_parser("issue", help="issue a token that acts as one principal",
                           description="Issue a bearer token bound to one principal. Requests "
                                       "with it act as that principal; the secret is printed "
                                       "once and only its hash is stored.")
    issue.add_argument("bound_principal", metavar="PRINCIPAL",
                       help="the principal the token acts as, e.g. user:alice")
    issue.add_argument("--expires-in", type=duration_s, default=0,
                       help="lifetime, e.g. 12h or 7d (default: no expiry)")
    issue.add_argument("--label", default="", help="what the token is for")
    add_connection_flags(issue)
    issue.set_defaults(handler=lambda args: asyncio.run(_issue(args)))
    listing = sub.add_parser("list", help="list issued tokens (never their secrets)")
    add_connection_flags(listing)
    listing.set_defaults(handler=lambda args: asyncio.run(_list(args)))
    revoke = sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id")
    add_connection_flags(revoke)
    revoke.set_defaults(handler=lambda args: asyncio.run(_revoke(args)))


async def _issue(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            answer = await stubs.tokens.issue_token(v1.IssueTokenRequest(
                principal=args.bound_principal, ttl_seconds=args.expires_in, label=args.label))
    except Exception as exc:
        return report_error(exc)
    info = answer.info
    expires = format_ms(info.expires_at_unix_ms) if info and info.expires_at_unix_ms else "never"
    print(answer.token)
    print(f"token {info.token_id if info else '?'} acts as {args.bound_principal}; expires {expires}. "
          "Keep it now: it is not shown again.", flush=True)
    return 0


async def _list(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            answer = await stubs.tokens.list_tokens(v1.ListTokensRequest())
    except Exception as exc:
        return report_error(exc)
    rows = [[t.token_id, t.principal, t.label or "-", format_ms(t.created_at_unix_ms),
             format_ms(t.expires_at_unix_ms) if t.expires_at_unix_ms else "never",
             format_ms(t.revoked_at_unix_ms) if t.revoked_at_unix_ms else "-"]
            for t in answer.tokens]
    print_table(rows, ["TOKEN", "PRINCIPAL", "LABEL", "CREATED", "EXPIRES", "REVOKED"])
    return 0


async def _revoke(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            answer = await stubs.tokens.revoke_token(v1.RevokeTokenRequest(token_id=args.token_id))
    except Exception as exc:
        return report_error(exc)
    print(f"token {args.token_id} revoked"
          + (f" ({answer.info.principal})" if answer.info else ""))
    return 0
