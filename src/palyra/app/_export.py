"""Approval export: NDJSON (or one JSON document) with a chained checksum. Pure.

Each record line carries ``checksum = sha256(schema \\n seq \\n prev \\n
sha256(record))`` (hex; ``record`` is the canonical JSON of the approval, and
``prev`` starts as 64 zeros), so an auditor can detect a dropped, reordered or
edited record from the file alone. A trailer gives the count and the final
checksum. Output is cut into chunks of at most 64 KiB, on line boundaries when
a line fits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

SCHEMA_NDJSON = "palyra.approvals.export.ndjson.v1"
SCHEMA_JSON = "palyra.approvals.export.json.v1"
SEED = "0" * 64
MAX_CHUNK = 64 * 1024
_JSON = msgspec.json.Encoder(order="sorted")


def record_checksum(schema: str, seq: int, prev: str, record: dict[str, Any]) -> str:
    """The chained checksum of one exported record."""
    inner = hashlib.sha256(_JSON.encode(record)).hexdigest()
    return hashlib.sha256(f"{schema}\n{seq}\n{prev}\n{inner}".encode()).hexdigest()


def ndjson_lines(records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """Record lines, then the trailer line."""
    prev, count = SEED, 0
    for count, record in enumerate(records, start=1):
        checksum = record_checksum(SCHEMA_NDJSON, count, prev, record)
        yield _JSON.encode({"schema": SCHEMA_NDJSON, "type": "record", "seq": count,
                            "prev": prev, "checksum": checksum, "record": record}) + b"\n"
        prev = checksum
    yield _JSON.encode({"schema": SCHEMA_NDJSON, "type": "trailer", "count": count,
                        "final_checksum": prev}) + b"\n"


def json_document(records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """One JSON document with the same chained checksums (``schema`` .json.v1)."""
    prev, entries = SEED, []
    for seq, record in enumerate(records, start=1):
        checksum = record_checksum(SCHEMA_JSON, seq, prev, record)
        entries.append({"seq": seq, "prev": prev, "checksum": checksum, "record": record})
        prev = checksum
    yield _JSON.encode({"schema": SCHEMA_JSON, "records": entries, "count": len(entries),
                        "final_checksum": prev})


def chunked(pieces: Iterable[bytes], limit: int = MAX_CHUNK) -> Iterator[bytes]:
    """Pack pieces into chunks ≤ ``limit`` bytes; a piece over the limit is split."""
    buffer = bytearray()
    for piece in pieces:
        if buffer and len(buffer) + len(piece) > limit:
            yield bytes(buffer)
            buffer.clear()
        buffer += piece
        while len(buffer) > limit:
            yield bytes(buffer[:limit])
            del buffer[:limit]
    if buffer:
        yield bytes(buffer)
