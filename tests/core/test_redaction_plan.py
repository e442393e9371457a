"""The typed screen (``core.redaction_plan``) sees every free-text field the spec declares.

The journal screens an engine event's payload by its message's plan, which skips the
fields that cannot carry text. These tests read the tape's messages from the spec's
``.proto`` files themselves (not from the generated code the plan is made from), so a
field the plan would skip while it can hold text fails here: the plan's screened fields
of every tape event type must be exactly the spec's string, bytes and map fields (and
the messages holding them), and a secret planted in each is redacted by ``prepare``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.core.ids import new_ulid
from palyra.core.protojson import decode_message
from palyra.core.redaction_plan import TEXT, is_clean_typed, plan_of
from palyra.engine.model.tape import ENGINE_ACTOR, MEMBER_TYPES, kind_of, payload_of
from palyra.journal import EventDraft, JournalConfig
from palyra.journal.write.prepare import prepare_draft

SPEC = Path(__file__).resolve().parents[2] / "spec" / "proto" / "palyra" / "v1"
# Secret -> the part of it that must not be stored (a rule of ``core.redaction`` each).
SECRETS = {
    "Bearer abcdefghijklmnopqrstuvwxyz0123": "abcdefghijklmnop",
    "sk-ABCDEFGHIJKLMNOPQRSTUV": "ABCDEFGHIJKLMNOP",
    "AKIAABCDEFGHIJKLMNOP": "AKIAABCDEFGHIJKL",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789": "ghp_abcdefghijkl",
    "token=hunter2hunter2": "hunter2hunter2",
    "-----BEGIN PRIVATE KEY-----\nMIIsecretkeybody\n-----END PRIVATE KEY-----": "MIIsecretkeybody",
}
_SCALARS = {
    "bool", "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64",
}  # fmt: skip
_MESSAGE = re.compile(r"^message (\w+) \{(.*?)^\}", re.M | re.S)
_ENUM = re.compile(r"^enum (\w+) \{", re.M)
_FIELD = re.compile(r"^\s*(repeated\s+|optional\s+)?(map<\s*\w+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*\d+", re.M)


def _spec() -> tuple[dict[str, list[tuple[bool, str, str]]], set[str]]:
    """Message name -> its fields ``(repeated, type, name)``, and the enum names."""
    messages: dict[str, list[tuple[bool, str, str]]] = {}
    enums: set[str] = set()
    for proto in sorted(SPEC.glob("*.proto")):
        text = re.sub(r"//[^\n]*", "", proto.read_text())
        enums.update(_ENUM.findall(text))
        for name, body in _MESSAGE.findall(text):
            body = re.sub(r"\[[^\]]*\]", "", body)  # field options
            messages[name] = [(bool(rep and rep.strip() == "repeated"), kind, field)
                              for rep, kind, field in _FIELD.findall(body)]
    return messages, enums


MESSAGES, ENUMS = _spec()
TAPE_MEMBERS = [kind for rep, kind, field in MESSAGES["TapeEvent"] if field not in {
    "run_id", "tape_seq", "position", "ts_unix_ms", "session_id"}]


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


def _text_paths(message: str, depth: int = 0) -> list[tuple[str, ...]]:
    """JSON paths of the free-text slots of ``message`` by the spec: ``(key,)`` for a
    string or bytes field, ``(key, "[]")`` for repeated ones, ``(key, "{}")`` for a map,
    and a nested message's own paths under ``(key,)`` or ``(key, "[]")``."""
    paths: list[tuple[str, ...]] = []
    for repeated, kind, field in MESSAGES[message]:
        key = _camel(field)
        if kind.startswith("map<"):
            paths.append((key, "{}"))
        elif kind in ("string", "bytes"):
            paths.append((key, "[]") if repeated else (key,))
        elif kind in MESSAGES and depth < 3:
            inner = _text_paths(kind, depth + 1)
            paths.extend((key, "[]", *p) if repeated else (key, *p) for p in inner)
        else:
            assert kind in _SCALARS or kind in ENUMS, (message, field, kind)
    return paths


def _planned_paths(plan: Any) -> list[tuple[str, ...]]:
    # TEXT: the value itself; ANY: the full walk sees whatever the field holds.
    return [(key,) if how == TEXT else (key, "*") for key, how in plan[1]]


def _covered(path: tuple[str, ...], planned: list[tuple[str, ...]]) -> bool:
    return any((path[: len(p) - 1] == p[:-1] and p[-1] == "*") or path == p for p in planned)


CASES = [(kind, path) for kind in TAPE_MEMBERS for path in _text_paths(kind)]


def test_the_spec_parse_found_every_tape_member() -> None:
    assert sorted(TAPE_MEMBERS) == sorted(cls.__name__ for cls in MEMBER_TYPES.values())
    assert len(CASES) > 50


@pytest.mark.parametrize("kind", TAPE_MEMBERS)
def test_the_plan_screens_every_free_text_field_of_the_spec(kind: str) -> None:
    cls = next(c for c in MEMBER_TYPES.values() if c.__name__ == kind)
    plan = plan_of(cls)
    assert plan is not None, kind  # every tape member has a plan (no full walk)
    planned = _planned_paths(plan)
    missing = [p for p in _text_paths(kind) if not _covered(p, planned)]
    assert not missing, (kind, missing)
    # Skipped fields are exactly the spec's numbers, booleans and enums.
    skipped = plan[0] - {key for key, _ in plan[1]}
    inert = {_camel(f) for _, k, f in MESSAGES[kind] if k in _SCALARS or k in ENUMS}
    assert skipped == inert, kind


def _planted(path: tuple[str, ...], text: str) -> Any:
    """A proto3 JSON value holding ``text`` at ``path`` (below the first key)."""
    if not path:
        return f"see {text} here"
    if path[0] == "{}":
        return {"note": f"see {text} here"}
    if path[0] == "[]":
        return ["first", _planted(path[1:], text)] if len(path) == 1 else [_planted(path[1:], text)]
    return {path[0]: _planted(path[1:], text)}


def _member(kind: str) -> type:
    return next(c for c in MEMBER_TYPES.values() if c.__name__ == kind)


@pytest.mark.parametrize(("kind", "path"), CASES, ids=[f"{k}.{'.'.join(p)}" for k, p in CASES])
def test_a_secret_in_this_free_text_field_is_redacted(kind: str, path: tuple[str, ...]) -> None:
    for secret in SECRETS:
        _check(kind, path, secret)


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), secret=st.sampled_from(sorted(SECRETS)))
def test_a_secret_in_any_free_text_field_is_redacted(case: tuple[str, tuple[str, ...]],
                                                     secret: str) -> None:
    _check(*case, secret)


def _check(kind: str, path: tuple[str, ...], secret: str) -> None:
    cls = _member(kind)
    payload = _planted(path, secret)
    assert not is_clean_typed(payload, cls), (kind, path)
    # The member as the engine would have built it, and the draft the engine makes.
    member: Any = decode_message(cls, payload)
    draft = EventDraft(kind=kind_of(member), actor=ENGINE_ACTOR, session_id=new_ulid(),
                       run_id=new_ulid(), tape=True, payload=payload_of(member), origin=member)
    prepared = prepare_draft(draft, JournalConfig(), 1_700_000_000_000)
    assert SECRETS[secret].encode() not in prepared.payload, (kind, path)
    assert SECRETS[secret] not in repr(prepared.value), (kind, path)
    assert prepared.redactions, (kind, path)
    assert prepared.origin is None

