"""RunStream's DATA frames, written without h2's ``send_data``: the same bytes and books.

``data_frame`` builds each commit's frame itself (see ``_tape``); these tests
hold it to what h2 does, on two server connections fed the same client bytes:
one sends through ``H2Connection.send_data``, the other through ``data_frame``,
and the bytes on the wire, both flow-control windows and the stream states must
match; where h2 would raise or chunk (closed stream, frame or window too small),
``data_frame`` declines and changes nothing.
"""

from __future__ import annotations

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.settings import SettingCodes
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.transport.grpc._tape import _flush_if_alone, data_frame

REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
           (":path", "/palyra.v1.GatewayService/RunStream"), ("te", "trailers"),
           ("content-type", "application/grpc")]


def _twins(end_request: bool = False, window: int | None = None
           ) -> tuple[H2Connection, H2Connection, int]:
    """Two server connections in the same state: a client opened stream 1 on both."""
    client = H2Connection(H2Configuration(client_side=True))
    client.initiate_connection()
    if window is not None:
        client.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: window})
    client.send_headers(1, REQUEST, end_stream=end_request)
    wire = client.data_to_send()
    servers = []
    for _ in range(2):
        server = H2Connection(H2Configuration(client_side=False))
        server.initiate_connection()
        server.receive_data(wire)
        server.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
        server.data_to_send()
        servers.append(server)
    return servers[0], servers[1], 1


def _books(conn: H2Connection, stream_id: int) -> tuple[object, ...]:
    stream = conn.streams[stream_id]
    return (conn.outbound_flow_control_window, stream.outbound_flow_control_window,
            conn.state_machine.state, stream.state_machine.state)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=16_000), end_request=st.booleans(), frames=st.integers(1, 3))
def test_a_frame_is_what_h2_sends(data: bytes, end_request: bool, frames: int) -> None:
    by_h2, ours, stream_id = _twins(end_request)
    prefix = b"\x00" + len(data).to_bytes(4, "big")
    for _ in range(frames):
        by_h2.send_data(stream_id, prefix + data)
        expected = by_h2.data_to_send()
        assert data_frame(ours, stream_id, prefix, data) == expected
        assert _books(ours, stream_id) == _books(by_h2, stream_id)


def test_what_h2_still_holds_goes_first() -> None:
    by_h2, ours, stream_id = _twins()
    by_h2.ping(b"12345678")
    ours.ping(b"12345678")
    by_h2.send_data(stream_id, b"\x00\x00\x00\x00\x02hi")
    assert data_frame(ours, stream_id, b"\x00\x00\x00\x00\x02", b"hi") == by_h2.data_to_send()


@pytest.mark.parametrize("case", ["frame", "window", "closed", "unknown"])
def test_declines_where_h2_would_not_send_one_frame(case: str) -> None:
    _by_h2, ours, stream_id = _twins(window=100 if case == "window" else None)
    data = b"x" * (20_000 if case == "frame" else 200)
    if case == "closed":
        ours.end_stream(stream_id)
        ours.data_to_send()
    target = 3 if case == "unknown" else stream_id
    before = (ours.outbound_flow_control_window,
              ours.streams[stream_id].outbound_flow_control_window)
    assert data_frame(ours, target, b"\x00" + len(data).to_bytes(4, "big"), data) is None
    assert (ours.outbound_flow_control_window,
            ours.streams[stream_id].outbound_flow_control_window) == before


@pytest.mark.parametrize("others_open", [False, True])
def test_the_end_of_a_call_is_flushed_at_once_only_when_no_other_stream_is_open(
        others_open: bool) -> None:
    """Alone on its connection, an ended call's bytes leave at once; with other calls open
    they wait for the loop iteration's flush (their frames join the same send())."""
    _by_h2, server, stream_id = _twins(end_request=True)
    if others_open:
        client = H2Connection(H2Configuration(client_side=True))
        client.initiate_connection()
        client.send_headers(1, REQUEST, end_stream=True)
        client.send_headers(3, REQUEST)
        server = H2Connection(H2Configuration(client_side=False))
        server.initiate_connection()
        server.receive_data(client.data_to_send())
        server.send_headers(stream_id, [(":status", "200")])
    server.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)  # the trailers
    flushed: list[bool] = []

    class Cork:
        def flush(self) -> None:
            flushed.append(True)

    class Stream:
        _transport = Cork()
        _h2_connection = server

    _flush_if_alone(Stream())
    assert flushed == ([] if others_open else [True])
