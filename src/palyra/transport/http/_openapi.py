"""The OpenAPI 3.1 document of the HTTP gateway, derived from the route table.

Schemas come from the generated message metadata (field names in proto3-JSON
lowerCamelCase, 64-bit integers as integer-or-string), so the document can
only describe what the gateway actually decodes and encodes.
"""

from __future__ import annotations

from typing import Any

import betterproto2

from palyra.transport.auth import CHANNEL_HEADER, DEVICE_HEADER, PRINCIPAL_HEADER, PUBLIC_RPCS
from palyra.transport.http._json import camel, proto_meta
from palyra.transport.http._routes import CompiledRoute, RouteTable

_INT32 = {"int32", "sint32", "sfixed32", "uint32", "fixed32"}
_INT64 = {"int64", "sint64", "sfixed64", "uint64", "fixed64"}


class _Schemas:
    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, cls: type[Any]) -> dict[str, Any]:
        name = cls.__name__
        if name not in self.components:
            self.components[name] = {}  # placeholder breaks recursion
            self.components[name] = self._build(cls)
        return {"$ref": f"#/components/schemas/{name}"}

    def _build(self, cls: type[Any]) -> dict[str, Any]:
        if issubclass(cls, betterproto2.Enum):
            return {"type": "string", "enum": [m.proto_name for m in cls]}
        meta = proto_meta(cls)
        props: dict[str, Any] = {}
        for name, fm in meta.meta_by_field_name.items():
            props[camel(name)] = self._field(meta, name, fm)
        schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        if cls.__doc__ and cls.__doc__.strip():
            schema["description"] = cls.__doc__.strip()
        return schema

    def _field(self, meta: Any, name: str, fm: Any) -> dict[str, Any]:
        if fm.proto_type == "map":
            value = self._single(fm.map_meta[1].proto_type, meta.cls_by_field.get(f"{name}.value"))
            return {"type": "object", "additionalProperties": value}
        single = self._single(fm.proto_type, meta.cls_by_field.get(name))
        return {"type": "array", "items": single} if fm.repeated else single

    def _single(self, proto_type: str, cls: Any) -> dict[str, Any]:
        if proto_type in ("message", "enum"):
            return self.ref(cls)
        if proto_type == "string":
            return {"type": "string"}
        if proto_type == "bool":
            return {"type": "boolean"}
        if proto_type in _INT32:
            return {"type": "integer", "format": proto_type}
        if proto_type in _INT64:
            return {"type": ["integer", "string"], "format": proto_type}
        if proto_type in ("float", "double"):
            return {"type": "number", "format": proto_type}
        if proto_type == "bytes":
            return {"type": "string", "contentEncoding": "base64"}
        return {}


def _operation(route: CompiledRoute, schemas: _Schemas) -> dict[str, Any]:
    params: list[dict[str, Any]] = []
    meta = proto_meta(route.request_cls)
    for name in route.path_params:
        params.append({"name": name, "in": "path", "required": True, "schema": {"type": "string"}})
    if not route.has_body:
        for name, fm in meta.meta_by_field_name.items():
            if name in route.path_params or fm.proto_type in ("message", "map"):
                continue
            schema = schemas._field(meta, name, fm)
            params.append({"name": name, "in": "query", "required": False, "schema": schema})
    if route.server_streaming and "after_seq" in meta.meta_by_field_name:
        params.append({"name": "Last-Event-ID", "in": "header", "required": False,
                       "schema": {"type": "string"},
                       "description": "Resume after this tape_seq (wins over after_seq)."})
    op: dict[str, Any] = {
        "operationId": f"{route.service.rsplit('.', 1)[-1]}_{route.rpc}",
        "tags": [route.service.rsplit(".", 1)[-1]],
        "parameters": [*params, *_identity_params()],
        "responses": {
            "200": _success(route, schemas),
            "default": {"description": "Error",
                        "content": {"application/json": {"schema": _error_schema()}}},
        },
    }
    if route.has_body:
        op["requestBody"] = {"required": False,
                             "content": {"application/json": {"schema": schemas.ref(route.request_cls)}}}
    if route.rpc in PUBLIC_RPCS:
        op["security"] = []
    return op


def _success(route: CompiledRoute, schemas: _Schemas) -> dict[str, Any]:
    if route.server_streaming:
        return {"description": "Server-sent events; each `data:` is one response message "
                               "(tape events carry `id: <tape_seq>`).",
                "content": {"text/event-stream": {"schema": schemas.ref(route.response_cls)}}}
    return {"description": "OK", "content": {"application/json": {"schema": schemas.ref(route.response_cls)}}}


def _identity_params() -> list[dict[str, Any]]:
    return [
        {"$ref": "#/components/parameters/Principal"},
        {"$ref": "#/components/parameters/DeviceId"},
        {"$ref": "#/components/parameters/Channel"},
    ]


def _error_schema() -> dict[str, Any]:
    return {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string", "description": "Stable error code, e.g. NOT_FOUND"},
        "message": {"type": "string"},
        "retryable": {"type": "boolean"},
        "details": {"type": "object", "additionalProperties": {"type": "string"}},
    }}


def build_openapi(table: RouteTable) -> dict[str, Any]:
    """The OpenAPI 3.1 document for every route in ``table``."""
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for route in sorted(table.routes, key=lambda r: (r.template, r.http_method)):
        paths.setdefault(route.template, {})[route.http_method.lower()] = _operation(route, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "palyra", "version": "1",
                 "description": "HTTP/JSON + SSE gateway; generated from the protobuf spec."},
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "parameters": {
                "Principal": {"name": PRINCIPAL_HEADER, "in": "header", "required": False,
                              "schema": {"type": "string"},
                              "description": "Caller principal, e.g. user:alice (required with a token)."},
                "DeviceId": {"name": DEVICE_HEADER, "in": "header", "required": False,
                             "schema": {"type": "string"},
                             "description": "Caller device id, a ULID (required with a token)."},
                "Channel": {"name": CHANNEL_HEADER, "in": "header", "required": False,
                            "schema": {"type": "string"}},
            },
        },
    }
