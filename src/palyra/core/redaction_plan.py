"""The secret screen of a typed payload: only the fields that can carry free text. Pure.

An engine event's payload is the proto3 JSON of a spec message (``core.protojson``),
so what each of its keys can hold is known before the payload exists: numbers,
booleans, enums (names from the spec) and 64-bit integers (decimal digits in JSON)
cannot match a secret pattern, and every key is a field name the spec fixed. Only
string and bytes fields, map values (their keys are data) and nested messages
(walked whole) can carry a secret. :func:`plan_of` works that out once per
message class from its generated field metadata; :func:`is_clean_typed` then
screens a payload by its plan, which touches each free-text value and nothing
else, instead of ``is_clean``'s walk over every key and value.

Every string field is free text here, ids and hashes included: a field's values
are screened unless its type cannot hold text, and a field of a type this module
does not know is walked whole. A class with a field whose name is a secret key
(``redact`` hides any value under it), or a payload holding a key its plan lacks,
is screened by the full walk (``is_clean``), as every untyped payload is.
"""

from __future__ import annotations

import re
from typing import Any

from palyra_gen.proto_json import JSON_TABLES

from palyra.core.redaction import (
    _SETTLED_TEXT,
    _screen_plain,
    _screen_text,
    _Unscreened,
    is_clean,
    is_secret_key,
)

SKIP = 0
"""A field whose values cannot hold text (numbers, booleans, enums, 64-bit integers)."""
TEXT = 1
"""A string (or bytes) field: its value is screened."""
ANY = 2
"""A field screened by the full walk (repeated strings, maps, nested messages)."""

Plan = tuple[frozenset[str], tuple[tuple[str, int], ...]]
"""``(every JSON key of the message, its screened fields)``: each screened field as
``(key, TEXT or ANY)`` (``SKIP`` fields are left out)."""

# Scalar proto types whose proto3 JSON is a number, a boolean, an enum name from
# the spec, or a decimal string (64-bit integers): none can carry a secret.
_INERT = frozenset({
    "bool", "enum", "double", "float", "int32", "int64", "uint32", "uint64",
    "sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64",
})
_TEXTUAL = frozenset({"string", "bytes"})
_CAMEL = re.compile(r"_([a-z0-9])")

# Message class -> its plan (None: screened by the full walk). The classes are the
# spec's, a fixed set, so the cache is bounded by the spec.
_PLANS: dict[type, Plan | None] = {}


def plan_of(cls: type) -> Plan | None:
    """The screen plan of message class ``cls`` (None: use the full walk)."""
    try:
        return _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _build(cls)
        return plan


def _json_name(field: str) -> str:
    # proto3 JSON's lowerCamelCase name (the generated encoders' keys).
    return _CAMEL.sub(lambda m: m.group(1).upper(), field)


def _build(cls: type) -> Plan | None:
    table = JSON_TABLES.get(cls)
    meta = getattr(cls, "_betterproto", None)
    if table is None or meta is None:
        return None
    known = table[0]
    keys: list[str] = []
    screened: list[tuple[str, int]] = []
    for field, fm in meta.meta_by_field_name.items():
        key = _json_name(field)
        if known.get(key) != field or is_secret_key(key) or is_secret_key(field):
            return None  # a key redact would hide under, or one this module cannot name
        keys.append(key)
        how = _field_plan(fm)
        if how != SKIP:
            screened.append((key, how))
    return frozenset(keys), tuple(screened)


def _field_plan(fm: Any) -> int:
    kind = fm.proto_type
    if fm.map_meta is not None or fm.unwrap is not None:
        return ANY
    if kind in _INERT:
        return SKIP
    if kind in _TEXTUAL and not fm.repeated:
        return TEXT
    # Repeated strings (the argv rule looks at neighbours), maps (their keys are data)
    # and nested messages: the full walk, in one loop (a planned walk of a nested
    # message measured slower: a call and a key check more for a small dict).
    return ANY


class _Unplanned(Exception):
    """The payload holds a key its plan does not name: the full walk decides."""


def is_clean_typed(payload: dict[str, Any], cls: type) -> bool:
    """``is_clean(payload)`` for ``payload``, the proto3 JSON of a message of class ``cls``.

    True when ``redact(payload)`` certainly returns ``payload`` itself with no paths;
    False means "not settled" (``redact`` must run), never "holds a secret".
    """
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = plan_of(cls)
    if plan is None:
        return is_clean(payload)
    try:
        _screen_planned(payload, plan)
    except _Unscreened:
        return False
    except _Unplanned:
        return is_clean(payload)
    return True


def _screen_planned(value: dict[str, Any], plan: Plan) -> None:
    # Raises _Unscreened unless redact leaves ``value`` as it is (_screen_plain's rule,
    # applied to the screened fields only), _Unplanned for a key the plan lacks.
    # Operators and subscripts, not method calls: this runs for every engine event.
    keys, screened = plan
    if not value.keys() <= keys:
        raise _Unplanned
    settled = _SETTLED_TEXT
    for key, how in screened:
        if key not in value:
            continue
        item = value[key]
        if how == TEXT:
            if item.__class__ is str:
                if item not in settled:
                    _screen_text(item, False)
            elif isinstance(item, str):  # a str subclass (an enum given for a string field)
                if (text := str(item)) not in settled:
                    _screen_text(text, False)
            else:
                _screen_plain(item, nested=False)
        else:
            _screen_plain(item, nested=False)
