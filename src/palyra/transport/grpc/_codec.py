"""The protobuf codec: a size cap (grpclib has no max-message setting) and fast encoding."""

from __future__ import annotations

from typing import Any

from grpclib.encoding.proto import ProtoCodec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.protobin import encode_binary
from palyra.core.protocheck import WireFormatError, check_wire_format


class CappedProtoCodec(ProtoCodec):
    """``ProtoCodec`` that refuses messages above ``max_bytes`` in either direction."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes

    def encode(self, message: Any, message_type: Any) -> bytes:
        if not isinstance(message, message_type):
            raise TypeError(f"message must be of type {message_type!r}, not {type(message)!r}")
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
        try:
            # betterproto2 parses leniently (truncated lengths, mismatched wire
            # types, bad UTF-8, unknown fields); refuse those before anything runs.
            check_wire_format(data, message_type)
            return super().decode(data, message_type)
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
