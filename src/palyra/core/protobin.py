"""The protobuf binary form of palyra's messages: ``bytes(m)`` and ``cls.parse``, fast.

betterproto2's ``__bytes__`` looks each field's default up through
``warnings.catch_warnings`` on every call, and ``parse`` reads every field through
a generic path over a ``BytesIO``; for the gRPC gateway those were the largest cost
of each streamed tape event. The codecs here are generated from the spec
(``codegen/render_codecs.py`` → ``palyra_gen.proto_binary``): one straight-line
encoder per message (defaults skipped, packed repeated scalars, map entries, unknown
fields appended) and one table of readers per message, checked to give identical
bytes and equal messages for every message of the spec (tests/core/test_protobin.py).
Decoding leaves anything unusual (map fields, a known field with an unexpected wire
type, truncated or invalid input) to betterproto2 itself, so errors are betterproto2's.
"""

from __future__ import annotations

from palyra_gen.codec_runtime import SMALL, varint
from palyra_gen.proto_binary import body_encoder, decode_binary, encode_binary

__all__ = ["SMALL", "body_encoder", "decode_binary", "encode_binary", "varint"]
