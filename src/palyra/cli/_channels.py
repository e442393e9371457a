"""``palyra channels list | pair | codes | grants | revoke | quarantine | connect`` (operators)."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._channels_connect import add_connect
from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.cli._render import format_ms


async def _list(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.channels.list_channels(v1.ListChannelsRequest())
    rows = [[c.channel, c.kind, c.mode, c.dm_policy or "-", str(c.concurrency),
             str(c.outbox_pending), str(c.outbox_failed), str(c.quarantined)]
            for c in answer.channels]
    # The router's switch is part of the answer, so --json prints the whole response.
    return Shown(answer, ["CHANNEL", "KIND", "MODE", "DMS", "SLOTS", "OUTBOX", "FAILED",
                          "QUARANTINED"], rows,
                 line="" if answer.router_enabled else
                 "the router is off ([channels] enabled = false): nothing is routed")


async def _pair(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.channels.create_pairing_code(v1.CreatePairingCodeRequest(
        channel=args.channel_id, ttl_seconds=args.ttl))
    code = answer.code or v1.PairingCode()
    return Shown(code, line=f"pairing code {code.code} for {code.channel}, expires "
                            f"{format_ms(code.expires_at_unix_ms)}: the sender DMs "
                            f"`pair {code.code}`, then decide the approval that opens")


async def _codes(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.channels.list_pairing_codes(
        v1.ListPairingCodesRequest(channel=args.channel_id))
    rows = [[c.code, c.channel, c.issued_by or "-", format_ms(c.created_at_unix_ms),
             format_ms(c.expires_at_unix_ms)] for c in answer.codes]
    return Shown(answer.codes, ["CODE", "CHANNEL", "ISSUED BY", "CREATED", "EXPIRES"], rows)


async def _grants(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.channels.list_pairing_grants(
        v1.ListPairingGrantsRequest(channel=args.channel_id))
    rows = [[g.grant_id, g.channel, g.sender, format_ms(g.granted_at_unix_ms),
             format_ms(g.expires_at_unix_ms), g.approval_id or "-"] for g in answer.grants]
    return Shown(answer.grants, ["GRANT", "CHANNEL", "SENDER", "GRANTED", "EXPIRES",
                                 "APPROVAL"], rows)


async def _revoke(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.channels.revoke_pairing_grant(v1.RevokePairingGrantRequest(
        channel=args.channel_id, grant_id=args.grant_id))
    return Shown(answer, line=f"grant {args.grant_id} "
                 + ("revoked" if answer.revoked else "was not there"))


async def _quarantine(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.channels.list_quarantine(v1.ListQuarantineRequest(
        channel=args.channel_id, limit=args.limit))
    rows = [[m.quarantine_id, m.channel, m.sender or "-", m.reason,
             format_ms(m.quarantined_at_unix_ms), " ".join(m.text.split())[:50]]
            for m in answer.messages]
    return Shown(answer.messages, ["QUARANTINE", "CHANNEL", "SENDER", "REASON", "WHEN", "TEXT"],
                 rows)


def add_parser(commands: SubParsers) -> None:
    """Register the ``channels`` group."""
    sub = add_group(commands, "channels", "pairing codes, pairing grants and quarantine of "
                                          "chat channels, and connecting a platform (operators)")
    add_command(sub, "list", "the channels the daemon knows, with their health (replies "
                "waiting and failed, messages quarantined)", _list)
    pair = add_command(sub, "pair", "issue a pairing code for a channel", _pair)
    pair.add_argument("channel_id", help="e.g. slack:acme or webhook:ops")
    pair.add_argument("--ttl", type=int, default=0, help="seconds (default: the daemon's)")
    add_command(sub, "codes", "list a channel's open pairing codes", _codes).add_argument(
        "channel_id")
    add_command(sub, "grants", "list a channel's paired senders", _grants).add_argument(
        "channel_id")
    revoke = add_command(sub, "revoke", "revoke a pairing grant", _revoke)
    revoke.add_argument("channel_id")
    revoke.add_argument("grant_id")
    quarantine = add_command(sub, "quarantine", "messages kept out of a channel, and why",
                             _quarantine)
    quarantine.add_argument("channel_id")
    quarantine.add_argument("--limit", type=int, default=100)
    add_connect(sub)
