"""A run's tape on its way out: stored events become the wire here, once per batch.

Every client of a run's tape (an in-process caller, the gRPC listener, an SSE
stream) is fed by the journal's tape followers in batches: one commit's events
(or one replay page's). A :class:`TapeBatch` holds one such batch as stored, with
each event's typed member, and gives it in the two forms the transports send:

- :meth:`TapeBatch.events`, the ``TapeEvent`` messages (:func:`tape_event_with`),
  which an in-process caller reads and the HTTP gateway frames as SSE;
- :meth:`TapeBatch.wire`, the protobuf bytes of RunStream's response written
  straight from the stored events: the wrapper's five header fields from the
  stored event, then the member as its generated encoder gives it
  (``palyra_gen.proto_binary``). The bytes are exactly ``bytes()`` of the
  ``RunStreamResponse`` holding :meth:`TapeBatch.events`
  (tests/transport/test_grpc_tape.py), without building ``TapeEvent`` objects
  only to encode them: a ``TapeEvent`` has ~20 fields (16 of them members of its
  ``event`` oneof), so walking the wrapper cost more than the member it carries.

RunStream answers with :class:`TapeResponse`: a ``RunStreamResponse`` that keeps
the batch it was built from, so the gRPC listener sends :meth:`TapeBatch.wire`
and nothing is encoded twice.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Any

import betterproto2
from palyra_gen.palyra import v1 as pb

from palyra.app._convert import tape_event_with
from palyra.core.protobin import SMALL, body_encoder, encode_binary, varint
from palyra.core.protojson import encode_message
from palyra.engine import is_terminal_status
from palyra.journal import StoredEvent

Member = betterproto2.Message | None

_V1 = b"\x08\x01"  # RunStreamResponse.v = 1
_EVENT_TAG = b"\x12"  # RunStreamResponse.event (2, length-delimited)
_EVENTS_TAG = b"\x1a"  # RunStreamResponse.events (3, repeated, length-delimited)


class TapeBatch:
    """One batch of a run's tape events as stored, their typed members, and whether the
    client asked for ``batch`` (one response for the batch) or not (one per event)."""

    __slots__ = ("_events", "batched", "members", "stored")

    def __init__(self, stored: list[StoredEvent], members: list[Member], batched: bool) -> None:
        self.stored = stored
        self.members = members
        self.batched = batched
        self._events: list[pb.TapeEvent] | None = None

    def events(self) -> list[pb.TapeEvent]:
        """The batch's ``TapeEvent`` messages (built once)."""
        if self._events is None:
            self._events = [tape_event_with(e, m)
                            for e, m in zip(self.stored, self.members, strict=True)]
        return self._events

    def wire(self) -> bytes:
        """The protobuf bytes of the ``RunStreamResponse`` holding this batch (its one
        event, unless ``batched``)."""
        out = bytearray(_V1)
        _encode_events(self.stored, self.members, _EVENTS_TAG if self.batched else _EVENT_TAG,
                       out)
        return bytes(out)

    def json_events(self) -> list[tuple[int, str, dict[str, Any]]]:
        """Each event's ``tape_seq``, the name of its ``event`` member (``tape`` when none
        is set) and its proto3 JSON (``encode_message`` of its ``TapeEvent``), built from
        the stored events (a live event's member JSON is its stored payload).

        As :meth:`wire` does for protobuf: the wrapper's five fields straight from the
        stored event and the member through its generated encoder, so the SSE writer
        neither builds the ``TapeEvent`` objects nor walks their ~20 fields.
        """
        members = _member_json()
        out: list[tuple[int, str, dict[str, Any]]] = []
        for event, member in zip(self.stored, self.members, strict=True):
            seq = max(event.tape_seq, 0)  # as tape_event_with
            entry = members.get(type(member))
            if member is not None and entry is None:
                # Not a spec member class (a subclass?): the whole event, generically.
                whole = encode_message(tape_event_with(event, member))
                out.append((seq, _kind_of(whole), whole))
                continue
            body: dict[str, Any] = {}
            if event.run_id:
                body["runId"] = event.run_id
            if seq:
                body["tapeSeq"] = str(seq)
            if event.position:
                body["position"] = str(event.position)
            if event.ts_ms:
                body["tsUnixMs"] = str(event.ts_ms)
            if event.session_id:
                body["sessionId"] = event.session_id
            if member is None or entry is None:
                out.append((seq, "tape", body))
                continue
            kind, key = entry
            # A live event that redaction left alone carries the member it was written
            # from, and its payload is that member's proto3 JSON (``payload_of``): the
            # same dict ``encode_message`` would build again, so it is used as it is.
            body[key] = event.payload if member is event.origin else encode_message(member)
            out.append((seq, kind, body))
        return out

    @property
    def ends_call(self) -> bool:
        """The batch ends with the run's terminal status, and it is not FAILED: RunStream
        ends OK right after it (a failed run ends the call with its error instead)."""
        last = self.members[-1] if self.members else None
        return (isinstance(last, pb.RunStatus) and is_terminal_status(last)
                and last.state != pb.RunState.FAILED)


class TapeResponse(pb.RunStreamResponse):
    """A ``RunStreamResponse`` that keeps the :class:`TapeBatch` it holds (``tape``), so a
    transport writing bytes sends :meth:`TapeBatch.wire` instead of encoding the messages.

    It is the spec's message in every other way (fields, equality with a plain
    ``RunStreamResponse``, ``bytes()``, ``to_dict()``). Its ``event`` / ``events`` are
    built from the batch on first read: the gRPC listener sends the batch's bytes and
    the SSE writer frames the batch's events, so over the wire they are never read,
    and building a ``TapeEvent`` per event only to drop it was ~6 % of the daemon's
    event-loop CPU per step at C=1 over gRPC.
    """

    tape: TapeBatch

    def __getattr__(self, name: str) -> Any:
        # Only reached for an attribute the instance lacks: the member that
        # :func:`_response` left unset until it is read.
        tape = self.__dict__.get("tape")
        if tape is None or name != ("events" if tape.batched else "event"):
            raise AttributeError(name)
        value: Any = tape.events() if tape.batched else tape.events()[0]
        setattr(self, name, value)
        return value

    def __eq__(self, other: object) -> bool:
        # betterproto2 compares messages of one exact class; this one is a RunStreamResponse.
        if isinstance(other, pb.RunStreamResponse):
            return (self.v, self.event, self.events) == (other.v, other.event, other.events)
        return NotImplemented


def run_stream_responses(batch: TapeBatch) -> list[TapeResponse]:
    """RunStream's responses for one batch: one, or one per event without ``batched``."""
    if batch.batched:
        return [_response(batch)]
    return [_response(TapeBatch([stored], [member], batched=False))
            for stored, member in zip(batch.stored, batch.members, strict=True)]


def _response(batch: TapeBatch) -> TapeResponse:
    """A response holding ``batch``, its ``events`` (or ``event``) left to be built from the
    batch when first read (:meth:`TapeResponse.__getattr__`)."""
    response = TapeResponse(v=1)
    del response.__dict__["events" if batch.batched else "event"]
    response.tape = batch
    return response


@functools.cache
def _member_tags() -> dict[type[Any], tuple[bytes, Callable[[Any], bytes | bytearray]]]:
    """Member class -> its ``TapeEvent`` field tag (wire type 2) and its generated encoder."""
    meta = typing.cast(Any, pb.TapeEvent)._betterproto
    tags: dict[type[Any], tuple[bytes, Callable[[Any], bytes | bytearray]]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.group == "event":
            cls = meta.cls_by_field[name]
            tags[cls] = (varint((fm.number << 3) | 2), body_encoder(cls))
    return tags


@functools.cache
def _member_json() -> dict[type[Any], tuple[str, str]]:
    """Member class -> its ``TapeEvent`` field name and its proto3 JSON key (read off the
    generated encoder's output for an event holding only that member)."""
    meta = typing.cast(Any, pb.TapeEvent)._betterproto
    table: dict[type[Any], tuple[str, str]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.group == "event":
            cls = meta.cls_by_field[name]
            (key,) = encode_message(pb.TapeEvent(**{name: cls()}))
            table[cls] = (name, key)
    return table


def _kind_of(encoded: dict[str, Any]) -> str:
    """The ``event`` member named by an encoded ``TapeEvent``'s keys; ``tape`` if none."""
    keys = {key: name for name, key in _member_json().values()}
    return next((keys[k] for k in encoded if k in keys), "tape")


def _encode_events(stored: list[StoredEvent], members: list[Member], field: bytes,
                   out: bytearray) -> None:
    """Append each event to ``out`` as the response field ``field`` holding
    ``bytes(TapeEvent)``: fields in declaration order, defaults skipped.

    run_id (1), tape_seq (2), position (3), ts_unix_ms (4), session_id (5), then the
    member, sent even when all its fields are defaults (a oneof member is present).
    The run and session fields are encoded once per batch (one run's commit), and
    each event straight into ``out`` after its length (no bytes of its own to join).
    """
    tags = _member_tags()
    small = SMALL
    run_id = session_id = None
    run_field = session_field = b""
    ts, ts_field = 0, b""
    for event, member in zip(stored, members, strict=True):
        if event.run_id != run_id or event.session_id != session_id:
            run_id, session_id = event.run_id, event.session_id
            run_field = _string_field(b"\x0a", run_id)
            session_field = _string_field(b"\x2a", session_id)
        codec = tags.get(type(member)) if member is not None else None
        if member is not None and codec is None:
            # Not a spec member class (a subclass?): the generic encoder.
            data: bytes | bytearray = encode_binary(tape_event_with(event, member))
        else:
            data = bytearray(run_field)
            value = event.tape_seq
            if value > 0:
                data += b"\x10"
                data += small[value] if value < 128 else varint(value)
            value = event.position
            if value:
                data += b"\x18"
                data += small[value] if 0 <= value < 128 else varint(value)
            if event.ts_ms != ts:  # a commit's events mostly share their millisecond
                ts = event.ts_ms
                ts_field = b"\x20" + varint(ts) if ts else b""
            data += ts_field
            data += session_field
            if codec is not None:
                tag, body = codec
                encoded = body(member)
                n = len(encoded)
                data += tag
                data += small[n] if n < 128 else varint(n)
                data += encoded
        n = len(data)
        out += field
        out += small[n] if n < 128 else varint(n)
        out += data


def _string_field(tag: bytes, text: str) -> bytes:
    data = text.encode()
    return tag + varint(len(data)) + data if data else b""
