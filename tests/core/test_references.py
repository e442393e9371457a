"""The @reference parser: generated texts parse back to exactly the references put in,
escapes and e-mail addresses stay text, and every error names its line and column."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.references import MAX_REFERENCES, parse_references

_plain = st.text(st.sampled_from("abc xyz.,!?-\n"), min_size=1, max_size=12)
_bare = st.text(st.sampled_from("abcdefgh/_-~0123456789"), min_size=1, max_size=12).filter(
    lambda t: t[-1] not in ".,;:!?)]}")
_quoted = st.text(st.sampled_from("ab c/.-_"), min_size=1, max_size=12).filter(
    lambda t: t.strip() != "")


@st.composite
def _reference(draw: st.DrawFn) -> tuple[str, tuple[str, str]]:
    kind = draw(st.sampled_from(["file", "folder", "url", "memory", "diff", "staged"]))
    if kind in ("diff", "staged"):
        return f"@{kind}", (kind, "")
    if draw(st.booleans()):
        target = draw(_quoted)
        return f'@{kind}:"{target}"', (kind, target)
    target = draw(_bare)
    return f"@{kind}:{target}", (kind, target)


@given(parts=st.lists(st.one_of(_plain.map(lambda t: ("plain", t)),
                                _reference().map(lambda r: ("ref", r)),
                                st.just(("plain", "@@")),
                                st.just(("plain", "mail bob@example.com")),
                                st.just(("plain", "@alice"))),
                      max_size=10))
def test_generated_texts_parse_back(parts: list[tuple[str, object]]) -> None:
    text, wanted = "", []
    for kind, part in parts:
        if kind == "ref":
            piece, ref = part  # type: ignore[misc]
            if len(wanted) == MAX_REFERENCES:
                continue
            text += " " + piece + " "
            wanted.append(ref)
        else:
            text += " " + str(part) + " "
    got = parse_references(text)
    assert [(r.kind, r.target) for r in got] == wanted
    for r in got:  # spans point at the references
        assert text[r.start] == "@" and text[r.start + 1:].startswith(r.kind)


def test_openers_and_trailing_punctuation() -> None:
    refs = parse_references('see (@file:docs/a.md), ["@url:https://x.org/p?q=1"] and @diff.')
    assert [(r.kind, r.target) for r in refs] == [
        ("file", "docs/a.md"), ("url", "https://x.org/p?q=1"), ("diff", "")]
    assert parse_references("write to me@example.com or @@file:x") == []


@pytest.mark.parametrize(("text", "line", "column"), [
    ("@file: rest", 1, 1),
    ("hello\n  @memory:", 2, 3),
    ('look at @folder:"unterminated', 1, 17),
])
def test_errors_name_line_and_column(text: str, line: int, column: int) -> None:
    with pytest.raises(PalyraError) as info:
        parse_references(text)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.details["line"] == str(line)
    assert info.value.details["column"] == str(column)
    assert f"line {line}, column {column}" in info.value.message


def test_at_most_eight() -> None:
    assert len(parse_references(" ".join(f"@file:f{i}" for i in range(8)))) == 8
    with pytest.raises(PalyraError) as info:
        parse_references(" ".join(f"@file:f{i}" for i in range(9)))
    assert "more than 8" in info.value.message
