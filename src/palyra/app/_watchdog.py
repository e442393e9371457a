"""WatchdogService: the self-healing watchdog's incidents (operators only)."""

from __future__ import annotations

import time

from palyra_gen.palyra import v1 as pb

from palyra.app._access import require_operator
from palyra.app._base import AppBase
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument
from palyra.watchdog import IncidentRecord, acknowledge, list_incidents

MAX_PAGE = 500


def incident_proto(rec: IncidentRecord) -> pb.Incident:
    """The wire form of an incident."""
    return pb.Incident(
        incident_id=rec.incident_id, severity=pb.IncidentSeverity(rec.severity), kind=rec.kind,
        subject_id=rec.subject_id, detail=rec.detail, detected_at_unix_ms=rec.detected_ms,
        action=rec.action, action_detail=rec.action_detail,
        acknowledged_by=rec.acknowledged_by, acknowledged_at_unix_ms=rec.acknowledged_ms,
        acknowledgement_note=rec.note)


class WatchdogApi(AppBase):
    """The WatchdogService group (incidents live in the journal; no watchdog object needed)."""

    async def list_incidents(self, ctx: CallContext,
                             request: pb.ListIncidentsRequest) -> pb.ListIncidentsResponse:
        """Newest first."""
        require_operator(ctx, "listing incidents")
        limit = 100 if request.limit == 0 else max(1, min(request.limit, MAX_PAGE))
        records = list_incidents(self.store, open_only=request.open_only, limit=limit)
        return pb.ListIncidentsResponse(incidents=[incident_proto(r) for r in records])

    async def acknowledge_incident(
            self, ctx: CallContext,
            request: pb.AcknowledgeIncidentRequest) -> pb.AcknowledgeIncidentResponse:
        """Record who saw it; the first acknowledgement stays."""
        identity = require_operator(ctx, "acknowledging incidents")
        if not request.incident_id:
            raise InvalidArgument("incident_id is required")
        rec = await acknowledge(self.store, request.incident_id, identity.principal,
                                request.note, time.time_ns() // 1_000_000)
        return pb.AcknowledgeIncidentResponse(incident=incident_proto(rec))
