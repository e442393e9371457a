"""JSON Schemas of proto messages, as strict as the gateway's own decoder (``_json``).

Each rule here mirrors one rule of ``normalize_message``: integers within their
proto range (and as decimal strings short enough to always be in range),
64-bit integers as numbers or strings, enums by full name, short name or
number, bytes as padded base64, ``null`` for "the default", at most one member
of a oneof, no unknown fields. Where the server accepts a little more than can
be said in a schema (surrounding spaces in a number string, any letter case in
an enum name), the schema states the canonical subset, so every document-valid
request is one the server accepts. The spec's ``(palyra.v1.field_rule)`` options
(``palyra_gen.field_rules``) add what a field must hold beyond its type: a
required field is listed in ``required`` and is never ``null`` or empty; a rule's
``schema`` is added to the field's own (``allOf``; annotations such as
``readOnly`` beside it).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import betterproto2
from palyra_gen.field_rules import RULES, FieldRule
from palyra_gen.message_pool import default_message_pool
from palyra_gen.proto_docs import DOCS

from palyra.transport.http._json import camel, proto_meta


def digits_at_most(limit: int) -> str:
    """A regex (no anchors) for the decimal strings, leading zeros allowed, of at most
    ``limit``'s length whose value is at most ``limit``."""
    text = str(limit)
    alternatives = [f"[0-9]{{1,{len(text) - 1}}}"] if len(text) > 1 else []
    for i, digit in enumerate(text):
        if digit != "0":
            rest = len(text) - 1 - i
            alternatives.append(text[:i] + f"[0-{int(digit) - 1}]"
                                + (f"[0-9]{{{rest}}}" if rest else ""))
    return "(?:" + "|".join([*alternatives, text]) + ")"


# 64-bit numbers travel as strings, and every value of the type is written (the server
# echoes what it stored, e.g. an expiry of 2**63 - 1), so their patterns are exact.
_INT64 = f"^(?:{digits_at_most(2**63 - 1)}|-{digits_at_most(2**63)})$"
_UINT64 = f"^{digits_at_most(2**64 - 1)}$"
_RANGES: dict[str, tuple[int, int, str]] = {
    "int32": (-(2**31), 2**31 - 1, "^-?[0-9]{1,9}$"),
    "sint32": (-(2**31), 2**31 - 1, "^-?[0-9]{1,9}$"),
    "sfixed32": (-(2**31), 2**31 - 1, "^-?[0-9]{1,9}$"),
    "uint32": (0, 2**32 - 1, "^[0-9]{1,9}$"),
    "fixed32": (0, 2**32 - 1, "^[0-9]{1,9}$"),
    "int64": (-(2**63), 2**63 - 1, _INT64),
    "sint64": (-(2**63), 2**63 - 1, _INT64),
    "sfixed64": (-(2**63), 2**63 - 1, _INT64),
    "uint64": (0, 2**64 - 1, _UINT64),
    "fixed64": (0, 2**64 - 1, _UINT64),
}
_BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# Every request's protocol version field: 0 (unset) or 1 (``SUPPORTED_VERSIONS``).
_VERSION_FIELD = "v"
_VERSIONS = [0, 1]


def full_name(cls: type[Any]) -> str:
    """``palyra.v1.CreateRunRequest`` for a generated message or enum class."""
    url = default_message_pool.type_to_url.get(cls)
    if url:
        return str(url).rsplit("/", 1)[-1]
    return f"palyra.v1.{cls.__name__}"


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str) and set(schema) <= {"type", "format", "minimum", "maximum",
                                                 "pattern", "enum", "contentEncoding",
                                                 "items", "additionalProperties",
                                                 "propertyNames"}:
        out = {**schema, "type": [kind, "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [schema, {"type": "null"}]}


class SchemaBuilder:
    """Builds ``components.schemas`` on demand; one component per message or enum."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, cls: type[Any]) -> dict[str, Any]:
        """A ``$ref`` to the component of ``cls`` (built on first use)."""
        name = cls.__name__
        if name not in self.components:
            self.components[name] = {}  # a placeholder breaks recursion
            self.components[name] = self._build(cls)
        return {"$ref": f"#/components/schemas/{name}"}

    def body(self, cls: type[betterproto2.Message], path_params: tuple[str, ...]) -> dict[str, Any]:
        """The request body of a route: the message without the fields its path carries."""
        if not path_params:
            return self.ref(cls)
        schema = self._message(cls, skip=frozenset(path_params))
        schema["description"] = (schema.get("description", "") + " The fields in the path ("
                                 + ", ".join(path_params) + ") are not repeated here.").strip()
        return schema

    def query_field(self, cls: type[Any], name: str, fm: Any) -> dict[str, Any]:
        """The schema of one query parameter (its value as the server parses it)."""
        item_cls = proto_meta(cls).cls_by_field.get(name)
        if fm.proto_type == "enum":
            single: dict[str, Any] = {"type": "string", "enum": _enum_names(item_cls)}
        elif fm.proto_type == "bool":
            # The server reads a bare flag (``?include_archived`` or ``=``) as true.
            single = {"anyOf": [{"type": "boolean"}, {"type": "string", "enum": [
                "true", "false", "1", "0", ""]}]}
        elif fm.proto_type in _RANGES:
            low, high, _ = _RANGES[fm.proto_type]
            single = {"type": "integer", "minimum": low, "maximum": high}
        else:
            single = self._scalar(fm.proto_type, item_cls, name)
        rule = RULES.get(f"{full_name(cls)}.{name}")
        if rule is not None:  # a query parameter keeps its field's rule
            single = _ruled(single, fm, rule, item_cls)
            if rule.schema:
                single = _with_extra(single, json.loads(rule.schema))
        return {"type": "array", "items": single} if fm.repeated else single

    # -- building ----------------------------------------------------------
    def _build(self, cls: type[Any]) -> dict[str, Any]:
        if issubclass(cls, betterproto2.Enum):
            return {**_enum_schema(cls), "description": DOCS.get(full_name(cls),
                                                                 f"`{full_name(cls)}`")}
        return self._message(cls)

    def _message(self, cls: type[Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        meta = proto_meta(cls)
        owner = full_name(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        groups: dict[str, list[str]] = {}
        for name, fm in meta.meta_by_field_name.items():
            if name in skip:
                continue
            rule = RULES.get(f"{owner}.{name}")
            schema = self._field(cls, name, fm)
            if rule is not None:
                schema = _ruled(schema, fm, rule, meta.cls_by_field.get(name))
            if rule is None or not rule.required:
                schema = _nullable(schema)
            else:
                required.append(camel(name))
            if rule is not None and rule.schema:
                schema = _with_extra(schema, json.loads(rule.schema))
            if doc := DOCS.get(f"{owner}.{name}"):
                schema = {**schema, "description": doc}
            props[camel(name)] = schema
            if fm.group:
                groups.setdefault(fm.group, []).append(camel(name))
        out: dict[str, Any] = {"type": "object", "properties": props,
                               "additionalProperties": False,
                               "description": DOCS.get(owner, f"`{owner}`")}
        if required:
            out["required"] = required
        exclusive = [{"required": list(pair)}
                     for members in groups.values() for pair in itertools.combinations(members, 2)]
        if exclusive:  # a oneof: at most one member may be given
            out["not"] = {"anyOf": exclusive}
        return out

    def _field(self, cls: type[Any], name: str, fm: Any) -> dict[str, Any]:
        item_cls = proto_meta(cls).cls_by_field.get(name)
        if fm.proto_type == "map":
            key_meta, value_meta = fm.map_meta
            value_cls = proto_meta(cls).cls_by_field.get(f"{name}.value")
            out: dict[str, Any] = {"type": "object",
                                   "additionalProperties": self._single(value_meta.proto_type,
                                                                        value_cls, name)}
            if key_meta.proto_type in _RANGES:
                out["propertyNames"] = {"pattern": _RANGES[key_meta.proto_type][2]}
            return out
        single = self._single(fm.proto_type, item_cls, name)
        return {"type": "array", "items": single} if fm.repeated else single

    def _single(self, proto_type: str, cls: Any, name: str) -> dict[str, Any]:
        if proto_type == "message":
            return self.ref(cls)
        return self._scalar(proto_type, cls, name)

    def _scalar(self, proto_type: str, cls: Any, name: str) -> dict[str, Any]:
        if proto_type == "string":
            return {"type": "string"}
        if proto_type == "bool":
            return {"type": "boolean"}
        if proto_type == "enum":
            return self.ref(cls)
        if proto_type in _RANGES:
            if name == _VERSION_FIELD:
                return {"type": "integer", "enum": _VERSIONS,
                        "description": "Protocol version: 0 (unset) or 1."}
            low, high, pattern = _RANGES[proto_type]
            return {"anyOf": [{"type": "integer", "minimum": low, "maximum": high},
                              {"type": "string", "pattern": pattern}],
                    "format": proto_type}
        if proto_type in ("float", "double"):
            return {"anyOf": [{"type": "number"},
                              {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}],
                    "format": proto_type}
        if proto_type == "bytes":
            return {"type": "string", "contentEncoding": "base64", "pattern": _BASE64}
        raise ValueError(f"unsupported proto type {proto_type}")


# Keywords that say something about a value without constraining it.
_ANNOTATIONS = frozenset({"readOnly", "writeOnly", "deprecated"})


def body_required(cls: type[Any], path_params: tuple[str, ...]) -> bool:
    """Whether a request body must be sent: some field it carries is required."""
    owner = full_name(cls)
    return any(rule.required for name in proto_meta(cls).meta_by_field_name
               if name not in path_params and (rule := RULES.get(f"{owner}.{name}")))


def _with_extra(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``schema`` and a rule's own JSON Schema: annotations beside it, the rest in ``allOf``."""
    if set(extra) <= _ANNOTATIONS:
        return {**schema, **extra}
    return {"allOf": [schema, extra]}


def _ruled(schema: dict[str, Any], fm: Any, rule: FieldRule, item_cls: Any) -> dict[str, Any]:
    """``schema`` narrowed by the field's rule (the handlers refuse the rest)."""
    out = dict(schema)
    if fm.repeated and rule.required:
        return {**out, "minItems": 1}
    if fm.proto_type == "string":
        if rule.required:
            out["minLength"] = 1
        if rule.pattern:
            out["pattern"] = rule.pattern
    elif fm.proto_type in ("float", "double") and rule.minimum is not None:
        # Finite and at least the minimum: no NaN/Infinity strings.
        out = {"type": "number", "minimum": rule.minimum, "format": fm.proto_type}
    elif fm.proto_type == "enum" and rule.required:
        # Set means not the zero value (``*_UNSPECIFIED``).
        zero = [m for m in item_cls if m.value == 0]
        out = {"allOf": [out, {"not": {"enum": [0, *(str(m.proto_name) for m in zero),
                                                 *(m.name for m in zero)]}}]}
    return out


def _enum_names(cls: Any) -> list[str]:
    members = list(cls)
    return [*(str(m.proto_name) for m in members), *(m.name for m in members)]


def _enum_schema(cls: Any) -> dict[str, Any]:
    return {"anyOf": [{"type": "string", "enum": _enum_names(cls)},
                      {"type": "integer", "enum": [m.value for m in cls]}]}
