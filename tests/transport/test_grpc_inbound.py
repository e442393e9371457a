"""Received DATA frames read without h2's parser: the same events and books as h2's.

``data_events`` reads a chunk of plain DATA frames itself (see ``_inbound``);
these tests hold it to what h2 does, on two server connections in the same
state fed the same client bytes: one through ``H2Connection.receive_data``,
the other through ``data_events``, and the events, both inbound windows and
the stream states must match. Where the chunk is anything else, it declines
and changes nothing, and h2 then takes the chunk as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.transport.grpc._inbound import data_events

REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
           (":path", "/palyra.v1.GatewayService/RunStream"), ("te", "trailers"),
           ("content-type", "application/grpc")]
STREAMS = (1, 3)


def _server() -> H2Connection:
    # grpclib's server settings (grpclib.server.Server)
    return H2Connection(H2Configuration(
        client_side=False, header_encoding="ascii", validate_inbound_headers=False,
        validate_outbound_headers=False, normalize_inbound_headers=False,
        normalize_outbound_headers=False))


def _twins(headers: list[tuple[str, str]] | None = None
           ) -> tuple[H2Connection, H2Connection, H2Connection]:
    """A client and two servers in the same state: streams 1 and 3 open on both."""
    client = H2Connection(H2Configuration(client_side=True))
    client.initiate_connection()
    for stream_id in STREAMS:
        client.send_headers(stream_id, headers or REQUEST)
    wire = client.data_to_send()
    servers = []
    for _ in range(2):
        server = _server()
        server.initiate_connection()
        server.receive_data(wire)
        server.data_to_send()
        servers.append(server)
    client.receive_data(servers[0].data_to_send())
    return client, servers[0], servers[1]


def _books(conn: H2Connection) -> tuple[object, ...]:
    windows = conn._inbound_flow_control_window_manager
    return (windows.current_window_size, windows._bytes_processed, conn.state_machine.state,
            *((s.state_machine.state, s._inbound_window_manager.current_window_size,
               s._inbound_window_manager._bytes_processed) for s in conn.streams.values()))


def _seen(events: Sequence[object]) -> list[tuple[object, ...]]:
    return [(type(e), getattr(e, "stream_id", None), getattr(e, "data", None),
             getattr(e, "flow_controlled_length", None), getattr(e, "stream_ended", None))
            for e in events]


@settings(max_examples=80, deadline=None)
@given(messages=st.lists(st.tuples(st.sampled_from(STREAMS), st.binary(max_size=3_000)),
                         min_size=1, max_size=4))
def test_plain_data_frames_give_what_h2_gives(messages: list[tuple[int, bytes]]) -> None:
    client, by_h2, ours = _twins()
    for stream_id, data in messages:
        client.send_data(stream_id, data)
    wire = client.data_to_send()
    expected = by_h2.receive_data(wire)
    got = data_events(ours, wire)
    assert got is not None
    assert all(type(e) is DataReceived for e in got)
    assert _seen(got) == _seen(expected)
    assert _books(ours) == _books(by_h2)
    # Acknowledged alike, the same WINDOW_UPDATE frames go back.
    for stream_id, data in messages:
        by_h2.acknowledge_received_data(len(data), stream_id)
        ours.acknowledge_received_data(len(data), stream_id)
    assert ours.data_to_send() == by_h2.data_to_send()
    assert _books(ours) == _books(by_h2)


def _decline_case(case: str) -> tuple[H2Connection, H2Connection, bytes]:
    """A chunk ``data_events`` must leave to h2, and the servers it goes to."""
    headers = [*REQUEST, ("content-length", "7")] if case == "content-length" else None
    client, by_h2, ours = _twins(headers)
    data = b"\x00\x00\x00\x00\x02hi"
    if case == "end-stream":
        client.send_data(1, data, end_stream=True)
    elif case == "padded":
        client.send_data(1, data, pad_length=4)
    elif case == "window-update-too":
        client.send_data(1, data)
        client.increment_flow_control_window(1000)
    elif case == "ping-first":
        client.ping(b"12345678")
        client.send_data(1, data)
    elif case == "over-window":
        for _ in range(4):  # 64,000 of the stream's 65,535 bytes
            client.send_data(1, b"x" * 16_000)
    elif case in ("partial", "content-length", "closed"):
        client.send_data(1, data)
    wire = client.data_to_send()
    if case == "partial":
        wire = wire[:-1]
    if case == "closed":
        for server in (by_h2, ours):
            server.reset_stream(1)
            server.data_to_send()
    if case == "over-window":
        # h2's client side stops at its window; write what a bad peer would send past it.
        extra = b"y" * 10_000
        wire += len(extra).to_bytes(3, "big") + b"\x00\x00" + (1).to_bytes(4, "big") + extra
    return by_h2, ours, wire


@pytest.mark.parametrize("case", ["end-stream", "padded", "window-update-too", "ping-first",
                                  "over-window", "partial", "content-length", "closed"])
def test_declines_anything_else_and_h2_takes_it_as_before(case: str) -> None:
    by_h2, ours, wire = _decline_case(case)
    before = _books(ours)
    assert data_events(ours, wire) is None
    assert _books(ours) == before
    outcomes: list[tuple[object, bytes]] = []
    for server in (by_h2, ours):  # h2 then answers (or refuses) the chunk the same way
        try:
            outcomes.append((_seen(server.receive_data(wire)), server.data_to_send()))
        except Exception as exc:  # the same error either way
            outcomes.append((type(exc).__name__, server.data_to_send()))
    assert outcomes[0] == outcomes[1]


def test_declines_while_h2_holds_part_of_a_frame() -> None:
    client, by_h2, ours = _twins()
    # A frame whose payload reads like a DATA frame of its own: after its header alone
    # has reached h2, the rest must go to h2 too, not be read as a frame.
    lookalike = (2).to_bytes(3, "big") + b"\x00\x00" + (1).to_bytes(4, "big") + b"hi"
    client.send_data(1, lookalike)
    wire = client.data_to_send()
    for server in (by_h2, ours):
        assert server.receive_data(wire[:9]) == []
    before = _books(ours)
    assert data_events(ours, wire[9:]) is None
    assert _books(ours) == before
    assert _seen(ours.receive_data(wire[9:])) == _seen(by_h2.receive_data(wire[9:]))


def test_declines_an_unknown_stream_and_the_preamble() -> None:
    _client, _by_h2, ours = _twins()
    frame = (2).to_bytes(3, "big") + b"\x00\x00" + (5).to_bytes(4, "big") + b"hi"
    assert data_events(ours, frame) is None  # stream 5 was never opened
    fresh = _server()
    fresh.initiate_connection()
    assert data_events(fresh, frame) is None  # the client's preamble has not come yet
    assert data_events(ours, b"") is None
