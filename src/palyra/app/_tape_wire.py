"""RunStream's wire bytes: a commit's tape events encoded once, straight to ``RunStreamResponse``.

In process, RunStream hands each commit's events to its caller as ``TapeEvent``
messages. Over gRPC those objects were built only to be encoded at once:
a ``TapeEvent`` has ~20 fields (16 of them members of its ``event`` oneof), so
building and encoding the wrapper cost more than the member it carries. Here
the gRPC listener asks the app for the stored events and their typed members
(``palyra.app.tape_stream``) with this module's responder, which writes the bytes: the
wrapper's five header fields from the stored event, then the member as its
compiled encoder gives it. The bytes are exactly ``bytes(RunStreamResponse(...))``
of what the app would have sent (tests/transport/test_grpc_tape.py).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Any

import betterproto2
from palyra_gen.palyra import v1 as pb

from palyra.core.protobin import SMALL as _SMALL
from palyra.core.protobin import body_encoder as _body
from palyra.core.protobin import encode_binary
from palyra.core.protobin import varint as _varint
from palyra.engine import is_terminal_status, tape_field_of
from palyra.journal import StoredEvent

_V1 = b"\x08\x01"  # RunStreamResponse.v = 1
_EVENT_TAG = b"\x12"  # RunStreamResponse.event (2, length-delimited)
_EVENTS_TAG = b"\x1a"  # RunStreamResponse.events (3, repeated, length-delimited)


class Encoded:
    """A message already encoded: the codec sends ``data`` as it is.

    ``ends_call``: the last response of a RunStream whose run ended without failing
    (its tape's terminal status is DONE or CANCELLED): nothing but the call's OK
    status follows it, so a transport may end the call right after sending it.
    """

    __slots__ = ("data", "ends_call")

    def __init__(self, data: bytes, ends_call: bool = False) -> None:
        self.data = data
        self.ends_call = ends_call


@functools.cache
def _member_tags() -> dict[type[Any], tuple[bytes, Callable[[Any], bytes | bytearray]]]:
    """Member class -> its ``TapeEvent`` field tag (wire type 2) and its compiled encoder."""
    meta = typing.cast(Any, pb.TapeEvent)._betterproto
    tags: dict[type[Any], tuple[bytes, Callable[[Any], bytes | bytearray]]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.group == "event":
            cls = meta.cls_by_field[name]
            tags[cls] = (_varint((fm.number << 3) | 2), _body(cls))
    return tags


def encode_tape_event(event: StoredEvent, member: betterproto2.Message | None) -> bytes:
    """``bytes(TapeEvent)`` of a stored event and its member, as ``tape_event_with`` builds it."""
    return _encode_events([event], [member])[0]


def _encode_events(stored: list[StoredEvent],
                   members: list[betterproto2.Message | None]) -> list[bytes]:
    """``bytes(TapeEvent)`` of each event: fields in declaration order, defaults skipped.

    run_id (1), tape_seq (2), position (3), ts_unix_ms (4), session_id (5), then the
    member, sent even when all its fields are defaults (a oneof member is present).
    The run and session fields are encoded once per batch (one run's commit).
    """
    tags = _member_tags()
    small, varint = _SMALL, _varint
    encoded: list[bytes] = []
    run_id = session_id = None
    run_field = session_field = b""
    ts, ts_field = 0, b""
    for event, member in zip(stored, members, strict=True):
        if event.run_id != run_id or event.session_id != session_id:
            run_id, session_id = event.run_id, event.session_id
            run_field = _string_field(b"\x0a", run_id)
            session_field = _string_field(b"\x2a", session_id)
        out = bytearray(run_field)
        value = event.tape_seq
        if value > 0:
            out += b"\x10"
            out += small[value] if value < 128 else varint(value)
        value = event.position
        if value:
            out += b"\x18"
            out += small[value] if 0 <= value < 128 else varint(value)
        if event.ts_ms != ts:  # a commit's events mostly share their millisecond
            ts = event.ts_ms
            ts_field = b"\x20" + varint(ts) if ts else b""
        out += ts_field
        out += session_field
        if member is not None:
            codec = tags.get(type(member))
            if codec is None:  # not a spec member class (a subclass?): the generic encoder
                encoded.append(_generic(event, member))
                continue
            tag, body = codec
            data = body(member)
            n = len(data)
            out += tag
            out += small[n] if n < 128 else varint(n)
            out += data
        encoded.append(bytes(out))
    return encoded


def _string_field(tag: bytes, text: str) -> bytes:
    data = text.encode()
    return tag + _varint(len(data)) + data if data else b""


def _generic(event: StoredEvent, member: betterproto2.Message) -> bytes:
    wrapper = pb.TapeEvent(run_id=event.run_id, tape_seq=max(event.tape_seq, 0),
                           position=event.position, ts_unix_ms=event.ts_ms,
                           session_id=event.session_id)
    setattr(wrapper, tape_field_of(member), member)
    return encode_binary(wrapper)


def run_stream_bytes(batch: bool, stored: list[StoredEvent],
                     members: list[betterproto2.Message | None]) -> list[Encoded]:
    """RunStream's responses for one batch of tape events, encoded (see the module doc).

    The last one ``ends_call`` when the batch ends with the run's terminal status
    and that status is not FAILED (RunStream then ends OK; a failed run ends the
    call with its error instead).
    """
    events = _encode_events(stored, members)
    if batch:
        out = [Encoded(_V1 + b"".join(_EVENTS_TAG + _length(data) + data for data in events))]
    else:
        out = [Encoded(_V1 + _EVENT_TAG + _length(data) + data) for data in events]
    last = members[-1] if members else None
    if (out and isinstance(last, pb.RunStatus) and is_terminal_status(last)
            and last.state != pb.RunState.FAILED):
        out[-1].ends_call = True
    return out


def _length(data: bytes) -> bytes:
    n = len(data)
    return _SMALL[n] if n < 128 else _varint(n)
