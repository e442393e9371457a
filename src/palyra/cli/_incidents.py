"""``palyra incidents list | ack``: the watchdog's incidents (operators)."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.cli._render import enum_name, format_ms


def _row(i: v1.Incident) -> list[str]:
    return [i.incident_id, enum_name(i.severity), i.kind, i.subject_id,
            format_ms(i.detected_at_unix_ms), i.acknowledged_by or "-", i.detail]


async def _list(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.watchdog.list_incidents(v1.ListIncidentsRequest(
        open_only=not args.all, limit=args.limit))
    return Shown(answer.incidents, ["INCIDENT", "SEVERITY", "KIND", "SUBJECT", "DETECTED",
                                    "ACKED BY", "DETAIL"], [_row(i) for i in answer.incidents])


async def _ack(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.watchdog.acknowledge_incident(v1.AcknowledgeIncidentRequest(
        incident_id=args.incident_id, note=args.note))
    incident = answer.incident or v1.Incident()
    return Shown(incident, line=f"incident {incident.incident_id} acknowledged by "
                                f"{incident.acknowledged_by}")


def add_parser(commands: SubParsers) -> None:
    """Register the ``incidents`` group."""
    sub = add_group(commands, "incidents", "the watchdog's incidents: stale runs and tasks, "
                                           "long-pending approvals (operators)")
    listing = add_command(sub, "list", "open incidents (--all: acknowledged too)", _list)
    listing.add_argument("--all", action="store_true", help="include acknowledged incidents")
    listing.add_argument("--limit", type=int, default=100)
    ack = add_command(sub, "ack", "acknowledge an incident", _ack)
    ack.add_argument("incident_id")
    ack.add_argument("--note", default="", help="recorded with the acknowledgement")
