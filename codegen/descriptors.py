"""Read the protos through a protoc descriptor set into plain records.

protoc (not a hand-written parser) resolves imports and options, so the records
reflect exactly what the plugins see. Custom options are decoded through a
``DescriptorPool`` built from the same set: this registers ``google.api.http``
and ``palyra.v1.error_mapping`` without importing any generated ``_pb2`` module.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from codegen import proto_comments
from codegen.layout import SpecLayout
from codegen.protoc import run_protoc

HTTP_EXTENSION = "google.api.http"
ERROR_MAPPING_EXTENSION = "palyra.v1.error_mapping"
FIELD_RULE_EXTENSION = "palyra.v1.field_rule"
_HTTP_VERBS = ("get", "put", "post", "delete", "patch")


@dataclass(frozen=True)
class HttpBinding:
    """One ``google.api.http`` binding of an RPC."""

    http_method: str
    path: str
    body: str


@dataclass(frozen=True)
class Rpc:
    """One RPC with what the route table and checks need."""

    file: str
    service: str
    name: str
    request_type: str
    response_type: str
    client_streaming: bool
    server_streaming: bool
    bindings: tuple[HttpBinding, ...]
    request_fields: frozenset[str]


@dataclass(frozen=True)
class ErrorMappingOption:
    """The decoded ``(palyra.v1.error_mapping)`` option of one enum value."""

    grpc_status: int
    http_status: int
    retryable: bool


@dataclass(frozen=True)
class FieldRuleOption:
    """The decoded ``(palyra.v1.field_rule)`` option of one message field."""

    required: bool
    pattern: str
    minimum: float | None
    schema: str = ""
    hint: str = ""


@dataclass(frozen=True)
class EnumValue:
    """One enum value and its ``error_mapping`` option, if any."""

    name: str
    number: int
    error_mapping: ErrorMappingOption | None


@dataclass(frozen=True)
class ProtoEnum:
    """A top-level enum of one of palyra's own files."""

    file: str
    full_name: str
    values: tuple[EnumValue, ...]


@dataclass(frozen=True)
class ProtoSpec:
    """Everything codegen reads from the protos."""

    files: tuple[str, ...]
    rpcs: tuple[Rpc, ...]
    enums: dict[str, ProtoEnum]
    #: Full element name -> its proto comment (``codegen.proto_comments``).
    docs: dict[str, str]
    #: ``palyra.v1.Message.field`` -> its ``(field_rule)`` option.
    field_rules: dict[str, FieldRuleOption]


def build_descriptor_set(layout: SpecLayout, dest: Path) -> Path:
    """Compile palyra's protos (with imports) into a ``FileDescriptorSet`` at ``dest``."""
    run_protoc(
        layout,
        ["--include_imports", "--include_source_info", f"--descriptor_set_out={dest}",
         *layout.palyra_protos()],
        what="building the descriptor set",
        cwd=dest.parent,
    )
    return dest


def load_proto_spec(layout: SpecLayout) -> ProtoSpec:
    """Compile the spec's protos and extract RPCs, enums and their options."""
    with tempfile.TemporaryDirectory(prefix="palyra-ds-") as tmp:
        raw = build_descriptor_set(layout, Path(tmp) / "descriptors.binpb").read_bytes()
    fds = descriptor_pb2.FileDescriptorSet.FromString(raw)
    return _extract(fds, own_files=set(layout.palyra_protos()))


def _extract(fds: descriptor_pb2.FileDescriptorSet, own_files: set[str]) -> ProtoSpec:
    pool = descriptor_pool.DescriptorPool()
    for file in fds.file:
        pool.Add(file)
    options = _OptionReader(pool)
    rpcs: list[Rpc] = []
    enums: dict[str, ProtoEnum] = {}
    docs: dict[str, str] = {}
    rules: dict[str, FieldRuleOption] = {}
    for file in fds.file:
        if file.name not in own_files:
            continue
        docs.update(proto_comments.comments(file))
        prefix = f"{file.package}." if file.package else ""
        for message in file.message_type:
            for field in message.field:
                rule = options.field_rule(field.options)
                if rule is not None:
                    rules[f"{prefix}{message.name}.{field.name}"] = rule
        for enum in file.enum_type:
            values = tuple(
                EnumValue(v.name, v.number, options.error_mapping(v.options)) for v in enum.value
            )
            enums[prefix + enum.name] = ProtoEnum(file.name, prefix + enum.name, values)
        for service in file.service:
            for method in service.method:
                request = method.input_type.lstrip(".")
                rpcs.append(
                    Rpc(
                        file=file.name,
                        service=prefix + service.name,
                        name=method.name,
                        request_type=request,
                        response_type=method.output_type.lstrip("."),
                        client_streaming=method.client_streaming,
                        server_streaming=method.server_streaming,
                        bindings=options.http_bindings(method.options),
                        request_fields=frozenset(
                            f.name for f in pool.FindMessageTypeByName(request).fields
                        ),
                    )
                )
    return ProtoSpec(tuple(sorted(own_files)), tuple(rpcs), enums, docs, rules)


class _OptionReader:
    """Decodes custom options by re-parsing option bytes with pool-aware classes."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool
        self._http = _find_extension(pool, HTTP_EXTENSION)
        self._error_mapping = _find_extension(pool, ERROR_MAPPING_EXTENSION)
        self._field_rule = _find_extension(pool, FIELD_RULE_EXTENSION)

    def _reparse(self, options: Message) -> Message:
        # The options came out of descriptor_pb2 with the extensions as unknown
        # fields; the same bytes parsed by this pool's class expose them.
        cls = message_factory.GetMessageClass(
            self._pool.FindMessageTypeByName(options.DESCRIPTOR.full_name)
        )
        return cls.FromString(options.SerializeToString())

    def error_mapping(self, options: Message) -> ErrorMappingOption | None:
        """The ``error_mapping`` option of an enum value, or None if absent."""
        if self._error_mapping is None:
            return None
        parsed = self._reparse(options)
        if not parsed.HasExtension(self._error_mapping):  # type: ignore[attr-defined]
            return None
        value = parsed.Extensions[self._error_mapping]  # type: ignore[attr-defined]
        return ErrorMappingOption(value.grpc_status, value.http_status, value.retryable)

    def field_rule(self, options: Message) -> FieldRuleOption | None:
        """The ``field_rule`` option of a message field, or None if absent."""
        if self._field_rule is None:
            return None
        parsed = self._reparse(options)
        if not parsed.HasExtension(self._field_rule):  # type: ignore[attr-defined]
            return None
        value = parsed.Extensions[self._field_rule]  # type: ignore[attr-defined]
        return FieldRuleOption(value.required, value.pattern,
                               value.minimum if value.has_minimum else None, value.schema,
                               value.hint)

    def http_bindings(self, options: Message) -> tuple[HttpBinding, ...]:
        """Every ``google.api.http`` binding of a method (main rule first)."""
        if self._http is None:
            return ()
        parsed = self._reparse(options)
        if not parsed.HasExtension(self._http):  # type: ignore[attr-defined]
            return ()
        rule = parsed.Extensions[self._http]  # type: ignore[attr-defined]
        rules = [rule, *rule.additional_bindings]
        return tuple(b for b in (_binding(r) for r in rules) if b is not None)


def _binding(rule: Message) -> HttpBinding | None:
    pattern = rule.WhichOneof("pattern")
    if pattern is None:
        return None
    if pattern == "custom":
        return HttpBinding(rule.custom.kind.upper(), rule.custom.path, rule.body)  # type: ignore[attr-defined]
    assert pattern in _HTTP_VERBS, pattern
    return HttpBinding(pattern.upper(), getattr(rule, pattern), rule.body)  # type: ignore[attr-defined]


def _find_extension(pool: descriptor_pool.DescriptorPool, name: str) -> object | None:
    try:
        return pool.FindExtensionByName(name)
    except KeyError:
        # A spec without options.proto / google/api simply has no such options;
        # the checks then report every element that needed one.
        return None
