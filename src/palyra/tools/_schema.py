"""Arguments checked against a JSON Schema a tool's owner gave (an MCP server, a skill)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions


def argument_checker(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], str | None]:
    """A function telling why arguments do not match ``schema`` (or ``None``).

    Raises:
        jsonschema.exceptions.SchemaError: ``schema`` is not a valid schema.
    """
    plain = dict(schema)
    cls = jsonschema.validators.validator_for(plain)
    cls.check_schema(plain)
    validator = cls(plain)

    def check(arguments: dict[str, Any]) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{error.message}" + (f" (at {where})" if where else "")

    return check
