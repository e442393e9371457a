"""RunStream over gRPC: the generated servicer, with each commit's tape sent as encoded bytes
(and every RPC's answers as one DATA frame written here).

The app answers RunStream with ``palyra.app.TapeResponse`` messages, which keep the
stored batch they hold; the bytes sent are that batch's ``wire()`` (encoded from the
stored events, property-tested equal to ``bytes()`` of the response).

Each response goes out through :func:`send_encoded` as one HTTP/2 DATA frame
(the gRPC length prefix and the bytes), written here, without the generic
path's per-message layers (grpclib's ``send_message`` dispatch, codec call,
struct packing and chunking loop) and without h2's ``send_data`` (its
``DataFrame``/``Flags`` objects, two state-machine look-ups and
``serialize``): together they cost more than the encoding of a tape batch
of a few hundred bytes, on the path every commit waits on before the run's
next step. The frame is exactly what ``H2Connection.send_data`` would build
(no padding, no END_STREAM), and h2's books are kept as it keeps them: both
outbound flow-control windows go down by the frame's length. That is all
``send_data`` changes when the connection is open and the stream is open or
half-closed by the peer (its state machines map SEND_DATA to the same state
with no side effect, h2 4.x); in any other state, and whenever the
transport is paused by backpressure, a window or the peer's frame size is
too small for the message or the message is above the cap, the message goes
the generic way, which waits, chunks and raises as before.

Every other RPC's answers take the same frame (:class:`DirectSendStream`, which
the gateway makes of each call's stream): encoded by the call's codec, then
written as above; so a unary answer (ResolveSession, SetToolPosture, GetRun...)
skips grpclib's generic send as the tape does.

A run that ended without failing ends its call at once: a response whose batch
``ends_call`` (its tape's DONE or CANCELLED status) is followed by the OK
trailers, and when no other stream is open on the connection the cork is
flushed at once, so the client has the end of the call in the same ``send()``
as the last events, before the run loop's clean-up and grpclib's wind-down
(~70 µs a turn, on the path to the client's next turn). With other streams
open the trailers leave with their frames at the iteration's flush (flushing
at once there measured 10-17 % more ``send()`` calls per commit at C=16). A
failed run still ends with its error, after the loop, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpclib.const
import grpclib.events
import grpclib.server
from h2.connection import ConnectionState, H2Connection
from h2.stream import StreamState
from palyra_gen.services import GatewayServiceServer

from palyra.app import TapeResponse
from palyra.transport.grpc._codec import Encoded

RUN_STREAM = "/palyra.v1.GatewayService/RunStream"


_OPEN_CONNECTION = (ConnectionState.SERVER_OPEN, ConnectionState.CLIENT_OPEN)
_SENDING_STREAM = (StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE)
_DATA_NO_FLAGS = b"\x00\x00"  # frame type DATA (0), no flags
# What grpclib's dispatcher holds for an event nobody listens to (grpclib 0.4.9, pinned;
# tests/transport/test_grpc_tape.py holds it to grpclib's own).
_NO_LISTENER = grpclib.events._ident


async def send_encoded(stream: grpclib.server.Stream[Any, Any], data: bytes) -> None:
    """Send one already-encoded response (``data``: its protobuf bytes, within the message
    cap) on ``stream`` as one DATA frame written here, or the generic way where h2 would
    not send it as that one frame (or the transport is paused); see the module doc."""
    if not stream._send_initial_metadata_done:
        await stream.send_initial_metadata()  # as the generic path does before its first
    h2_stream = stream._stream  # grpclib.protocol.Stream: the HTTP/2 stream
    frame = None
    if h2_stream.connection.write_ready.is_set():
        frame = data_frame(h2_stream._h2_connection, h2_stream.id,
                           b"\x00" + len(data).to_bytes(4, "big"), data)
    if frame is None:
        await _send_generically(stream, data)  # waits, chunks
        return
    h2_stream._transport.write(frame)
    stream._send_message_done = True


async def _send_generically(stream: grpclib.server.Stream[Any, Any], data: bytes) -> None:
    # grpclib's own send_message (not an override of it), the bytes sent as they are.
    await grpclib.server.Stream.send_message(stream, Encoded(data))


class DirectSendStream(grpclib.server.Stream[Any, Any]):
    """grpclib's server stream of one call, sending each response the way RunStream's tape
    goes (:func:`send_encoded`): encoded by the call's codec, then one DATA frame written
    here where h2 would send just that frame, grpclib's way otherwise.

    Every RPC's responses go so (the unary answers of ResolveSession, SetToolPosture,
    ..., RunStream's responses that are not a tape), not only the tape's: grpclib's
    generic send costs ~80 Python calls a message where this costs ~20. grpclib's
    ``SendMessage`` event is dispatched only when someone listens to it: the gateway
    does not, and with a listener the message goes grpclib's whole way, event and all.
    The ``messages_sent`` counters grpclib keeps for channelz are not kept here (nothing
    reads them in the daemon), as RunStream's tape never kept them.
    """

    async def send_message(self, message: Any) -> None:
        """grpclib's ``send_message``: the same frames, written here where they can be."""
        if ((not self._cardinality.server_streaming and self._send_message_done)
                or self._dispatch.send_message is not _NO_LISTENER):
            await super().send_message(message)  # a second unary answer raises there
            return
        await send_encoded(self, self._codec.encode(message, self._send_type))


def send_messages_directly(stream: grpclib.server.Stream[Any, Any]) -> None:
    """Make ``stream`` (grpclib's server stream of one call) a :class:`DirectSendStream`.

    Its class is changed to a subclass that adds no state, as ``_headers`` does for the
    HTTP/2 stream (no bound function kept on it, no reference cycle).
    """
    if type(stream) is grpclib.server.Stream:
        stream.__class__ = DirectSendStream


def _flush_if_alone(h2_stream: Any) -> None:
    """Flush the connection's cork now when no other stream is open on it.

    Then nothing else could join this send and the client gets the end of its
    call before this task winds down; with other streams open, their frames of
    this loop iteration join it at the iteration's flush (one send, as before).
    """
    flush = getattr(h2_stream._transport, "flush", None)
    streams = h2_stream._h2_connection.streams.values()
    if flush is not None and all(s.closed for s in streams):
        flush()


def data_frame(h2: H2Connection, stream_id: int | None, prefix: bytes,
               data: bytes) -> bytes | None:
    """The bytes ``h2.send_data(stream_id, prefix + data)`` would queue, with h2's books
    kept as it keeps them; None (nothing changed) where that is not the whole story.

    Anything h2 still holds to send comes first (normally nothing: grpclib
    writes it out after every h2 call).
    """
    h2s = h2.streams.get(stream_id) if stream_id is not None else None
    length = len(prefix) + len(data)
    if (h2s is None or length > h2.max_outbound_frame_size
            or length > h2.outbound_flow_control_window
            or length > h2s.outbound_flow_control_window
            or h2.state_machine.state not in _OPEN_CONNECTION
            or h2s.state_machine.state not in _SENDING_STREAM):
        return None
    h2.outbound_flow_control_window -= length
    h2s.outbound_flow_control_window -= length
    return b"".join((h2.data_to_send(), length.to_bytes(3, "big"), _DATA_NO_FLAGS,
                     h2s.stream_id.to_bytes(4, "big"), prefix, data))


class TapeGatewayServer(GatewayServiceServer[Any]):
    """The generated GatewayService servicer, with RunStream sending its tape as bytes."""

    def __init__(self, app: Any, ctx: Callable[[], Any], max_bytes: int) -> None:
        super().__init__(app, ctx)
        self._max_bytes = max_bytes

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        """The generated routes, with RunStream sending through :func:`send_encoded`."""
        mapping = super().__mapping__()
        generic = mapping[RUN_STREAM]
        mapping[RUN_STREAM] = grpclib.const.Handler(
            self._rpc_run_stream, generic.cardinality, generic.request_type, generic.reply_type)
        return mapping

    async def _rpc_run_stream(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        max_bytes = self._max_bytes
        # The app's RunStream itself (not the generated relay): one generator less per message.
        async for response in self._app.run_stream(self._ctx(), stream.__aiter__()):
            if type(response) is not TapeResponse:
                await stream.send_message(response)
                continue
            tape = response.tape
            data = tape.wire()
            if len(data) > max_bytes:
                await _send_generically(stream, data)  # the codec's cap: RESOURCE_EXHAUSTED
            else:
                await send_encoded(stream, data)
            if tape.ends_call:
                # The run ended and did not fail: the call's OK status goes now, with
                # the last message, not after the run loop and grpclib have wound down
                # (the client waits for it to start its next turn).
                await stream.send_trailing_metadata()
                _flush_if_alone(stream._stream)
