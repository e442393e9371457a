"""The spec's ``(palyra.v1.field_rule)`` options, enforced once for every request.

A rule says what a request field must hold beyond its proto type (``required``,
``pattern``, ``minimum``); the HTTP gateway's OpenAPI document states the same
rules, so a document-valid request is one the server accepts. Both gateways call
:func:`check_request` on every request message they decode (the gRPC codec,
streamed messages included, and the HTTP decoder), so a rule holds on every RPC
whether or not its handler looks, and a new rule in the spec needs no handler code.
A rule's free-form ``schema`` (length caps, one member when another is set) stays
with the handlers, which refuse it with the same code.

Semantics, as proto3 JSON carries them: a string, bytes or list is *set* when not
empty, a number when not zero, a message when present. ``pattern`` is a JSON
Schema pattern (unanchored, ECMA 262 subset, which Python's ``re`` reads alike)
applied to a set string and to each item of a list; an empty string is absent in
proto3 JSON, so only ``required`` speaks about it. ``minimum`` bounds a number,
which must also be finite. Message fields are walked, so a rule on ``Agent`` holds
inside ``CreateAgentRequest.agent``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import betterproto2
from palyra_gen.field_rules import RULES, FieldRule

from palyra.core.errors import InvalidArgument

_PACKAGE = "palyra.v1."
Check = Callable[[Any, str], None]
"""One field's check: ``(message, path prefix)``; raises :class:`InvalidArgument`."""

_plans: dict[type, tuple[Check, ...]] = {}


def check_request(message: betterproto2.Message) -> None:
    """Refuse ``message`` (``INVALID_ARGUMENT``, ``details.field`` its path) if a field
    breaks its spec rule; rules are checked in field order, the first broken one named."""
    plan = _plans.get(type(message))
    if plan is None:
        plan = _plan(type(message), ())
    for check in plan:
        check(message, "")


def _plan(cls: type, visiting: tuple[type, ...]) -> tuple[Check, ...]:
    """The checks of ``cls`` and of the message fields below it (built once per class)."""
    known = _plans.get(cls)
    if known is not None:
        return known
    if cls in visiting:  # a recursive message: its rules are checked at the outer level
        return ()
    meta = cls._betterproto  # type: ignore[attr-defined]
    checks: list[Check] = []
    for name in meta.sorted_field_names:
        field = meta.meta_by_field_name[name]
        rule = RULES.get(f"{_PACKAGE}{cls.__name__}.{name}")
        if rule is not None and (rule.required or rule.pattern or rule.minimum is not None):
            checks.append(_field_check(name, field, rule))
        if field.proto_type == "message" and field.map_meta is None:
            child = meta.cls_by_field[name]
            if getattr(child, "_betterproto", None) is not None:
                inner = _plan(child, (*visiting, cls))
                if inner:
                    checks.append(_nested_check(name, field.repeated, inner))
    plan = tuple(checks)
    _plans[cls] = plan
    return plan


def _refuse(path: str, what: str) -> InvalidArgument:
    return InvalidArgument(f"{path} {what}", details={"field": path})


def _field_check(name: str, field: Any, rule: FieldRule) -> Check:
    pattern = re.compile(rule.pattern) if rule.pattern else None
    minimum = rule.minimum

    def check(message: Any, prefix: str) -> None:
        value = getattr(message, name)
        if rule.required and _unset(value):
            raise _refuse(prefix + name, "is required")
        values = value if field.repeated else (value,)
        for item in values:
            if pattern is not None and isinstance(item, str) and item \
                    and pattern.search(item) is None:
                raise _refuse(prefix + name, f"must be {rule.hint}" if rule.hint
                              else f"must match the pattern {rule.pattern}")
            if minimum is not None and isinstance(item, (int, float)) \
                    and not isinstance(item, bool) \
                    and (not math.isfinite(item) or item < minimum):
                raise _refuse(prefix + name, f"must be a finite number of at least {minimum:g}")

    return check


def _nested_check(name: str, repeated: bool, inner: tuple[Check, ...]) -> Check:
    def check(message: Any, prefix: str) -> None:
        value = getattr(message, name)
        if value is None:
            return
        for i, item in enumerate(value if repeated else (value,)):
            path = f"{prefix}{name}[{i}]." if repeated else f"{prefix}{name}."
            for each in inner:
                each(item, path)

    return check


def _unset(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (str, bytes, list, dict)):
        return not value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    return False
