"""RunStream over gRPC: a commit's tape events encoded once, straight to ``RunStreamResponse`` bytes.

In process, RunStream hands each commit's events to its caller as ``TapeEvent``
messages. Over gRPC those objects were built only to be encoded at once:
a ``TapeEvent`` has ~20 fields (16 of them members of its ``event`` oneof), so
building and encoding the wrapper cost more than the member it carries. Here
the listener asks the app for the stored events and their typed members
(:meth:`palyra.app.PalyraApp.run_stream_tape`) and writes the bytes itself: the
wrapper's five header fields from the stored event, then the member as its
compiled encoder gives it. The bytes are exactly ``bytes(RunStreamResponse(...))``
of what the app would have sent (tests/transport/test_grpc_tape.py).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

import betterproto2
from palyra_gen.palyra import v1 as pb
from palyra_gen.services import GatewayServiceServer

from palyra.core.protobin import _SMALL, _body, _varint, encode_binary
from palyra.engine import tape_field_of
from palyra.journal import StoredEvent

_V1 = b"\x08\x01"  # RunStreamResponse.v = 1
_EVENT_TAG = b"\x12"  # RunStreamResponse.event (2, length-delimited)
_EVENTS_TAG = b"\x1a"  # RunStreamResponse.events (3, repeated, length-delimited)


class Encoded:
    """A message already encoded: the codec sends ``data`` as it is."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


@functools.cache
def _member_tags() -> dict[type[Any], bytes]:
    """Member class -> its ``TapeEvent`` field tag (wire type 2), from the generated metadata."""
    meta = typing.cast(Any, pb.TapeEvent)._betterproto
    tags: dict[type[Any], bytes] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.group == "event":
            tags[meta.cls_by_field[name]] = _varint((fm.number << 3) | 2)
    return tags


def _delimited(out: bytearray, tag: bytes, data: bytes | bytearray) -> None:
    n = len(data)
    out += tag
    out += _SMALL[n] if n < 128 else _varint(n)
    out += data


def _uint(out: bytearray, tag: bytes, value: int) -> None:
    if value:
        out += tag
        out += _SMALL[value] if 0 <= value < 128 else _varint(value)


def encode_tape_event(event: StoredEvent, member: betterproto2.Message | None) -> bytes:
    """``bytes(TapeEvent)`` of a stored event and its member, as ``tape_event_with`` builds it.

    Field order and default-skipping follow the ``TapeEvent`` declaration: run_id (1),
    tape_seq (2), position (3), ts_unix_ms (4), session_id (5), then the member,
    sent even when all its fields are defaults (a oneof member is present).
    """
    out = bytearray()
    if event.run_id:
        _delimited(out, b"\x0a", event.run_id.encode())
    _uint(out, b"\x10", max(event.tape_seq, 0))
    _uint(out, b"\x18", event.position)
    _uint(out, b"\x20", event.ts_ms)
    if event.session_id:
        _delimited(out, b"\x2a", event.session_id.encode())
    if member is not None:
        tag = _member_tags().get(type(member))
        if tag is None:  # not a spec member class (a subclass?): the generic encoder's answer
            wrapper = pb.TapeEvent(run_id=event.run_id, tape_seq=max(event.tape_seq, 0),
                                   position=event.position, ts_unix_ms=event.ts_ms,
                                   session_id=event.session_id)
            setattr(wrapper, tape_field_of(member), member)
            return encode_binary(wrapper)
        _delimited(out, tag, _body(type(member))(member))
    return bytes(out)


def run_stream_bytes(batch: bool, stored: list[StoredEvent],
                     members: list[betterproto2.Message | None]) -> list[Encoded]:
    """RunStream's responses for one batch of tape events, encoded (see the module doc)."""
    events = [encode_tape_event(e, m) for e, m in zip(stored, members, strict=True)]
    if batch:
        out = bytearray(_V1)
        for data in events:
            _delimited(out, _EVENTS_TAG, data)
        return [Encoded(bytes(out))]
    responses = []
    for data in events:
        out = bytearray(_V1)
        _delimited(out, _EVENT_TAG, data)
        responses.append(Encoded(bytes(out)))
    return responses


class _TapeApp(Protocol):
    def run_stream_tape(
        self, ctx: Any, requests: AsyncIterator[pb.RunStreamRequest],
        respond: Callable[[bool, list[StoredEvent], list[betterproto2.Message | None]],
                          Iterable[Encoded]],
    ) -> AsyncIterator[Encoded]: ...


class TapeGatewayServer(GatewayServiceServer[Any]):
    """The generated GatewayService servicer, with RunStream encoding its tape directly."""

    def __init__(self, app: Any, ctx: Callable[[], Any]) -> None:
        super().__init__(app, ctx)
        self._tape_app: _TapeApp = app

    def run_stream(  # type: ignore[override]
        self, messages: AsyncIterator[pb.RunStreamRequest]
    ) -> AsyncIterator[Encoded]:
        """RunStream: the app's run loop, each batch answered by :func:`run_stream_bytes`."""
        return self._tape_app.run_stream_tape(self._ctx(), messages, run_stream_bytes)
