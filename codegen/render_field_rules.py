"""``palyra_gen/field_rules.py``: the ``(palyra.v1.field_rule)`` options as data.

The HTTP gateway's OpenAPI document reads them (``required``, ``pattern``,
``minimum``), so what the spec says a field must hold is stated once.
"""

from __future__ import annotations

from codegen.descriptors import FieldRuleOption

GENERATOR = "codegen/render_field_rules.py"


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
        '    ``minimum``: a number\'s finite lower bound (None = any)."""',
        "",
        "    required: bool",
        "    pattern: str",
        "    minimum: float | None",
        "",
        "",
        "RULES: Final[dict[str, FieldRule]] = {",
        *(f"    {name!r}: FieldRule({r.required!r}, {r.pattern!r}, {r.minimum!r}),"
          for name, r in sorted(rules.items())),
        "}",
        "",
    ]
    return "\n".join(lines)
