"""Received DATA frames taken without h2's frame parser: the same events, the same books.

A bytes chunk a gRPC connection reads is, on the hot paths, one or a few whole
DATA frames on open streams: a decision sent up a RunStream (HITL), each
commit's tape on the client's side. h2 takes each through its frame buffer, a
``DataFrame`` object and its ``Flags``, a ``repr()`` of the frame for a trace
log it then discards, both state machines and both window managers: about
20 µs a frame, more than grpclib and the codec spend on the message it carries.

:func:`data_events` reads such a chunk itself and answers the ``DataReceived``
events h2 would, keeping h2's books as h2 keeps them for a DATA frame without
padding or END_STREAM on a stream open for receiving: both inbound
flow-control windows go down by the frame's length, and nothing else changes
(both state machines map RECV_DATA to the same state, and the stream's only
checks that headers came first). Anything else in the chunk (another frame
type, a flag, a partial frame, bytes h2 still buffers, a frame over the size
limit or a window, a stream h2 does not hold open, one with a content-length)
and it declines, changing nothing: h2 then takes the whole chunk as before,
raising or answering what it must.
"""

from __future__ import annotations

from h2.connection import ConnectionState, H2Connection
from h2.events import DataReceived
from h2.stream import StreamState

_RECEIVING_CONNECTION = (ConnectionState.SERVER_OPEN, ConnectionState.CLIENT_OPEN)
_RECEIVING_STREAM = (StreamState.OPEN, StreamState.HALF_CLOSED_LOCAL)
_HEADER = 9  # a frame header's bytes: length (3), type (1), flags (1), stream id (4)
_DATA_NO_FLAGS = 0  # type DATA (0) and flags (0) read as one 16-bit number


def data_events(h2: H2Connection, data: bytes) -> list[DataReceived] | None:
    """``h2.receive_data(data)``'s events when ``data`` is whole plain DATA frames on
    streams open for receiving, with h2's books kept as it keeps them; None (nothing
    changed) otherwise (see the module doc)."""
    buffer = h2.incoming_buffer
    if (type(data) is not bytes or buffer._data or buffer._preamble_len or buffer._headers_buffer
            or h2.state_machine.state not in _RECEIVING_CONNECTION):
        return None
    end = len(data)
    max_size = h2.max_inbound_frame_size
    connection_window = h2._inbound_flow_control_window_manager.current_window_size
    stream_windows: dict[int, int] = {}
    frames = []
    pos = 0
    while pos < end:
        body = pos + _HEADER
        if body > end:
            return None
        length = int.from_bytes(data[pos:pos + 3], "big")
        # The stream id's reserved bit must be clear too: h2 would mask it off.
        if (int.from_bytes(data[pos + 3:pos + 5], "big") != _DATA_NO_FLAGS
                or length > max_size or body + length > end or data[pos + 5] & 0x80):
            return None
        stream_id = int.from_bytes(data[pos + 5:body], "big")
        stream = h2.streams.get(stream_id)
        if (stream is None or stream.state_machine.state not in _RECEIVING_STREAM
                or not stream.state_machine.headers_received
                or stream._expected_content_length is not None):
            return None
        window = stream_windows.get(stream_id)
        if window is None:
            window = stream._inbound_window_manager.current_window_size
        if length > window or length > connection_window:
            return None
        stream_windows[stream_id] = window - length
        connection_window -= length
        frames.append((stream, data[body:body + length]))
        pos = body + length
    if not frames:
        return None
    events = []
    for stream, payload in frames:
        length = len(payload)
        h2._inbound_flow_control_window_manager.window_consumed(length)
        stream._inbound_window_manager.window_consumed(length)
        event = DataReceived(stream_id=stream.stream_id)
        event.data = payload
        event.flow_controlled_length = length
        events.append(event)
    return events
