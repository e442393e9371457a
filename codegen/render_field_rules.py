"""``palyra_gen/field_rules.py``: the ``(palyra.v1.field_rule)`` options as data.

The HTTP gateway's OpenAPI document reads them (``required``, ``pattern``,
``minimum``), so what the spec says a field must hold is stated once.
"""

from __future__ import annotations

import json

from codegen.descriptors import FieldRuleOption

GENERATOR = "codegen/render_field_rules.py"


def _schema(name: str, text: str) -> str:
    """The rule's JSON Schema, checked to be a JSON object and written canonically."""
    if not text:
        return ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name}: (field_rule).schema is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{name}: (field_rule).schema must be a JSON object")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def render(rules: dict[str, FieldRuleOption]) -> str:
    """One sorted literal dict: full field name -> its rule."""
    lines = [
        '"""What request fields must hold beyond their proto type, by full field name."""',
        "",
        "from typing import Final, NamedTuple",
        "",
        "",
        "class FieldRule(NamedTuple):",
        '    """``required``: set and not empty; ``pattern``: a string\'s regex ("" = any);',
        '    ``minimum``: a number\'s finite lower bound (None = any); ``schema``: more JSON',
        '    Schema the value must satisfy, as canonical JSON ("" = none); ``hint``: what a',
        '    value breaking ``pattern`` must be, in words ("" = the pattern itself)."""',
        "",
        "    required: bool",
        "    pattern: str",
        "    minimum: float | None",
        '    schema: str = ""',
        '    hint: str = ""',
        "",
        "",
        "RULES: Final[dict[str, FieldRule]] = {",
        *(f"    {name!r}: FieldRule({r.required!r}, {r.pattern!r}, {r.minimum!r}"
          + (f", {_schema(name, r.schema)!r}" if r.schema else "")
          + (f", hint={r.hint!r}" if r.hint else "") + "),"
          for name, r in sorted(rules.items())),
        "}",
        "",
    ]
    return "\n".join(lines)
