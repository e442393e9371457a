"""Header blocks a connection has decoded before, answered again without decoding them.

A gRPC client sends the same request headers on every call of a connection
(method, path, authority, content type, its credentials...), and after the first
call HPACK encodes all of them as references to its dynamic table, or as the
same never-indexed literals (``authorization``): the same bytes each time. hpack
decodes them field by field, with a ``HeaderTuple`` and a debug log call for
each and a Huffman decoding of each literal: about 18 µs a RunStream turn, on
the path to the turn's first answer.

:class:`RememberingDecoder` keeps the answer for such a block. An answer is
only a function of the block's bytes while the decoder's table stays as it was,
so a block is remembered only when decoding it left the table exactly as it
found it (no insertion, no eviction, no size update: the block only read the
table), together with that table and the two limits its checks read; it is
answered again only while the table and the limits are still those. Any block
that changes the table, or raises, goes through hpack as before, every time.

The daemon's answers repeat the same way (``:status: 200`` and ``content-type``,
then ``grpc-status: 0``, after the first call all references to the table), and
:class:`RememberingEncoder` keeps the block hpack encoded for such a header list on
the same terms: only a list of plain tuples, only when encoding it left the table as
it found it (no insertion, eviction or pending size update), answered again only
while the table is still that one. hpack's encoder takes ~30 Python calls a block,
two blocks a call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hpack import Decoder, Encoder, HeaderTuple

REMEMBERED = 16
"""Most blocks remembered per connection; past it the oldest half is forgotten."""
REMEMBERED_BYTES = 1024
"""Largest block remembered (a call's request headers take a few dozen bytes): what a
connection can make the daemon keep stays small beside what HTTP/2 lets it buffer."""

_State = tuple[tuple[Any, ...], int, int, int]
_EncoderState = tuple[tuple[Any, ...], int, bool]


class RememberingDecoder(Decoder):
    """hpack's ``Decoder``, answering a block it has decoded before from memory while its
    table and limits are as they were then (see the module doc)."""

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size)
        self._remembered: dict[tuple[bytes, bool], tuple[_State, list[HeaderTuple]]] = {}

    def _state(self) -> _State:
        # The table's entries (compared by identity first: the same tuples while unchanged),
        # its size limit, and the limits the decode checks against.
        table = self.header_table
        return (tuple(table.dynamic_entries), table.maxsize, self.max_header_list_size,
                self.max_allowed_table_size)

    def decode(self, data: bytes, raw: bool = False) -> Iterable[HeaderTuple]:
        """hpack's ``decode``; the same answer, from memory when this block has been decoded
        against the same table and limits and did not change the table."""
        if type(data) is not bytes or len(data) > REMEMBERED_BYTES:
            return super().decode(data, raw)
        key = (data, raw)
        before = self._state()
        known = self._remembered.get(key)
        if known is not None and known[0] == before:
            return list(known[1])  # a new list: the caller may consume or change it
        headers = list(super().decode(data, raw))
        if self._state() == before:  # the block only read the table: a function of it
            remembered = self._remembered
            if len(remembered) >= REMEMBERED:
                for old in list(remembered)[:REMEMBERED // 2]:
                    del remembered[old]
            remembered[key] = (before, list(headers))
        return headers


def remember_headers(decoder: Decoder) -> RememberingDecoder:
    """A :class:`RememberingDecoder` in ``decoder``'s place: the same table and limits.

    Called on a connection that has not yet received a header block, so the table
    taken over is the empty one; it is taken over all the same, limits included.
    """
    remembering = RememberingDecoder(decoder.max_header_list_size)
    remembering.header_table = decoder.header_table
    remembering.max_allowed_table_size = decoder.max_allowed_table_size
    return remembering


class RememberingEncoder(Encoder):
    """hpack's ``Encoder``, answering a header list it has encoded before from memory while
    its table is as it was then (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self._remembered: dict[tuple[tuple[Any, ...], bool], tuple[_EncoderState, bytes]] = {}

    def _state(self) -> _EncoderState:
        # The table's entries (compared by identity first), its size and whether a size
        # update is still to be sent (the next block would start with it).
        table = self.header_table
        return tuple(table.dynamic_entries), table.maxsize, table.resized

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        """hpack's ``encode``; the same block, from memory when this list of plain tuples has
        been encoded against the same table and did not change it."""
        # Plain tuples only: a HeaderTuple (maybe never-indexed) equals the plain tuple.
        if type(headers) is not list or {type(h) for h in headers} != {tuple}:
            return super().encode(headers, huffman)
        key = (tuple(headers), huffman)
        before = self._state()
        known = self._remembered.get(key)
        if known is not None and known[0] == before:
            return known[1]
        data = super().encode(headers, huffman)
        if len(data) <= REMEMBERED_BYTES and self._state() == before:
            remembered = self._remembered
            if len(remembered) >= REMEMBERED:
                for old in list(remembered)[:REMEMBERED // 2]:
                    del remembered[old]
            remembered[key] = (before, data)
        return data


def remember_encoding(encoder: Encoder) -> RememberingEncoder:
    """A :class:`RememberingEncoder` in ``encoder``'s place, with its table (called before the
    connection has sent a header block, as :func:`remember_headers`)."""
    remembering = RememberingEncoder()
    remembering.header_table = encoder.header_table
    remembering.huffman_coder = encoder.huffman_coder
    remembering.table_size_changes = encoder.table_size_changes
    return remembering
