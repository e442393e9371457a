"""The spec's own words: leading proto comments of messages, fields, enums, services, RPCs.

protoc keeps comments in ``SourceCodeInfo`` when asked (``--include_source_info``);
each location's ``path`` names the element it belongs to (field numbers of
``FileDescriptorProto``: 4 message, 5 enum, 6 service; inside a message 2 field,
3 nested message, 4 nested enum; inside an enum 2 value; inside a service 2
method). The result maps full names (``palyra.v1.CreateRunRequest``,
``palyra.v1.CreateRunRequest.input``, ``palyra.v1.GatewayService.CreateRun``)
to the comment text, so the OpenAPI document describes operations and schemas
with the comments written in the proto files instead of Python reprs.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

_MESSAGE, _ENUM, _SERVICE = 4, 5, 6
_FIELD, _NESTED_MESSAGE, _NESTED_ENUM = 2, 3, 4
_ENUM_VALUE = 2
_METHOD = 2


def _clean(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines()]
    return "\n".join(lines).strip()


def comments(file: descriptor_pb2.FileDescriptorProto) -> dict[str, str]:
    """Full element name → its leading (else trailing) comment, for one file."""
    by_path = {
        tuple(loc.path): _clean(loc.leading_comments or loc.trailing_comments)
        for loc in file.source_code_info.location
        if loc.leading_comments or loc.trailing_comments
    }
    prefix = f"{file.package}." if file.package else ""
    out: dict[str, str] = {}

    def put(name: str, path: tuple[int, ...]) -> None:
        text = by_path.get(path)
        if text:
            out[name] = text

    def message(msg: descriptor_pb2.DescriptorProto, name: str, path: tuple[int, ...]) -> None:
        put(name, path)
        for i, field in enumerate(msg.field):
            put(f"{name}.{field.name}", (*path, _FIELD, i))
        for i, nested in enumerate(msg.nested_type):
            message(nested, f"{name}.{nested.name}", (*path, _NESTED_MESSAGE, i))
        for i, nested_enum in enumerate(msg.enum_type):
            enum(nested_enum, f"{name}.{nested_enum.name}", (*path, _NESTED_ENUM, i))

    def enum(en: descriptor_pb2.EnumDescriptorProto, name: str, path: tuple[int, ...]) -> None:
        put(name, path)
        for i, value in enumerate(en.value):
            put(f"{name}.{value.name}", (*path, _ENUM_VALUE, i))

    for i, msg in enumerate(file.message_type):
        message(msg, prefix + msg.name, (_MESSAGE, i))
    for i, en in enumerate(file.enum_type):
        enum(en, prefix + en.name, (_ENUM, i))
    for i, service in enumerate(file.service):
        put(prefix + service.name, (_SERVICE, i))
        for j, method in enumerate(service.method):
            put(f"{prefix}{service.name}.{method.name}", (_SERVICE, i, _METHOD, j))
    return out


def render(docs: dict[str, str]) -> str:
    """``palyra_gen/proto_docs.py``: the comments as one sorted, literal dict."""
    lines = [
        '"""Leading comments of the spec\'s protos, by full element name (for API docs)."""',
        "",
        "from typing import Final",
        "",
        "DOCS: Final[dict[str, str]] = {",
        *(f"    {name!r}: {text!r}," for name, text in sorted(docs.items())),
        "}",
        "",
    ]
    return "\n".join(lines)
