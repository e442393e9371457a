"""proto3 JSON of palyra's messages: ``Message.to_dict()`` and ``Message.from_dict()``, fast.

``Message.to_dict`` re-evaluates the class's string type hints on every call
(``typing.get_type_hints``), which once made it ~70 % of the daemon's CPU per
streamed SSE event, and ``from_dict`` re-derives every key's snake_case name with
regular expressions. The codecs here are generated from the spec
(``codegen/render_codecs.py`` → ``palyra_gen.proto_json``): one straight-line
encoder per message and one decoding table per message, giving the identical dict
and an equal message (checked for every message of the spec by
tests/core/test_protojson.py): lowerCamelCase keys, defaults omitted (except
explicit-presence fields), int64 as strings, bytes as base64, enums by proto name.
A message the generator leaves out (a wrapped type) goes to betterproto2 itself.
"""

from __future__ import annotations

from palyra_gen.proto_json import decode_message, encode_message

__all__ = ["decode_message", "encode_message"]
