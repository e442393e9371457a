"""A call's header blocks written without h2's ``send_headers``: the same bytes and books.

``headers_frame`` (``transport/grpc/_headers.py``) builds the initial metadata's and
the trailers' HEADERS frames itself; these tests hold it to h2 (the pin's twin
tests), on two server connections set as grpclib's listener sets h2 and fed the
same client bytes: one sends through ``H2Connection.send_headers``, the other
through ``headers_frame``, and the bytes, every stream's and the connection's
state, and what a client makes of them must match; where h2 would do more than
one frame (or raise), ``headers_frame`` declines and changes nothing.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any, cast

import pytest
from grpclib.protocol import Stream
from h2.config import H2Configuration
from h2.connection import H2Connection
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.transport.grpc._headers import headers_frame, write_headers_directly

REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
           (":path", "/palyra.v1.GatewayService/RunStream"), ("te", "trailers"),
           ("content-type", "application/grpc")]
INITIAL = [(":status", "200"), ("content-type", "application/grpc")]


def _server(**config: bool) -> H2Connection:
    # grpclib's server settings (grpclib.server.Server)
    settings_ = {"validate_inbound_headers": False, "validate_outbound_headers": False,
                 "normalize_inbound_headers": False, "normalize_outbound_headers": False,
                 **config}
    return H2Connection(H2Configuration(client_side=False, header_encoding="ascii",
                                        **settings_))


def _twins(end_request: bool = False, **config: bool
           ) -> tuple[H2Connection, H2Connection, H2Connection]:
    """A client and two servers in the same state: the client opened streams 1 and 3."""
    # grpclib's client settings: nothing validated or normalised either
    client = H2Connection(H2Configuration(client_side=True, header_encoding="ascii",
                                          validate_inbound_headers=False))
    client.initiate_connection()
    client.send_headers(1, REQUEST, end_stream=end_request)
    client.send_headers(3, REQUEST, end_stream=end_request)
    wire = client.data_to_send()
    servers = []
    for _ in range(2):
        server = _server(**config)
        server.initiate_connection()
        server.receive_data(wire)
        server.data_to_send()
        servers.append(server)
    client.receive_data(servers[0].data_to_send())
    return client, servers[0], servers[1]


def _books(conn: H2Connection) -> tuple[object, ...]:
    # h2's open-stream counts first: counting drops closed streams from conn.streams.
    counts = (conn.open_outbound_streams, conn.open_inbound_streams)
    streams = tuple(
        (sid, s.state_machine.state, s.state_machine.headers_sent, s.state_machine.trailers_sent,
         s.state_machine.stream_closed_by, s.request_method, s.closed)
        for sid, s in sorted(conn.streams.items()))
    table = conn.encoder.header_table
    return (conn.state_machine.state, counts, streams, tuple(table.dynamic_entries), table.maxsize)


_metadata = st.lists(st.tuples(st.sampled_from(["x-a", "x-b", "grpc-message"]),
                               st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                       max_size=40)), max_size=3)


@settings(max_examples=60, deadline=None)
@given(end_request=st.booleans(), first=_metadata, last=_metadata, status=st.sampled_from(["0", "2", "13"]),
       order=st.permutations([1, 3]))
def test_initial_metadata_and_trailers_are_what_h2_sends(
        end_request: bool, first: list[tuple[str, str]], last: list[tuple[str, str]],
        status: str, order: list[int]) -> None:
    client, by_h2, ours = _twins(end_request)
    blocks = [(INITIAL + first, False), ([("grpc-status", status), *last], True)]
    for stream_id in order:
        for headers, end_stream in blocks:
            by_h2.send_headers(stream_id, headers, end_stream=end_stream)
            expected = by_h2.data_to_send()
            assert headers_frame(ours, stream_id, headers, end_stream) == expected
            assert _books(ours) == _books(by_h2)
            seen = client.receive_data(expected)
            assert [type(e) for e in seen]  # the client takes it: headers, trailers, end


def test_a_trailers_only_answer_is_what_h2_sends() -> None:
    _client, by_h2, ours = _twins(end_request=True)
    headers = [*INITIAL, ("grpc-status", "12"), ("grpc-message", "Method not found")]
    by_h2.send_headers(1, headers, end_stream=True)
    assert headers_frame(ours, 1, headers, True) == by_h2.data_to_send()
    assert _books(ours) == _books(by_h2)


def test_what_h2_still_holds_goes_first() -> None:
    _client, by_h2, ours = _twins()
    by_h2.ping(b"12345678")
    ours.ping(b"12345678")
    by_h2.send_headers(1, INITIAL)
    assert headers_frame(ours, 1, INITIAL, False) == by_h2.data_to_send()


@pytest.mark.parametrize("case", ["client side", "normalizing", "validating", "unknown stream",
                                  "closed stream", "informational", "pseudo", "bytes",
                                  "headers after the response", "too big"])
def test_declines_where_h2_would_do_more_than_one_frame(case: str) -> None:
    config = {"normalizing": {"normalize_outbound_headers": True},
              "validating": {"validate_outbound_headers": True}}.get(case, {})
    client, _by_h2, ours = _twins(**config)
    stream_id, headers, end_stream = 1, INITIAL, False
    if case == "client side":
        ours = client
    elif case == "unknown stream":
        stream_id = 5
    elif case == "closed stream":
        ours.reset_stream(1)
    elif case == "informational":
        headers = [(":status", "100")]
    elif case == "pseudo":
        headers = [(":status", "404")]
    elif case == "bytes":
        headers = [(b":status", b"200")]  # type: ignore[list-item]
    elif case == "headers after the response":
        ours.send_headers(1, INITIAL)
    elif case == "too big":
        headers = [*INITIAL, ("x-big", "v" * ours.max_outbound_frame_size)]
    ours.data_to_send()
    before = _books(ours)
    assert headers_frame(ours, stream_id, headers, end_stream) is None
    assert _books(ours) == before
    assert ours.data_to_send() == b""


def test_a_stream_given_direct_headers_is_still_freed_by_reference_counting() -> None:
    """The call's stream is not made part of a reference cycle (a bound function set on it
    would be): it goes when its last reference does, without waiting for the collector."""
    stream = Stream(cast(Any, None), _server(), cast(Any, None))
    before = set(vars(stream))
    write_headers_directly(stream)
    assert set(vars(stream)) == before  # no state added to the stream
    gone = weakref.ref(stream)
    gc.disable()
    try:
        del stream
        assert gone() is None
    finally:
        gc.enable()
