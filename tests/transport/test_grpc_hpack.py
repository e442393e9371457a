"""Header blocks answered from memory: always what hpack decodes, table and all.

``RememberingDecoder`` (``transport/grpc/_hpack.py``) answers a header block it
has decoded before from memory while the table and limits are as they were.
These tests feed it and a plain hpack ``Decoder`` the same blocks from one
encoder (blocks repeated, blocks that insert, evict and resize) and hold every
answer and the table after each block to hpack's; and they hold it to the h2
that calls it (the pin's twin tests: h2 decodes through ``decoder.decode`` and
sets the limits this decoder takes over).
"""

from __future__ import annotations

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import RequestReceived
from hpack import (
    Decoder,
    Encoder,
    HeaderTuple,
    InvalidTableSizeError,
    NeverIndexedHeaderTuple,
    OversizedHeaderListError,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.transport.grpc._headers import headers_frame
from palyra.transport.grpc._hpack import (
    REMEMBERED,
    REMEMBERED_BYTES,
    RememberingDecoder,
    RememberingEncoder,
    remember_encoding,
    remember_headers,
)

REQUEST = [(":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1:5000"),
           (":path", "/palyra.v1.GatewayService/RunStream"), ("te", "trailers"),
           ("content-type", "application/grpc"), ("x-palyra-principal", "user:bench")]
SECRET = ("authorization", "Bearer bench-admin-token", True)  # never indexed, as h2 sends it

# A block: the request's headers, maybe a secret and a varying header; some blocks
# first resize the encoder's table (a size update at the block's start, evictions).
_extra = st.lists(st.sampled_from([("x-n", str(i)) for i in range(12)]), max_size=3)
_block = st.tuples(st.booleans(), _extra, st.sampled_from([None, None, None, 0, 120, 4096]))


def _table(decoder: Decoder) -> tuple[object, ...]:
    table = decoder.header_table
    return tuple(table.dynamic_entries), table.maxsize, table._current_size


@settings(max_examples=150, deadline=None)
@given(blocks=st.lists(_block, min_size=1, max_size=40))
def test_answers_and_table_are_hpacks(
        blocks: list[tuple[bool, list[tuple[str, str]], int | None]]) -> None:
    encoder, plain, ours = Encoder(), Decoder(), RememberingDecoder(65536)
    for secret, extra, resize in blocks:
        if resize is not None:
            encoder.header_table_size = resize
        headers: list[tuple[str, str] | tuple[str, str, bool]] = [*REQUEST, *extra]
        if secret:
            headers.append(SECRET)
        data = encoder.encode(headers)
        assert ours.decode(data, raw=True) == plain.decode(data, raw=True)
        assert _table(ours) == _table(plain)


def test_a_repeated_block_is_answered_from_memory_and_a_changing_one_never() -> None:
    encoder, ours = Encoder(), RememberingDecoder(65536)
    first = encoder.encode(REQUEST)  # inserts every header: changes the table
    ours.decode(first)
    assert ours._remembered == {}
    again = encoder.encode(REQUEST)  # all indexed now: only reads it
    assert again != first
    answer = ours.decode(again)
    assert list(ours._remembered) == [(again, False)]
    answer.append(("mutated", "by the caller"))  # the memory is not the caller's list
    assert ours.decode(again) == [(k, v) for k, v in REQUEST]


def test_a_remembered_block_is_decoded_again_once_the_table_moved() -> None:
    encoder, plain, ours = Encoder(), Decoder(), RememberingDecoder(65536)
    for block in (REQUEST, REQUEST):
        data = encoder.encode(block)
        plain.decode(data)
        ours.decode(data)
    remembered = encoder.encode(REQUEST)
    assert ours.decode(remembered) == plain.decode(remembered)
    # The table moves under the same bytes: an insertion shifts every dynamic index.
    moved = encoder.encode([("x-new", "1")])
    ours.decode(moved)
    plain.decode(moved)
    assert ours.decode(remembered) == plain.decode(remembered)  # the same bytes, new meaning
    assert ours.decode(remembered) != [(k, v) for k, v in REQUEST]


def test_the_limits_are_checked_as_before() -> None:
    encoder, ours = Encoder(), RememberingDecoder(65536)
    ours.decode(encoder.encode(REQUEST))
    data = encoder.encode(REQUEST)
    ours.decode(data)  # remembered
    ours.max_header_list_size = 100
    with pytest.raises(OversizedHeaderListError):
        ours.decode(data)
    ours.max_header_list_size = 65536
    ours.max_allowed_table_size = 100  # below the table the encoder has filled
    with pytest.raises(InvalidTableSizeError):
        ours.decode(data)


def test_memory_is_bounded() -> None:
    encoder, ours = Encoder(), RememberingDecoder(65536)
    for i in range(3 * REMEMBERED):
        header = [("x-n", str(i))]
        ours.decode(encoder.encode(header))  # inserts
        ours.decode(encoder.encode(header))  # indexed: remembered
        assert len(ours._remembered) <= REMEMBERED


def test_a_large_block_is_decoded_every_time() -> None:
    encoder, ours = Encoder(), RememberingDecoder(65536)
    # Never indexed: the block only reads the table, but it is past the size remembered.
    large = encoder.encode([("x-large", "v" * (2 * REMEMBERED_BYTES), True)])
    assert len(large) > REMEMBERED_BYTES
    ours.decode(encoder.encode(REQUEST))  # inserts
    small = encoder.encode(REQUEST)  # all indexed: remembered
    for data in (large, large, small):
        ours.decode(data)
    assert list(ours._remembered) == [(small, False)]


def _server() -> H2Connection:
    # grpclib's server settings (grpclib.server.Server)
    return H2Connection(H2Configuration(
        client_side=False, header_encoding="ascii", validate_inbound_headers=False,
        validate_outbound_headers=False, normalize_inbound_headers=False,
        normalize_outbound_headers=False))


def test_h2_sets_only_what_is_taken_over() -> None:
    """Twin test for the h2 pin: the decoder h2 builds differs from a fresh hpack one only
    in the limits :func:`remember_headers` takes over."""
    built = _server().decoder
    fresh = Decoder()
    differing = {k for k in vars(built) if k != "header_table" and vars(built)[k] != vars(fresh)[k]}
    assert set(vars(built)) == set(vars(fresh))
    assert differing <= {"max_header_list_size", "max_allowed_table_size"}
    assert vars(built.header_table) == vars(fresh.header_table)  # empty, default size
    taken = remember_headers(built)
    assert taken.header_table is built.header_table
    assert taken.max_header_list_size == built.max_header_list_size
    assert taken.max_allowed_table_size == built.max_allowed_table_size
    assert set(vars(taken)) == set(vars(built)) | {"_remembered"}


def test_h2_decodes_requests_through_it() -> None:
    """Twin test for the h2 pin: h2 decodes a request's header block with
    ``decoder.decode``, so the second same request on a connection is answered from memory,
    and h2's events are those of a connection without it."""
    client = H2Connection(H2Configuration(client_side=True))
    client.initiate_connection()
    plain, ours = _server(), _server()
    ours.decoder = remember_headers(ours.decoder)
    for server in (plain, ours):
        server.initiate_connection()
    for stream_id in (1, 3, 5):
        client.send_headers(stream_id, REQUEST, end_stream=True)
        wire = client.data_to_send()
        got, expected = ours.receive_data(wire), plain.receive_data(wire)
        assert [repr(e) for e in got] == [repr(e) for e in expected]
        request = next(e for e in got if isinstance(e, RequestReceived))
        assert request.headers == [(k, v) for k, v in REQUEST]
    assert isinstance(ours.decoder, RememberingDecoder)
    assert len(ours.decoder._remembered) == 1  # streams 3 and 5 sent the same block


# -- the encoder ------------------------------------------------------------------------
INITIAL = [(":status", "200"), ("content-type", "application/grpc")]
TRAILERS = [("grpc-status", "0")]
# A header list as the daemon or a caller might hand it: plain tuples, a never-indexed
# secret (a 3-tuple or hpack's own tuple, equal to the plain one), a varying header.
_answer = st.tuples(st.sampled_from(["initial", "trailers", "tuples", "never", "sensitive"]),
                    _extra, st.sampled_from([None, None, None, 0, 60, 4096]))


def _headers_of(kind: str, extra: list[tuple[str, str]]) -> list[object]:
    return {"initial": [*INITIAL, *extra], "trailers": [*TRAILERS, *extra],
            "tuples": [HeaderTuple(k, v) for k, v in [*INITIAL, *extra]],
            "never": [*TRAILERS, NeverIndexedHeaderTuple(*SECRET[:2])],
            "sensitive": [*TRAILERS, SECRET, *extra]}[kind]


@settings(max_examples=150, deadline=None)
@given(answers=st.lists(_answer, min_size=1, max_size=40), huffman=st.booleans())
def test_encoded_blocks_and_table_are_hpacks(
        answers: list[tuple[str, list[tuple[str, str]], int | None]], huffman: bool) -> None:
    """The same header lists, table resizes between them: the remembering encoder gives
    hpack's bytes every time, leaves hpack's table, and a decoder reads them back."""
    plain, ours, decoder = Encoder(), RememberingEncoder(), Decoder()
    for kind, extra, resize in answers:
        if resize is not None:
            plain.header_table_size = resize
            ours.header_table_size = resize
        headers = _headers_of(kind, extra)
        data = ours.encode(headers, huffman)
        assert data == plain.encode(headers, huffman)
        assert _table(ours) == _table(plain)  # type: ignore[arg-type]
        assert ours.header_table.resized == plain.header_table.resized
        assert decoder.decode(data) == [tuple(h)[:2] for h in headers]


def test_a_repeated_list_is_answered_from_memory_and_a_changing_one_never() -> None:
    plain, ours = Encoder(), RememberingEncoder()
    first = ours.encode(INITIAL)  # inserts content-type: changes the table
    assert first == plain.encode(INITIAL)
    assert ours._remembered == {}
    again = ours.encode(INITIAL)  # all indexed now: only reads the table
    assert again == plain.encode(INITIAL) != first
    assert list(ours._remembered) == [(tuple(INITIAL), True)]
    assert ours.encode(INITIAL) is again  # from memory
    # An insertion moves every dynamic index: the same list, new bytes, from hpack.
    assert ours.encode([("x-new", "1")]) == plain.encode([("x-new", "1")])
    moved = ours.encode(INITIAL)
    assert moved == plain.encode(INITIAL) != again


def test_hpacks_own_tuples_and_a_pending_resize_are_encoded_every_time() -> None:
    plain, ours = Encoder(), RememberingEncoder()
    for encoder in (plain, ours):
        encoder.encode(TRAILERS)  # inserts grpc-status
    never = [NeverIndexedHeaderTuple("grpc-status", "0")]  # equal to TRAILERS, not alike
    assert never == TRAILERS
    assert ours.encode(TRAILERS) == plain.encode(TRAILERS)  # indexed: remembered
    assert ours.encode(never) == plain.encode(never)  # through hpack: not the memory's
    assert [key[0] for key in ours._remembered] == [tuple(TRAILERS)]
    for encoder in (plain, ours):
        encoder.header_table_size = 100  # a size update starts the next block
    resized = ours.encode(TRAILERS)
    assert resized == plain.encode(TRAILERS) != ours.encode(TRAILERS)
    assert ours.encode(TRAILERS) == plain.encode(TRAILERS)


def test_the_encoder_memory_is_bounded() -> None:
    ours = RememberingEncoder()
    for i in range(3 * REMEMBERED):
        header = [("x-n", str(i))]
        ours.encode(header)  # inserts
        ours.encode(header)  # indexed: remembered
        assert len(ours._remembered) <= REMEMBERED


def test_h2_builds_the_encoder_that_is_taken_over() -> None:
    """Twin test for the h2 pin: the encoder h2 builds is a fresh hpack one, and
    :func:`remember_encoding` takes over every part of it."""
    built = _server().encoder
    fresh = Encoder()
    assert type(built) is Encoder
    assert set(vars(built)) == set(vars(fresh)) == {"header_table", "huffman_coder",
                                                    "table_size_changes"}
    assert vars(built.header_table) == vars(fresh.header_table)
    taken = remember_encoding(built)
    assert all(getattr(taken, k) is getattr(built, k) for k in vars(built))
    assert set(vars(taken)) == set(vars(built)) | {"_remembered"}


def test_answers_written_through_it_are_what_h2_sends() -> None:
    """Twin test for the h2 pin: calls' initial metadata and trailers written with
    ``headers_frame`` through a remembering encoder are the bytes h2's ``send_headers``
    sends on a connection without it, call after call, and a peer reads them back."""
    client = H2Connection(H2Configuration(client_side=True, header_encoding="ascii"))
    client.initiate_connection()
    preamble = client.data_to_send()
    plain, ours = _server(), _server()
    ours.encoder = remember_encoding(ours.encoder)
    for server in (plain, ours):
        server.initiate_connection()
        server.receive_data(preamble)
        settings = server.data_to_send()
    client.receive_data(settings)
    wire = b""
    for stream_id in (1, 3, 5, 7):
        client.send_headers(stream_id, REQUEST, end_stream=True)
        request = client.data_to_send()
        plain.receive_data(request)
        ours.receive_data(request)
        plain.send_headers(stream_id, INITIAL)
        plain.send_headers(stream_id, TRAILERS, end_stream=True)
        expected = plain.data_to_send()
        got = b"".join(headers_frame(ours, stream_id, h, end) or b"?"
                       for h, end in ((INITIAL, False), (TRAILERS, True)))
        assert got == expected
        wire += got
    assert len(ours.encoder._remembered) == 2  # type: ignore[attr-defined]
    client.data_to_send()
    events = client.receive_data(wire)
    assert [getattr(e, "headers", None) for e in events if hasattr(e, "headers")] == [
        h for _ in range(4) for h in (INITIAL, TRAILERS)]
