"""RunStream over gRPC: the generated servicer, with each commit's tape sent as encoded bytes.

The bytes come from ``palyra.app.run_stream_bytes`` (the app's tape wire
encoder, property-tested equal to ``bytes(RunStreamResponse(...))``).

Each response goes out through :func:`send_encoded`: the gRPC length prefix
and the bytes handed to h2 as one DATA frame, without the generic path's
per-message layers (grpclib's ``send_message`` dispatch, codec call, struct
packing and chunking loop), which cost about as much as h2 itself for a
tape batch of a few hundred bytes. h2 still builds the frame and keeps the
flow-control windows and stream state; whenever the fast path's conditions do
not all hold (the transport paused by
backpressure, a window or the peer's frame size too small for the message,
a message above the cap), the message goes the generic way, which waits and
chunks as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpclib.const
import grpclib.server
from palyra_gen.palyra import v1 as pb
from palyra_gen.services import GatewayServiceServer

from palyra.app import Encoded, TapeStream, run_stream_bytes

RUN_STREAM = "/palyra.v1.GatewayService/RunStream"


async def send_encoded(stream: grpclib.server.Stream[Any, Any], message: Encoded,
                       max_bytes: int) -> None:
    """Send one already-encoded response on ``stream`` (see the module doc)."""
    data = message.data
    size = len(data)
    if not stream._send_initial_metadata_done:
        await stream.send_initial_metadata()  # as the generic path does before its first
    h2_stream = stream._stream  # grpclib.protocol.Stream: the HTTP/2 stream
    h2 = h2_stream._h2_connection
    stream_id = h2_stream.id
    frame_size = size + 5
    if (stream_id is None or size > max_bytes or not h2_stream.connection.write_ready.is_set()
            or frame_size > h2.max_outbound_frame_size
            or frame_size > h2.local_flow_control_window(stream_id)):
        await stream.send_message(message)  # the generic path: waits, chunks, caps
        return
    h2.send_data(stream_id, b"\x00" + size.to_bytes(4, "big") + data)
    h2_stream._transport.write(h2.data_to_send())
    stream._send_message_done = True


class TapeGatewayServer(GatewayServiceServer[Any]):
    """The generated GatewayService servicer, with RunStream encoding its tape directly."""

    def __init__(self, app: Any, ctx: Callable[[], Any], stream: TapeStream[Encoded],
                 max_bytes: int) -> None:
        super().__init__(app, ctx)
        self._stream = stream
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
        async for response in self.run_stream(stream.__aiter__()):
            await send_encoded(stream, response, max_bytes)

    def run_stream(  # type: ignore[override]
        self, messages: AsyncIterator[pb.RunStreamRequest]
    ) -> AsyncIterator[Encoded]:
        """RunStream: the app's run loop, each batch answered by :func:`run_stream_bytes`."""
        return self._stream(self._ctx(), messages, run_stream_bytes)
