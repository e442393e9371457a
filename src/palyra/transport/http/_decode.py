"""Build a request message from an HTTP request: path + query, or path + JSON body."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import betterproto2

from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.core.protojson import decode_message
from palyra.transport.field_rules import check_request
from palyra.transport.http._json import bad_request, field_names, normalize_message, proto_meta
from palyra.transport.http._routes import CompiledRoute

# Exclusive tape cursors: over HTTP an absent cursor means "from the start"
# (-1), because proto3's implicit 0 would silently skip tape_seq 0.
CURSOR_FIELD = "after_seq"
_MAX_TAPE_SEQ = 2**63 - 1
LAST_EVENT_ID = "last-event-id"
_SCALAR_QUERY_TYPES = frozenset(
    {"string", "bool", "enum", "bytes", "float", "double", "int32", "sint32", "sfixed32",
     "uint32", "fixed32", "int64", "sint64", "sfixed64", "uint64", "fixed64"}
)


def decode_request(
    route: CompiledRoute,
    path_params: Mapping[str, str],
    query: Iterable[tuple[str, str]],
    body: bytes,
    headers: Mapping[str, str],
) -> betterproto2.Message:
    """The request message for ``route``.

    Raises:
        PalyraError: ``MALFORMED_REQUEST`` for bad JSON, unknown/ill-typed fields
            or query parameters; ``INVALID_ARGUMENT`` when the body contradicts
            a path parameter or a field breaks its spec rule
            (:func:`palyra.transport.field_rules.check_request`).
    """
    cls = route.request_cls
    if route.has_body:
        data = _json_body(body)
        if list(query):
            raise bad_request("query", "this endpoint takes its fields in the JSON body")
    else:
        if body.strip():
            raise bad_request("body", f"{route.http_method} {route.template} takes no body")
        data = _query_object(cls, query)
    fields = normalize_message(cls, data)
    for name, value in path_params.items():
        if name in fields and fields[name] != value:
            raise InvalidArgument(f"{name} in the body ({fields[name]!r}) contradicts the path")
        fields[name] = normalize_message(cls, {name: value})[name]
    _default_cursor(route, fields, headers)
    try:
        message = decode_message(cls, fields)  # == cls.from_dict(fields), without its regex work
    except (KeyError, ValueError, TypeError) as exc:  # should be unreachable after normalising
        raise bad_request("body", str(exc)) from None
    check_request(message)  # the spec's field rules, as the gRPC codec checks them
    return message


def _json_body(body: bytes) -> Any:
    """The body's JSON value, refusing what two parsers could read differently.

    Strict UTF-8 (and no lone surrogate spelt as an escape), no duplicate object keys
    (``{"complete":true,"complete":false}`` means different things to different
    parsers), no NaN/Infinity literals,
    and nesting bounded by the parser's recursion: each is a clear
    MALFORMED_REQUEST, never an INTERNAL.
    """
    if not body.strip():
        return {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(f"body is not valid UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _DuplicateKey as exc:
        raise _malformed(f"body has the key {exc.key!r} twice in one object") from None
    except RecursionError:
        raise _malformed("body is nested too deeply") from None
    except ValueError as exc:
        raise _malformed(f"body is not valid JSON: {exc}") from None
    if "\\u" in text:  # only a \u escape can spell a lone surrogate in valid UTF-8
        _refuse_surrogates(value)
    return value


def _refuse_surrogates(value: Any) -> None:
    """Refuse a string (or key) holding a lone UTF-16 surrogate (``"\\ud800"``).

    JSON lets an escape spell one; Python keeps it in a ``str`` that no UTF-8 encoder
    (the journal's, the error body's) accepts, so it must stop here, as bad input.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not _utf8_clean(item):
            raise _malformed("body holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape "
                             "not part of a pair): it is not Unicode text")


def _utf8_clean(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _malformed(message: str) -> PalyraError:
    return PalyraError(message, code=ErrorCode.MALFORMED_REQUEST)


def _query_object(cls: type[betterproto2.Message], query: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Query parameters → a JSON-shaped object (strings typed by the field they name)."""
    names = field_names(cls)
    meta = proto_meta(cls).meta_by_field_name
    out: dict[str, Any] = {}
    for key, raw in query:
        name = names.get(key)
        if name is None:
            raise bad_request(key, "unknown query parameter")
        fm = meta[name]
        if fm.proto_type not in _SCALAR_QUERY_TYPES:
            raise bad_request(key, "this field cannot be given as a query parameter")
        value: Any = raw
        if fm.proto_type == "bool":
            lowered = raw.strip().lower()
            if lowered not in ("true", "false", "1", "0", ""):
                raise bad_request(key, "expected true or false")
            value = lowered in ("true", "1", "")
        if fm.repeated:
            out.setdefault(key, []).append(value)
        elif key in out:
            raise bad_request(key, "query parameter given twice")
        else:
            out[key] = value
    return out


def _default_cursor(route: CompiledRoute, fields: dict[str, Any], headers: Mapping[str, str]) -> None:
    meta = proto_meta(route.request_cls).meta_by_field_name.get(CURSOR_FIELD)
    if meta is None or meta.proto_type != "int64":
        return
    last_event_id = headers.get(LAST_EVENT_ID, "").strip()
    if route.server_streaming and last_event_id:
        # An EventSource reconnects with its original URL plus Last-Event-ID,
        # so the header is the fresher cursor and wins over ?after_seq=.
        # The same range as ?after_seq= (int64), digits only: an id the server
        # never sent must be refused, not read as "nothing after it".
        if not (last_event_id.isascii() and last_event_id.isdigit()
                and int(last_event_id) <= _MAX_TAPE_SEQ):
            raise bad_request("Last-Event-ID", f"expected a tape_seq (0..{_MAX_TAPE_SEQ})")
        fields[CURSOR_FIELD] = int(last_event_id)
    else:
        fields.setdefault(CURSOR_FIELD, -1)
