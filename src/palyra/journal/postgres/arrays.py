"""One-dimensional ``bytea[]`` and ``text[]`` parameters, dumped in one pass.

Every commit sends its rows as arrays (``unnest`` of the sub-DB names, keys and
values: about 80 rows a commit) and its event ids as another. psycopg's generic
list dumper works element by element in Python (a type look-up, several appends and
a ``struct.pack`` each): profiled with the thread's CPU clock, it was a third of
the writer thread's CPU per commit. The elements here are always ``bytes`` (or a
``str`` for ``text[]``) and never NULL, so the binary array format is a fixed
header and a length before each element, built with one ``join``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

_BYTEA, _BYTEA_ARRAY = 17, 1001
_TEXT, _TEXT_ARRAY = 25, 1009
_HEADER = struct.Struct(">iiiii")  # ndim, has nulls, element oid, length, lower bound
_LENGTH = struct.Struct(">i").pack


class ByteaArray:
    """``items`` as a ``bytea[]`` parameter (no element may be None)."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[bytes]) -> None:
        self.items = items


class TextArray:
    """``items`` as a ``text[]`` parameter (no element may be None)."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[str]) -> None:
        self.items = items


def binary_array(element_oid: int, items: Sequence[bytes]) -> bytes:
    """PostgreSQL's binary form of a one-dimensional array of ``items`` without NULLs."""
    if not items:  # an empty array has no dimensions
        return _HEADER.pack(0, 0, element_oid, 0, 0)[:12]
    parts = [_HEADER.pack(1, 0, element_oid, len(items), 1)]
    for item in items:
        parts.append(_LENGTH(len(item)))
        parts.append(item)
    return b"".join(parts)


class _ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = _BYTEA_ARRAY

    def dump(self, obj: Any) -> bytes:
        return binary_array(_BYTEA, obj.items)


class _TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = _TEXT_ARRAY

    def dump(self, obj: Any) -> bytes:
        return binary_array(_TEXT, [item.encode() for item in obj.items])


def register(conn: psycopg.Connection[Any]) -> None:
    """Let ``conn`` send :class:`ByteaArray` and :class:`TextArray` parameters."""
    conn.adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
    conn.adapters.register_dumper(TextArray, _TextArrayDumper)
