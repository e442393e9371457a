"""Context references in a user's message: ``@file:``, ``@folder:``, ``@url:``, ``@memory:``,
``@diff``, ``@staged``. Pure: text in, references (or a located error) out.

Syntax (with errors that name their place):

* a reference starts the text or follows whitespace or one of ``([{"'``; anywhere else
  ``@`` is plain text (``bob@example.com``);
* ``@@`` is a literal ``@`` and never starts a reference;
* ``@file:``, ``@folder:``, ``@url:`` and ``@memory:`` take a target: a quoted string
  (``@file:"my notes.md"``) or a run of non-space characters, without trailing
  ``.,;:!?)]}`` or quotes; ``@diff`` and ``@staged`` take none;
* ``@`` followed by any other word is plain text (``@alice``);
* a missing or unterminated target is an error naming its line and column (1-based);
* at most :data:`MAX_REFERENCES` references.
"""

from __future__ import annotations

from dataclasses import dataclass

from palyra.core.errors import InvalidArgument

MAX_REFERENCES = 8
WITH_TARGET = ("file", "folder", "url", "memory")
WITHOUT_TARGET = ("diff", "staged")
_OPENERS = frozenset('([{"\'')
_TRAILING = ".,;:!?)]}\"'"


@dataclass(frozen=True, slots=True)
class Reference:
    """One reference: its kind, target ("" for diff/staged) and span in the text."""

    kind: str
    target: str
    start: int
    end: int


def _where(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _error(text: str, offset: int, message: str) -> InvalidArgument:
    line, column = _where(text, offset)
    return InvalidArgument(f"{message} at line {line}, column {column}",
                           details={"line": str(line), "column": str(column),
                                    "field": "input.text"})


def parse_references(text: str) -> list[Reference]:
    """Every reference in ``text``, in order.

    Raises:
        InvalidArgument: a missing or unterminated target, or too many references
            (the message and ``details`` give the line and column).
    """
    refs: list[Reference] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] != "@":
            i += 1
            continue
        if text.startswith("@@", i):
            i += 2  # an escaped @
            continue
        if i > 0 and not (text[i - 1].isspace() or text[i - 1] in _OPENERS):
            i += 1
            continue
        ref, i = _one(text, i)
        if ref is None:
            continue
        refs.append(ref)
        if len(refs) > MAX_REFERENCES:
            raise _error(text, ref.start, f"more than {MAX_REFERENCES} references")
    return refs


def _one(text: str, at: int) -> tuple[Reference | None, int]:
    word_end = at + 1
    while word_end < len(text) and text[word_end].isalpha():
        word_end += 1
    kind = text[at + 1 : word_end]
    if kind in WITHOUT_TARGET and (word_end == len(text) or not text[word_end].isalnum()):
        return Reference(kind, "", at, word_end), word_end
    if kind not in WITH_TARGET or not text.startswith(":", word_end):
        return None, word_end  # plain text, e.g. @alice
    start = word_end + 1
    if start < len(text) and text[start] == '"':
        close = text.find('"', start + 1)
        if close < 0:
            raise _error(text, start, f"unterminated quoted target of @{kind}:")
        target = text[start + 1 : close]
        end = close + 1
    else:
        end = start
        while end < len(text) and not text[end].isspace():
            end += 1
        target = text[start:end].rstrip(_TRAILING)
        end = start + len(target)
    if not target.strip():
        raise _error(text, at, f"@{kind}: needs a target")
    return Reference(kind, target, at, end), end
