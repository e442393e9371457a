"""MCP tools and results in palyra's terms (pure).

A server's tool becomes a registry tool named ``mcp.<server>.<tool>`` whose
arguments are checked against the server's own JSON Schema before the call;
its result becomes a JSON value for the model: the structured content if the
server gave one, else its content blocks (text as text; an image or other
binary block as its type, MIME type, size and SHA-256, never the bytes). An
image block whose bytes are an image palyra accepts from users (sniffed by
``core.images``: the same formats and size cap) is also handed on as a
:class:`ToolImage`, which the engine stores as an attachment and shows the
model on its next turn; one that is not is described with why it was not.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from palyra.core.canonical import canonical_json
from palyra.core.errors import PalyraError
from palyra.core.images import sniff
from palyra.tools._schema import argument_checker
from palyra.tools._spec import ToolImage

__all__ = ["argument_checker"]  # re-exported: the MCP server checks arguments with it

PREFIX = "mcp"
# A remote tool name palyra will register (the model and Cedar see it).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")


def registry_name(server: str, tool: str) -> str:
    """``mcp.<server>.<tool>``."""
    return f"{PREFIX}.{server}.{tool}"


def usable_tool_name(tool: str) -> bool:
    """Whether a server's tool name can be registered as is."""
    return _TOOL_NAME.fullmatch(tool) is not None


def schema_digest(name: str, description: str, input_schema: Mapping[str, Any]) -> str:
    """SHA-256 of the tool's definition as the server gave it (canonical JSON), so a
    changed definition shows as a changed digest in the attestation."""
    body = {"name": name, "description": description, "input_schema": dict(input_schema)}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _block(block: Mapping[str, Any], images: list[ToolImage]) -> Any:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    data = block.get("data")
    if isinstance(data, str):  # image / audio: an attachment, described not inlined
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raw = data.encode()
        described: dict[str, Any] = {"type": kind, "mime_type": block.get("mimeType", ""),
                                     "bytes": len(raw),
                                     "sha256": hashlib.sha256(raw).hexdigest()}
        if kind == "image":
            try:
                info = sniff(raw)
            except PalyraError as exc:
                described["not_attached"] = exc.message
            else:
                # The bytes say what they are, not the server's MIME type.
                images.append(ToolImage(info.sha256, info.mime_type, info.width, info.height,
                                        raw))
                described.update(mime_type=info.mime_type, width=info.width,
                                 height=info.height, attached=True)
        return described
    if kind == "resource":
        resource = block.get("resource") or {}
        return {"type": "resource", "uri": resource.get("uri", ""),
                "text": resource.get("text", "")}
    return {"type": kind or "unknown"}


def result_value(content: Sequence[Mapping[str, Any]], structured: Any
                 ) -> tuple[Any, tuple[ToolImage, ...]]:
    """What the model is given for a successful call, and the images to attach."""
    images: list[ToolImage] = []
    blocks = [_block(b, images) for b in content]
    if structured is not None and not _wraps_content(structured):
        return structured, tuple(images)
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return {"text": blocks[0]["text"]}, ()
    return {"content": blocks}, tuple(images)


def _wraps_content(structured: Any) -> bool:
    # The Python SDK mirrors a list of content blocks into {"result": [blocks]}.
    inner = structured.get("result") if isinstance(structured, dict) else None
    return (isinstance(inner, list) and len(structured) == 1 and
            all(isinstance(b, dict) and "type" in b for b in inner) and bool(inner))


def error_text(content: Sequence[Mapping[str, Any]]) -> str:
    """A failed call's text (the server's ``isError`` content)."""
    texts = [str(b.get("text", "")) for b in content if b.get("type") == "text"]
    return " ".join(t for t in texts if t) or "the tool reported an error"
