"""``QuietH2Connection`` handles every frame exactly as h2's own ``H2Connection``.

Two server connections, one stock and one quiet, are fed the same bytes: a
client's requests, data, resets, pings and window updates, and raw frames on
streams that were reset, ended or never opened (h2's answers to frames on closed
streams and its errors). After each step their events, the bytes they would
send and the errors they raise must be the same.
"""

from __future__ import annotations

import contextlib
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.exceptions import H2Error
from hpack import Encoder
from hyperframe.frame import DataFrame, HeadersFrame, WindowUpdateFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.transport.grpc._h2 import QuietH2Connection, quieten

REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
           (":path", "/palyra.v1.GatewayService/RunStream"), ("te", "trailers"),
           ("content-type", "application/grpc")]
STREAMS = st.sampled_from([1, 3, 5, 7])
ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("open"), STREAMS, st.booleans()),
    st.tuples(st.just("data"), STREAMS, st.booleans()),
    st.tuples(st.just("client_reset"), STREAMS),
    st.tuples(st.just("server_reset"), STREAMS),
    st.tuples(st.just("server_end"), STREAMS),
    st.tuples(st.just("ping")),
    st.tuples(st.just("raw_data"), STREAMS),
    st.tuples(st.just("raw_headers"), STREAMS),
    st.tuples(st.just("raw_window"), STREAMS),
), max_size=14)


def _server() -> H2Connection:
    server = H2Connection(H2Configuration(client_side=False))
    server.initiate_connection()
    server.data_to_send()
    return server


def _outcome(server: H2Connection, step: Any) -> tuple[Any, ...]:
    try:
        return ("ok", [repr(e) for e in step(server)], server.data_to_send())
    except H2Error as exc:  # the same error, the same text
        return ("error", type(exc), str(exc))


def _client_bytes(client: H2Connection, action: tuple[Any, ...]) -> bytes | None:
    """What the client sends for ``action``, or None when it is not the client's to do."""
    kind = action[0]
    try:
        if kind == "nothing":
            pass
        elif kind == "open":
            client.send_headers(action[1], REQUEST, end_stream=action[2])
        elif kind == "data":
            client.send_data(action[1], b"\x00\x00\x00\x00\x01x", end_stream=action[2])
        elif kind == "client_reset":
            client.reset_stream(action[1])
        elif kind == "ping":
            client.ping(b"12345678")
        elif kind == "raw_data":
            return DataFrame(action[1], data=b"\x00\x00\x00\x00\x00", flags=["END_STREAM"]
                             ).serialize()
        elif kind == "raw_headers":
            return HeadersFrame(action[1], data=Encoder().encode(REQUEST),
                                flags=["END_HEADERS"]).serialize()
        elif kind == "raw_window":
            return WindowUpdateFrame(action[1], window_increment=10).serialize()
        else:
            return None
    except H2Error:
        return b""  # the client refused: nothing to send
    return client.data_to_send()


SCENARIOS = {
    # Frames on a stream the server reset, kept (StreamClosedError: h2 answers RST_STREAM)
    # or cleaned up once a newer stream opened (StreamIDTooLowError).
    f"{frame} after reset{', cleaned up' if cleaned else ''}": [
        ("open", 1, False), ("server_reset", 1), *([("open", 3, False)] if cleaned else []),
        (frame, 1)]
    for frame in ("raw_data", "raw_headers", "raw_window") for cleaned in (False, True)
} | {
    # The same after both sides ended the stream (a connection error once cleaned up).
    f"{frame} after end{', cleaned up' if cleaned else ''}": [
        ("open", 1, True), ("server_end", 1), *([("open", 3, False)] if cleaned else []),
        (frame, 1)]
    for frame in ("raw_data", "raw_headers", "raw_window") for cleaned in (False, True)
} | {
    # A stream never opened, below one that was: a connection error.
    "headers below the newest stream": [("open", 3, False), ("raw_headers", 1)],
}


def test_the_closed_stream_cases_as_h2() -> None:
    for actions in SCENARIOS.values():
        _same_as_h2(actions)


@settings(max_examples=150, deadline=None)
@given(actions=ACTIONS)
def test_quiet_connection_answers_every_frame_as_h2_does(actions: list[tuple[Any, ...]]) -> None:
    _same_as_h2(actions)


def _same_as_h2(actions: list[tuple[Any, ...]]) -> None:
    client = H2Connection(H2Configuration(client_side=True))
    client.initiate_connection()
    stock, quiet = _server(), _server()
    quieten(quiet)
    assert type(quiet) is QuietH2Connection
    pending = client.data_to_send()
    for action in [("nothing",), *actions]:
        wire = _client_bytes(client, action)
        if wire is None:  # a server-side action, done to both
            stream_id = action[1]

            def step(server: H2Connection, kind: str = action[0], sid: int = stream_id
                     ) -> list[Any]:
                if kind == "server_reset":
                    server.reset_stream(sid)
                else:
                    server.send_headers(sid, [(":status", "200")], end_stream=True)
                return []
        else:
            data = pending + wire
            pending = b""

            def step(server: H2Connection, data: bytes = data) -> list[Any]:
                return server.receive_data(data)
        expected = _outcome(stock, step)
        assert _outcome(quiet, step) == expected
        if expected[0] == "error" and action[0] not in ("server_reset", "server_end"):
            return  # a connection error: both are done
        if expected[0] == "ok" and expected[2]:
            with contextlib.suppress(H2Error):  # the client only makes the bytes to send
                client.receive_data(expected[2])


def test_quieten_leaves_other_classes_alone() -> None:
    class Other(H2Connection):
        pass

    other = Other(H2Configuration(client_side=False))
    quieten(other)
    assert type(other) is Other
