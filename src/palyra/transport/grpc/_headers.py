"""A call's response headers and trailers written without h2's ``send_headers``: the same
bytes, the same books.

Each RunStream turn sends two header blocks: the initial metadata (``:status``
and ``content-type``) and the trailers (``grpc-status``). h2 builds each
through ``HeadersFrame``/``Flags`` objects, its header pipeline (a generator per
step, UTF-8 encoding, an informational-response scan), a ``serialize`` and the
connection's send buffer: about 15 µs a block, twice a turn, on the path to the
turn's first answer and to its end.

:func:`headers_frame` builds the frame itself: the block from h2's own HPACK
encoder, one HEADERS frame with END_HEADERS (and END_STREAM for trailers), after
feeding both of h2's state machines the inputs ``send_headers`` feeds them
(``SEND_HEADERS``, then ``SEND_END_STREAM``), so every state, flag and event
h2 keeps is h2's own. (``send_headers`` also records the block's ``:method`` on
the stream: a response has none, and a server's stream holds None already.) It declines, changing nothing, wherever
``send_headers`` would do more than that: a client connection, h2 set to
normalise or validate outbound headers (grpclib's listener sets neither), a
connection or stream not open for sending, a pseudo-header other than
``:status: 200``, headers after the response's that do not end the stream
(h2 raises there), or a block that might not fit one frame (CONTINUATION).

:func:`write_headers_directly` gives one grpclib stream a ``send_headers``
that writes such a frame when it can and calls grpclib's own otherwise, so
grpclib's ``send_initial_metadata``/``send_trailing_metadata`` (their events,
checks and flags) run as before.
"""

from __future__ import annotations

from grpclib.protocol import Stream
from h2.connection import ConnectionInputs, ConnectionState, H2Connection
from h2.stream import StreamInputs, StreamState

_OPEN_CONNECTION = (ConnectionState.SERVER_OPEN, ConnectionState.CLIENT_OPEN)
_SENDING_STREAM = (StreamState.OPEN, StreamState.HALF_CLOSED_REMOTE)
_HEADERS = 0x01  # frame type
_END_STREAM = 0x01
_END_HEADERS = 0x04
# What HPACK adds to a field's name and value at most here: its two length prefixes
# (a 7-bit prefix and up to three more bytes each below 2 MiB) and the representation's
# own prefix (up to four bytes); Huffman is used only when it is shorter.
_FIELD_OVERHEAD = 12


def headers_frame(h2: H2Connection, stream_id: int | None, headers: list[tuple[str, str]],
                  end_stream: bool) -> bytes | None:
    """The bytes ``h2.send_headers(stream_id, headers, end_stream=end_stream)`` would queue,
    with h2's states kept as it keeps them; None (nothing changed) where that is not the
    whole story (see the module doc).

    Anything h2 still holds to send comes first (normally nothing: grpclib writes it out
    after every h2 call).
    """
    h2s = h2.streams.get(stream_id) if stream_id is not None else None
    config = h2.config
    if (h2s is None or config.client_side or config.normalize_outbound_headers
            or config.validate_outbound_headers
            or h2.state_machine.state not in _OPEN_CONNECTION
            or h2s.state_machine.state not in _SENDING_STREAM
            or (h2s.state_machine.headers_sent and not end_stream)):
        return None
    size = 0
    for name, value in headers:
        if (type(name) is not str or type(value) is not str
                or (name[:1] == ":" and (name, value) != (":status", "200"))):
            return None
        size += len(name.encode()) + len(value.encode()) + _FIELD_OVERHEAD
    if size > h2.max_outbound_frame_size:
        return None
    # send_headers' order: both transitions before the block changes the HPACK table.
    h2.state_machine.process_input(ConnectionInputs.SEND_HEADERS)
    h2s.state_machine.process_input(StreamInputs.SEND_HEADERS)
    block = h2.encoder.encode(headers)
    flags = _END_HEADERS
    if end_stream:
        h2s.state_machine.process_input(StreamInputs.SEND_END_STREAM)
        flags |= _END_STREAM
    return b"".join((h2.data_to_send(), len(block).to_bytes(3, "big"), bytes((_HEADERS, flags)),
                     h2s.stream_id.to_bytes(4, "big"), block))


class _DirectHeadersStream(Stream):
    """grpclib's HTTP/2 stream of one call, sending its header blocks through
    :func:`headers_frame` where it can and as grpclib does otherwise."""

    async def send_headers(self, headers: list[tuple[str, str]],
                           end_stream: bool = False) -> None:
        """grpclib's ``send_headers``: the same frame, written here when h2 would only
        build that one frame (and the transport is not paused)."""
        frame = None
        if self.connection.write_ready.is_set():
            frame = headers_frame(self._h2_connection, self.id, headers, end_stream)
        if frame is None:
            await super().send_headers(headers, end_stream=end_stream)  # waits, raises
            return
        self._transport.write(frame)
        self.connection.headers_send_process()  # as grpclib's send_headers ends


def write_headers_directly(stream: Stream) -> None:
    """Make ``stream`` (grpclib's HTTP/2 stream of one call) send its header blocks through
    :func:`headers_frame`, falling back to grpclib's ``send_headers``.

    Its class is changed to a subclass that adds no state, rather than a bound function
    set on it: that would make a reference cycle of every call's stream, left to the
    garbage collector where reference counting frees it now.
    """
    if type(stream) is Stream:
        stream.__class__ = _DirectHeadersStream
