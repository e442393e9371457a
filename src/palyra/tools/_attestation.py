"""Tool-call attestation and argument digests (pure functions).

The attestation is journaled next to each tool result so an auditor can check
that the recorded output belongs to the recorded call. The argument digest is
what an approval binds to: approving ``fs.write`` for one set of arguments
must not approve another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from palyra.core.canonical import canonical_json
from palyra.tools._spec import ToolResult

ATTESTATION_DOMAIN = b"palyra.tool.attestation.v1"
_ENCODER = msgspec.json.Encoder(order="sorted")


def attest(tool_name: str, args_json: str, result: ToolResult) -> str:
    """SHA-256 hex attestation of one tool execution.

    The hash input is the domain tag ``palyra.tool.attestation.v1`` followed
    by these fields, each UTF-8 encoded with a u64 big-endian length prefix:
    tool name, argument JSON, ``"ok"``/``"error"``, output JSON, error text,
    ``timed_out`` and ``truncated`` as ``"1"``/``"0"``; then, only when the
    result carries facts, each fact's key and value in key order. Length
    prefixes make the encoding unambiguous (no two field lists hash the same
    bytes), and a result without facts hashes as it always did.

    Args:
        tool_name: Name of the tool that ran.
        args_json: The argument JSON exactly as journaled.
        result: The execution result.
    """
    h = hashlib.sha256(ATTESTATION_DOMAIN)
    update = h.update
    for value in (
        tool_name,
        args_json,
        "ok" if result.success else "error",
        result.output_json,
        result.error,
        "1" if result.timed_out else "0",
        "1" if result.truncated else "0",
        *(part for key in sorted(result.facts) for part in (key, result.facts[key])),
    ):
        # Each field as its u64 length and bytes (inline: a helper call per field was
        # a third of this function's time, and a tool step attests once).
        raw = value.encode() if isinstance(value, str) else value
        update(len(raw).to_bytes(8, "big") + raw)
    return h.hexdigest()


def canonical_args_json(args: Mapping[str, Any]) -> str:
    """Canonical JSON of tool arguments: sorted keys, no whitespace (``core.canonical``)."""
    return canonical_json(dict(args)).decode()


def args_digest(tool_name: str, args: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON ``{"args": args, "tool": tool_name}``.

    Key order in ``args`` does not matter; values do (``1`` and ``1.0`` differ,
    as they do for the tool).
    """
    payload = _ENCODER.encode({"tool": tool_name, "args": args})
    return hashlib.sha256(payload).hexdigest()
