"""RouteMessage (channel ingress over gRPC/HTTP) and the pairing RPCs of ChannelsService."""

from __future__ import annotations

import json
from collections.abc import Iterator

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.app._access import is_operator, require_operator
from palyra.app._base import AppBase
from palyra.app._convert import check_version, identity_of
from palyra.app.context import CallContext
from palyra.channels import ChannelRouter, Envelope, records
from palyra.channels.health import channel_health
from palyra.channels.ingress import Ingress
from palyra.channels.outbox import SEND_TASK
from palyra.channels.pairing import PairingCodeRec, PairingGrantRec
from palyra.channels.records import QuarantineRec
from palyra.core.errors import (
    ErrorCode,
    InvalidArgument,
    NotFound,
    PalyraError,
    PermissionDenied,
)
from palyra.tasks import TaskQueue

MAX_TASKS_COUNTED = 1_000_000
"""ListChannels reads at most this many send tasks (the task table is pruned long before)."""
ROUTE_WAIT_S = 30.0
"""How long RouteMessage waits for the run's replies before answering without them."""


def _code_proto(c: PairingCodeRec) -> pb.PairingCode:
    return pb.PairingCode(code=c.code, channel=c.channel, created_at_unix_ms=c.created_ms,
                          expires_at_unix_ms=c.expires_ms, issued_by=c.issued_by)


def _grant_proto(g: PairingGrantRec) -> pb.PairingGrant:
    return pb.PairingGrant(grant_id=g.grant_id, channel=g.channel, sender=g.sender,
                           granted_at_unix_ms=g.granted_ms, expires_at_unix_ms=g.expires_ms,
                           approval_id=g.approval_id)


def _quarantined_proto(q: QuarantineRec) -> pb.QuarantinedMessage:
    env = q.envelope
    return pb.QuarantinedMessage(
        quarantine_id=q.quarantine_id, channel=env.channel, reason=q.reason,
        quarantined_at_unix_ms=q.at_ms, envelope_id=env.envelope_id, sender=env.sender,
        conversation_id=env.conversation_id, text=env.text)


def route_authority(principal: str, channel: str) -> bool:
    """Whether ``principal`` may route messages for ``channel``, and as its connector.

    Only the channel's own connector identity (``channel:<channel>``) or an operator may
    route: anyone else could name any sender and read back that sender's conversation.
    Returns True for the connector (its ``sender_verified`` is believed), False for an
    operator (who may route, but whose word on a sender's verification is not taken).

    Raises:
        PermissionDenied: any other principal, or another channel's connector.
    """
    if principal == f"channel:{channel}":
        return True
    if is_operator(principal):
        return False
    raise PermissionDenied(
        f"only channel:{channel} (the channel's connector) or an operator may route messages "
        f"for channel {channel}; {principal!r} may not",
        details={"channel": channel, "principal": principal})


def envelope_of(channel: str, m: pb.InboundMessage, *,
                sender_verified_trusted: bool = True) -> Envelope:
    """The router's envelope of a wire message.

    ``sender_verified_trusted``: the caller is the channel's connector; otherwise the
    message's ``sender_verified`` claim is dropped.
    """
    return Envelope(
        envelope_id=m.envelope_id, channel=channel, conversation_id=m.conversation_id,
        thread_id=m.thread_id, sender=m.sender_handle or m.sender_display,
        sender_display=m.sender_display,
        sender_verified=m.sender_verified and sender_verified_trusted, text=m.text,
        is_direct_message=m.is_direct_message, is_broadcast=m.is_broadcast,
        adapter_message_id=m.adapter_message_id, retry_attempt=m.retry_attempt,
        quoted_text=m.quoted_text, quoted_sender=m.quoted_sender, has_media=m.has_media,
        mentions_agent=m.mentions_agent)


class ChannelsApi(AppBase):
    """RouteMessage and ChannelsService."""

    channels: ChannelRouter | None = None
    ingress: Ingress | None = None
    tasks: TaskQueue | None = None

    async def list_channels(self, ctx: CallContext,
                            request: pb.ListChannelsRequest) -> pb.ListChannelsResponse:
        """The channels with their outbox and quarantine figures (operators)."""
        require_operator(ctx, "ListChannels")
        if self.channels is None:
            return pb.ListChannelsResponse(router_enabled=False)
        found = channel_health(self.channels.config, self._sends(), self._quarantined())
        return pb.ListChannelsResponse(router_enabled=self.channels.config.enabled, channels=[
            pb.ChannelStatus(channel=h.channel, kind=h.kind, mode=h.mode,
                             dm_policy=h.dm_policy, concurrency=h.concurrency,
                             outbox_pending=h.outbox_pending, outbox_failed=h.outbox_failed,
                             quarantined=h.quarantined) for h in found])

    def _sends(self) -> Iterator[tuple[str, str]]:
        """``(channel, state)`` of each outbox send task (its payload names the sink)."""
        if self.tasks is None:
            return
        sends, _ = self.tasks.page(kind=SEND_TASK, limit=MAX_TASKS_COUNTED)
        for task in sends:
            sink = json.loads(task.payload_json).get("sink", "")
            yield str(sink), str(task.state)

    def _quarantined(self) -> Iterator[str]:
        """The channel of each quarantined message, streamed a page at a time."""
        after = ""
        while rows := self.store.scan_entities(records.TABLE, records.QUARANTINE, after, 1000):
            for _key, value in rows:
                yield msgspec.msgpack.decode(value, type=QuarantineRec).envelope.channel
            after = rows[-1][0]

    def _router(self) -> ChannelRouter:
        if self.channels is None or not self.channels.config.enabled:
            raise PalyraError("the channel router is disabled ([channels] enabled = false)",
                              code=ErrorCode.UNAVAILABLE)
        return self.channels

    async def route_message(self, ctx: CallContext,
                            request: pb.RouteMessageRequest) -> pb.RouteMessageResponse:
        """Admit one inbound message (exactly once per adapter message id) and answer it.

        The envelope's channel must be the path's, and only that channel's connector
        (``channel:<id>``) or an operator may call (:func:`route_authority`).
        """
        check_version(request.v)
        router = self._router()
        if request.message is None:
            raise InvalidArgument("message is required", details={"field": "message"})
        channel = request.channel.strip() or request.message.channel.strip()
        if request.message.channel and request.message.channel.strip() != channel:
            raise PermissionDenied("the envelope's channel does not match the request's",
                                   details={"channel": channel})
        connector = route_authority(identity_of(ctx).principal, channel)
        envelope = envelope_of(channel, request.message, sender_verified_trusted=connector)
        event_id = request.message.adapter_message_id or request.message.envelope_id
        admission = await router.admit(
            envelope, dedupe=("rpc", channel, event_id) if event_id else None)
        response = pb.RouteMessageResponse(
            accepted=admission.accepted, decision_reason=admission.reason,
            envelope_id=admission.envelope_id, duplicate=admission.duplicate)
        if not admission.task_id:
            return response
        outcome = await router.outcome(admission.task_id, ROUTE_WAIT_S)
        if outcome is None:
            response.queued_for_retry = True
            return response
        response.run_id, response.session_id = outcome.run_id, outcome.session_id
        response.delivered_to_active_run = outcome.delivered_to_active_run
        if outcome.reason:
            response.decision_reason = outcome.reason
        response.outputs = [pb.OutboundMessage(
            text=text, conversation_id=request.message.conversation_id,
            thread_id=request.message.thread_id,
            reply_to_message_id=request.message.adapter_message_id) for text in outcome.outputs]
        return response

    async def create_pairing_code(
            self, ctx: CallContext,
            request: pb.CreatePairingCodeRequest) -> pb.CreatePairingCodeResponse:
        """Issue a code (operators; a configured channel; at most 3 pending per channel)."""
        identity = require_operator(ctx, "CreatePairingCode")
        router, channel = self._router(), request.channel.strip()
        if not router.config.configured(channel):
            raise NotFound(f"no channel {channel!r} is configured: pairing needs the channel's "
                           f'[channels.policy."{channel}"] table or its adapter',
                           details={"channel": channel})
        rec = await router.pairing.create_code(channel, request.ttl_seconds, identity.principal)
        return pb.CreatePairingCodeResponse(code=_code_proto(rec))

    async def list_pairing_codes(
            self, ctx: CallContext,
            request: pb.ListPairingCodesRequest) -> pb.ListPairingCodesResponse:
        """The channel's pending codes (operators)."""
        require_operator(ctx, "ListPairingCodes")
        codes = self._router().pairing.codes(request.channel.strip())
        return pb.ListPairingCodesResponse(codes=[_code_proto(c) for c in codes])

    async def list_pairing_grants(
            self, ctx: CallContext,
            request: pb.ListPairingGrantsRequest) -> pb.ListPairingGrantsResponse:
        """The channel's live grants (operators)."""
        require_operator(ctx, "ListPairingGrants")
        grants = self._router().pairing.grants(request.channel.strip())
        return pb.ListPairingGrantsResponse(grants=[_grant_proto(g) for g in grants])

    async def list_quarantine(
            self, ctx: CallContext,
            request: pb.ListQuarantineRequest) -> pb.ListQuarantineResponse:
        """Messages the router kept instead of answering, oldest first (operators)."""
        require_operator(ctx, "ListQuarantine")
        limit = 100 if request.limit == 0 else max(1, min(request.limit, 1000))
        kept = self._router().quarantined(request.channel.strip(), limit)
        return pb.ListQuarantineResponse(messages=[_quarantined_proto(q) for q in kept])

    async def revoke_pairing_grant(
            self, ctx: CallContext,
            request: pb.RevokePairingGrantRequest) -> pb.RevokePairingGrantResponse:
        """Remove a grant (operators); ``revoked`` is False when there was none."""
        identity = require_operator(ctx, "RevokePairingGrant")
        revoked = await self._router().pairing.revoke(request.channel.strip(),
                                                      request.grant_id, identity.principal)
        return pb.RevokePairingGrantResponse(revoked=revoked)
