"""The protobuf codec: a size cap (grpclib has no max-message setting) and fast encoding.

The cap is enforced twice on the way in: :func:`install_length_check` makes
grpclib refuse a message from its 5-byte length prefix, before a single byte of
the body is buffered (grpclib would otherwise read a 100 MB message whole and
only then hand it to :meth:`CappedProtoCodec.decode`), and ``decode`` checks
again for any other path.
"""

from __future__ import annotations

import struct
from typing import Any

import grpclib.server
from google.protobuf.message import Message as ProtobufMessage
from grpclib.encoding.proto import ProtoCodec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.protobin import decode_binary, encode_binary
from palyra.core.protocheck import WireFormatError, check_wire_format
from palyra.transport.field_rules import check_request


class Encoded:
    """A message already encoded: the codec sends ``data`` as it is (RunStream's tape,
    encoded once per batch from the stored events: ``palyra.app.TapeBatch.wire``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class CappedProtoCodec(ProtoCodec):
    """``ProtoCodec`` that refuses messages above ``max_bytes`` in either direction.

    The spec's messages are betterproto2's; the standard ``grpc.health.v1`` service
    (grpclib's) speaks Google protobuf messages, encoded and parsed by protobuf itself.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes

    @property
    def max_bytes(self) -> int:
        """The cap, in bytes, on one message in either direction."""
        return self._max

    def encode(self, message: Any, message_type: Any) -> bytes:
        if type(message) is Encoded:
            data = message.data
        elif not isinstance(message, message_type):
            raise TypeError(f"message must be of type {message_type!r}, not {type(message)!r}")
        elif isinstance(message, ProtobufMessage):
            data = message.SerializeToString()  # the standard grpc.health.v1 service's
        else:
            # encode_binary == bytes(message), without betterproto2's per-field
            # default lookups (the largest cost of each streamed tape event).
            data = encode_binary(message)
        if len(data) > self._max:
            raise PalyraError(
                f"response of {len(data)} bytes exceeds the {self._max}-byte message cap",
                code=ErrorCode.RESOURCE_EXHAUSTED,
            )
        return data

    def decode(self, data: bytes, message_type: Any) -> Any:
        if len(data) > self._max:
            raise PalyraError(
                f"request of {len(data)} bytes exceeds the {self._max}-byte message cap",
                code=ErrorCode.PAYLOAD_TOO_LARGE,
                details={"limit_bytes": str(self._max)},
            )
        if issubclass(message_type, ProtobufMessage):
            try:  # the standard grpc.health.v1 service's request: protobuf's own parser
                return message_type.FromString(data)
            except Exception as exc:
                raise PalyraError("request is not a valid protobuf message",
                                  code=ErrorCode.MALFORMED_REQUEST) from exc
        try:
            # betterproto2 parses leniently (truncated lengths, mismatched wire
            # types, bad UTF-8, unknown fields); refuse those before anything runs.
            check_wire_format(data, message_type)
            message = decode_binary(message_type, data)
        except PalyraError:
            raise
        except WireFormatError as exc:
            raise PalyraError(
                f"request is not a valid {message_type.__name__} protobuf message: {exc}",
                code=ErrorCode.MALFORMED_REQUEST,
            ) from exc
        except Exception as exc:
            raise PalyraError(
                "request is not a valid protobuf message", code=ErrorCode.MALFORMED_REQUEST
            ) from exc
        check_request(message)  # the spec's field rules, streamed messages included
        return message


class ClientCodec(ProtoCodec):
    """The client side's codec: :mod:`palyra.core.protobin` both ways (same messages as
    grpclib's ``ProtoCodec``, several times less CPU per streamed tape event)."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        if not isinstance(message, message_type):
            raise TypeError(f"message must be of type {message_type!r}, not {type(message)!r}")
        return encode_binary(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return decode_binary(message_type, data)


async def _whole_message(buffer: Any, cap: int | None) -> bytes | None:
    """The next message's bytes when the next received chunk is exactly one whole message
    (prefix and body, uncompressed, within ``cap``), taken and acknowledged as
    ``Buffer.read`` takes and acknowledges it; None otherwise, the buffer as it was.

    Each message a client streams up a call (a HITL decision on its RunStream) comes
    as one DATA frame: grpclib's way reads it twice (the 5-byte prefix, then the
    body), each read a coroutine through ``Stream.recv_data`` and ``Buffer.read``'s
    chunk bookkeeping (memoryviews, a deque, a join): ~25 Python calls a message
    where this takes ~8. It reads ``grpclib.protocol.Buffer``'s queue, counters and
    ack callback, and puts a chunk it does not take back at the head of that
    ``asyncio.Queue`` (grpclib 0.4.9 pinned; tests/transport/test_grpc_recv.py
    holds both to the libraries' own).
    """
    if buffer._acked_size or buffer._eof:
        return None  # part of a chunk is left over, or the stream has ended: read()'s way
    unacked = buffer._unacked
    item = await unacked.get()
    data, size, ack_size = item
    if (ack_size and size >= 5 and not data[0]
            and int.from_bytes(data[1:5], "big") == size - 5
            and (cap is None or size - 5 <= cap)):
        buffer._ack_callback(ack_size)
        message: bytes = data[5:]
        return message
    unacked._queue.appendleft(item)  # read() takes it first, as if never taken
    return None


async def _recv_message_capped(stream: Any, codec: Any, message_type: Any) -> Any:
    """grpclib's ``recv_message``, refusing an over-cap message from its prefix alone."""
    cap = codec.max_bytes if isinstance(codec, CappedProtoCodec) else None
    whole = await _whole_message(stream.buffer, cap)
    if whole is not None:
        return codec.decode(whole, message_type)
    meta = await stream.recv_data(5)
    if not meta:
        return None
    if len(meta) != 5:
        raise PalyraError("the request ended inside a message prefix",
                          code=ErrorCode.MALFORMED_REQUEST)
    if meta[0]:
        raise PalyraError("compressed messages are not supported",
                          code=ErrorCode.MALFORMED_REQUEST)
    (length,) = struct.unpack(">I", meta[1:])
    if cap is not None and length > cap:
        raise PalyraError(
            f"request of {length} bytes exceeds the {cap}-byte message cap",
            code=ErrorCode.PAYLOAD_TOO_LARGE, details={"limit_bytes": str(cap)})
    data = await stream.recv_data(length)
    if len(data) != length:
        raise PalyraError(f"the request ended after {len(data)} of the {length} bytes its "
                          "prefix announced", code=ErrorCode.MALFORMED_REQUEST)
    return codec.decode(data, message_type)


def install_length_check() -> None:
    """Make grpclib's server streams use :func:`_recv_message_capped` (idempotent).

    grpclib has no max-message setting and reads a whole message before any
    hook runs; its server module looks the function up by name, so this swaps
    it there once for the process.
    """
    grpclib.server.recv_message = _recv_message_capped  # type: ignore[attr-defined]
