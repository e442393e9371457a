"""The scripted model's ``/call TOOL {json}`` directive (pure).

So that a user or a test can try any tool without an API key, a user message of
the form ``/call NAME`` or ``/call NAME {"arg": ...}`` makes the scripted model
ask for exactly that one call. The call then goes through the normal flow
(Cedar, postures, approvals, the journal) like any model's; once its result is
in, the model replies with the result's content verbatim. Several lines that
each start with ``/call`` ask for several calls in one turn (each line's JSON on
that line), in that order; the reply is then the results' contents, one a line.
A directive that does not parse is answered with a one-line explanation and
calls nothing.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import msgspec

PREFIX = "/call"
USAGE = 'usage: /call TOOL {"arg": value}'
# A tool name as the registry spells them: dotted words (``mcp.files.read``).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


@dataclasses.dataclass(frozen=True, slots=True)
class Directive:
    """A parsed ``/call``: the tool and its arguments."""

    tool: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class BadDirective:
    """A ``/call`` that does not parse, with why (the model's reply)."""

    problem: str


def is_directive(text: str) -> bool:
    """Whether ``text`` is meant as a ``/call`` (``/call`` then a space or nothing)."""
    stripped = text.strip()
    return stripped == PREFIX or stripped.startswith(PREFIX + " ")


def parse_directives(text: str) -> list[Directive] | BadDirective:
    """One call per ``/call`` line when there are several, else :func:`parse_directive`."""
    lines = [line for line in text.strip().splitlines() if is_directive(line)]
    if len(lines) < 2:
        single = parse_directive(text)
        return single if isinstance(single, BadDirective) else [single]
    calls: list[Directive] = []
    for line in lines:
        parsed = parse_directive(line)
        if isinstance(parsed, BadDirective):
            return parsed
        calls.append(parsed)
    return calls


def parse_directive(text: str) -> Directive | BadDirective:
    """Parse ``/call NAME [JSON object]``; only call after :func:`is_directive`."""
    rest = text.strip()[len(PREFIX):].strip()
    match = _NAME.match(rest)
    if match is None:
        return BadDirective(f"/call: a tool name is missing; {USAGE}")
    name, raw = match.group(0), rest[match.end():].strip()
    if rest[match.end():match.end() + 1] not in ("", " ", "\t", "\n"):
        return BadDirective(f"/call: {rest.split()[0]!r} is not a tool name; {USAGE}")
    if not raw:
        return Directive(name, {})
    try:
        arguments = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return BadDirective(f"/call: the arguments are not JSON ({exc}); {USAGE}")
    if not isinstance(arguments, dict):
        return BadDirective(f"/call: the arguments must be a JSON object; {USAGE}")
    return Directive(name, arguments)
