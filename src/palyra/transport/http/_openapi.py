"""The OpenAPI 3.2 document of the HTTP gateway, derived from the route table.

It says exactly what the gateway accepts (``_json`` and ``_decode`` are the
server's rules; ``_openapi_schema`` mirrors them field by field) and describes
every operation and schema with the spec's own proto comments
(``palyra_gen.proto_docs``). Server streams are documented as what they are:
a stream of SSE events whose ``data`` is one response message.
"""

from __future__ import annotations

from typing import Any

from palyra_gen.proto_docs import DOCS

from palyra.transport.auth import CHANNEL_HEADER, DEVICE_HEADER, PRINCIPAL_HEADER, PUBLIC_RPCS
from palyra.transport.http._json import camel, proto_meta
from palyra.transport.http._openapi_schema import SchemaBuilder, body_required, full_name
from palyra.transport.http._routes import CompiledRoute, RouteTable

OPENAPI_VERSION = "3.2.0"
# The exclusive tape cursor over SSE: a tape_seq, a signed 64-bit number; an empty
# header is no cursor (the server reads ``after_seq`` then).
_LAST_EVENT_ID = {"type": "string", "pattern": "^([0-9]{1,18})?$"}
# Request fields that are cursors into the tape: retention may have pruned what
# they point at (410 CURSOR_TRUNCATED, with the earliest cursor still served).
_CURSOR_FIELDS = frozenset({"after_seq", "compaction_seq"})


def _service(route: CompiledRoute) -> str:
    return route.service.rsplit(".", 1)[-1]


def _parameters(route: CompiledRoute, schemas: SchemaBuilder) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    meta = proto_meta(route.request_cls)
    request_name = full_name(route.request_cls)
    for name in route.path_params:
        params.append({"name": name, "in": "path", "required": True,
                       "schema": {"type": "string", "minLength": 1},
                       "description": DOCS.get(f"{request_name}.{name}", name)})
    if not route.has_body:
        for name, fm in meta.meta_by_field_name.items():
            if name in route.path_params or fm.proto_type in ("message", "map"):
                continue
            param: dict[str, Any] = {"name": name, "in": "query", "required": False,
                                     "schema": schemas.query_field(route.request_cls, name, fm)}
            if fm.repeated:
                param.update(style="form", explode=True)
            if doc := DOCS.get(f"{request_name}.{name}"):
                param["description"] = doc
            params.append(param)
    if route.server_streaming and "after_seq" in meta.meta_by_field_name:
        params.append({"name": "Last-Event-ID", "in": "header", "required": False,
                       "schema": _LAST_EVENT_ID,
                       "description": "Resume after this tape_seq (wins over after_seq)."})
    return params


def _operation(route: CompiledRoute, schemas: SchemaBuilder) -> dict[str, Any]:
    rpc_doc = DOCS.get(f"{route.service}.{route.rpc}", "")
    op: dict[str, Any] = {
        "operationId": f"{_service(route)}_{route.rpc}",
        "tags": [_service(route)],
        "summary": (rpc_doc.splitlines()[0] if rpc_doc else f"{_service(route)}.{route.rpc}"),
        "parameters": [*_parameters(route, schemas), *_identity_params()],
        "responses": {
            "200": _success(route, schemas),
            "default": {"description": "Error: an `ErrorDetail` with the status the spec maps "
                                       "its code to.",
                        "content": {"application/json": {"schema": _error_schema()}}},
        },
    }
    if _CURSOR_FIELDS & set(proto_meta(route.request_cls).meta_by_field_name):
        op["responses"]["410"] = {
            "description": "`CURSOR_TRUNCATED`: retention pruned what the cursor points at; "
                           "`details.earliest_cursor` is the first one still served.",
            "content": {"application/json": {"schema": _error_schema()}}}
    if rpc_doc:
        op["description"] = rpc_doc
    if route.has_body:
        # A body holding a required field must be sent (an absent body is all defaults).
        op["requestBody"] = {"required": body_required(route.request_cls, route.path_params),
                             "content": {"application/json": {
            "schema": schemas.body(route.request_cls, route.path_params)}}}
    if route.rpc in PUBLIC_RPCS:
        op["security"] = []
    return op


def _success(route: CompiledRoute, schemas: SchemaBuilder) -> dict[str, Any]:
    message = schemas.ref(route.response_cls)
    if route.server_streaming:
        return {
            "description": "Server-sent events: each event's `data` is one response message "
                           "(tape events carry `id: <tape_seq>`, usable as `Last-Event-ID`).",
            "content": {"text/event-stream": {"itemSchema": {
                "type": "object",
                "required": ["data"],
                "properties": {
                    "data": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": message},
                    "id": {"type": "string"},
                    "event": {"type": "string"},
                    "retry": {"type": "integer", "minimum": 0},
                },
            }}},
        }
    return {"description": "OK", "content": {"application/json": {"schema": message}}}


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


def _id_pointers(cls: type[Any], prefix: str = "", depth: int = 2) -> dict[str, str]:
    """``*_id`` string fields of a message (and of its message fields, one level down)
    → their JSON pointer in the proto3 JSON body, nearest first."""
    meta = proto_meta(cls)
    found: dict[str, str] = {}
    nested: list[tuple[str, type[Any]]] = []
    for name, fm in meta.meta_by_field_name.items():
        if fm.repeated or fm.proto_type == "map":
            continue
        if fm.proto_type == "string" and name.endswith("_id"):
            found.setdefault(name, f"{prefix}/{camel(name)}")
        elif fm.proto_type == "message" and depth > 1:
            nested.append((name, meta.cls_by_field[name]))
    for name, inner in nested:
        for key, pointer in _id_pointers(inner, f"{prefix}/{camel(name)}", depth - 1).items():
            found.setdefault(key, pointer)
    return found


def _links(routes: list[CompiledRoute]) -> dict[CompiledRoute, dict[str, Any]]:
    """OpenAPI links: an answer carrying the ids a route's path needs leads to that route
    (``POST /v1/runs`` → ``GET /v1/runs/{run_id}``), for stateful clients and fuzzers."""
    targets = [r for r in routes if r.path_params]
    out: dict[CompiledRoute, dict[str, Any]] = {}
    for source in routes:
        if source.server_streaming:
            continue
        ids = _id_pointers(source.response_cls)
        links: dict[str, Any] = {}
        for target in targets:
            if target is source or not all(p in ids for p in target.path_params):
                continue
            links[f"{_service(target)}_{target.rpc}"] = {
                "operationId": f"{_service(target)}_{target.rpc}",
                "parameters": {p: f"$response.body#{ids[p]}" for p in target.path_params}}
        if links:
            out[source] = links
    return out


def build_openapi(table: RouteTable) -> dict[str, Any]:
    """The OpenAPI 3.2 document for every route in ``table``."""
    schemas = SchemaBuilder()
    paths: dict[str, dict[str, Any]] = {}
    routes = sorted(table.routes, key=lambda r: (r.template, r.http_method))
    links = _links(routes)
    for route in routes:
        op = _operation(route, schemas)
        if route in links:
            op["responses"]["200"]["links"] = links[route]
        paths.setdefault(route.template, {})[route.http_method.lower()] = op
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "palyra", "version": "1",
                 "description": "HTTP/JSON + SSE gateway; generated from the protobuf spec. "
                                "Bodies are proto3 JSON (lowerCamelCase names)."},
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "parameters": {
                "Principal": {"name": PRINCIPAL_HEADER, "in": "header", "required": False,
                              "schema": {"type": "string"},
                              "description": "Caller principal, e.g. user:alice "
                                             "(required with a token)."},
                "DeviceId": {"name": DEVICE_HEADER, "in": "header", "required": False,
                             "schema": {"type": "string"},
                             "description": "Caller device id, a ULID (required with a token)."},
                "Channel": {"name": CHANNEL_HEADER, "in": "header", "required": False,
                            "schema": {"type": "string"}},
            },
        },
    }
