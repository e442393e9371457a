"""``normalize_screened`` (one walk) equals ``normalize`` then ``redact`` (two walks).

The journal's ``prepare`` skips ``redact`` when the screen says a payload is
clean, so the screen must never call a payload clean that ``redact`` would
change, and must normalize exactly like ``normalize`` (values and errors).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from palyra.core import canonical, redaction
from palyra.core.errors import InvalidArgument
from palyra.core.ids import UlidSequence
from tests.core.test_redaction_oracle import _keys, payloads

# Values normalize treats specially or refuses: they must take the two-step path.
_odd_leaves = st.one_of(
    st.just(2**63), st.just(-(2**63) - 1), st.just(math.nan), st.just(math.inf),
    st.just("\ud800"), st.just((1, "a")), st.just(b"bytes"), st.just(True),
    st.integers(-(2**63), 2**63 - 1), st.text(max_size=6),
)  # fmt: skip
_odd = st.recursive(
    _odd_leaves,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.one_of(_keys, st.just("\udfff"), st.just(3)), children, max_size=3),
    max_leaves=8,
)


def _outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except InvalidArgument as exc:
        return ("error", exc.message)


def _check(payload: Any) -> None:
    screened = _outcome(lambda: redaction.normalize_screened(payload))
    plain = _outcome(lambda: canonical.normalize(payload))
    if plain[0] == "error":
        assert screened == plain
        return
    assert screened[0] == "ok"
    value, clean = screened[1]
    assert value == plain[1]
    assert json.dumps(value) == json.dumps(plain[1])  # same types, same key order
    if clean:
        full = redaction.redact(value)
        assert full.paths == () and full.value is value


@given(payload=payloads)
@settings(max_examples=400)
@example({"model_token": {"token": "tok1", "is_final": False}, "i": 1})
@example({"api_key": "x"})
@example({"args": ["--password", "hunter2"]})
@example({"text": '{"password": "x"}'})
@example({"args_json": '{"a": 1, "b": [-2, "read-only"]}'})
@example({"args_json": '{"cmd": ["curl", "-H", "Authorization: Bearer abcdefghijkl"]}'})
@example({"args_json": '{"nested": "{\\"api_key\\": \\"x\\"}"}'})
@example({"args_json": '[{"k": "sk-abcdefghijklmnop"}]'})
@example({"args_json": '{"a": 1'})
@example({"note": "Authorization: Bearer abcdefghijkl"})
def test_the_screen_equals_normalize_then_redact(payload: Any) -> None:
    _check(payload)
    _check({"p": payload, "l": [payload, payload]})


@given(payload=_odd)
@settings(max_examples=300)
def test_the_screen_normalizes_and_refuses_like_normalize(payload: Any) -> None:
    _check(payload)
    _check({"p": payload})


def test_the_screen_stops_at_the_same_depth_as_normalize() -> None:
    assert redaction._MAX_DEPTH == canonical.MAX_DEPTH
    for depth in (canonical.MAX_DEPTH - 1, canonical.MAX_DEPTH, canonical.MAX_DEPTH + 1):
        deep: Any = "leaf"
        for _ in range(depth):
            deep = {"k": deep}
        _check(deep)


def test_a_clean_payload_is_called_clean() -> None:
    value, clean = redaction.normalize_screened({"model_token": {"token": "tok1"}, "i": 1})
    assert clean and value == {"model_token": {"token": "tok1"}, "i": 1}
    assert not redaction.normalize_screened({"password": "x"})[1]
    assert not redaction.normalize_screened({"t": "token=abcdefgh12345"})[1]
    # Text redact leaves alone is clean even where a trigger literal shows,
    # and so is JSON text holding nothing redact would change.
    assert redaction.normalize_screened({"t": "a=b", "r": "read-only"})[1]
    assert redaction.normalize_screened({"input_json": '{"a": 12, "b": [1, "x"]}'})[1]
    assert not redaction.normalize_screened({"input_json": '{"password": "x"}'})[1]
    assert not redaction.normalize_screened({"input_json": '["--token", "abcdefgh"]'})[1]


@given(payload=payloads)
@settings(max_examples=400)
@example({"phase": "AGENT_LOOP_PHASE_STARTED", "turn": 3})
@example({"args": ["--password", "hunter2"]})
@example({"input_json": '{"password": "x"}'})
@example({"input_json": '{"a": 1, "b": "read-only"}'})
@example({"reason": "allowed: read-only tool", "ids": ["01JABCDEFGHJKMN"]})
def test_is_clean_only_where_redact_changes_nothing(payload: Any) -> None:
    # The engine's drafts (plain by construction) are screened by is_clean alone.
    try:
        plain = canonical.normalize({"p": payload, "l": [payload]})
    except InvalidArgument:
        return
    for value in (plain, plain["p"]):
        if redaction.is_clean(value):
            full = redaction.redact(value)
            assert full.paths == () and full.value is value


def test_is_clean_settles_the_engine_s_usual_events() -> None:
    assert redaction.is_clean({"phase": "AGENT_LOOP_PHASE_STARTED", "turn": 3})
    assert redaction.is_clean({"proposalId": "01J", "inputJson": '{"a":0,"b":1}',
                               "decision": {"reason": "tool add is allowed"}})
    assert not redaction.is_clean({"password": "x"})
    assert not redaction.is_clean({"inputJson": '{"api_key": "abc"}'})


def test_is_clean_screens_a_repeated_string_once(monkeypatch: Any) -> None:
    # An engine step repeats its ids, names and enum values in several events: a string
    # found clean is not screened again (whether redact changes it depends on it alone).
    screened: list[str] = []
    triggered = redaction._triggered

    def counting(lowered: str) -> bool:
        screened.append(lowered)
        return triggered(lowered)

    monkeypatch.setattr(redaction, "_triggered", counting)
    event = {"proposalId": "01JQ-SCREENED-ONCE", "decision": {"proposalId": "01JQ-SCREENED-ONCE"}}
    assert redaction.is_clean(event)
    assert redaction.is_clean({"result": {"proposalId": "01JQ-SCREENED-ONCE"}})
    assert screened.count("01jq-screened-once") == 1
    # A secret is never remembered: it is screened (and refused) every time.
    assert not redaction.is_clean({"t": "token=abcdefgh12345"})
    assert not redaction.is_clean({"t": "token=abcdefgh12345"})
    assert screened.count("token=abcdefgh12345") == 2


def test_remembered_strings_are_bounded_and_never_json_text() -> None:
    limit = redaction._SETTLED_LIMIT
    for i in range(3 * limit):
        assert redaction.is_clean({"id": f"run-{i}"})
        # Text within its bound, and ULIDs (kept apart, see the tests of ids) in theirs.
        assert len(redaction._SETTLED_TEXT) - len(redaction._SETTLED_IDS) <= limit
        assert len(redaction._SETTLED_IDS) <= limit
    long_text = "x" * (redaction._SETTLED_MAX_CHARS + 1)
    assert redaction.is_clean({"text": long_text})
    assert long_text not in redaction._SETTLED_TEXT
    # JSON text is clean or not by where it sits (inside JSON text it is left to
    # redact), so it is never remembered: the nested copy below stays unsettled.
    inner = '{"b": 1}'
    assert redaction.is_clean({"inputJson": inner})
    assert inner not in redaction._SETTLED_TEXT
    assert not redaction.is_clean({"inputJson": '{"a": "{\\"b\\": 1}"}'})


def test_the_normalizing_screen_shares_what_is_settled(monkeypatch: Any) -> None:
    # A task's events (no engine message behind them) repeat the task's id, kind, state
    # and owner: the one-walk screen settles each string once too.
    screened: list[str] = []
    no_span = redaction._no_span

    def counting(text: str, lowered: str) -> bool:
        screened.append(lowered)
        return no_span(text, lowered)

    monkeypatch.setattr(redaction, "_no_span", counting)
    task = {"task_id": "01JT-SETTLED-ONCE", "state": "claimed", "owner": "worker-1"}
    for _ in range(3):
        value, clean = redaction.normalize_screened(task)
        assert clean and value == task
    assert screened.count("01jt-settled-once") == 1
    # Text that is not ASCII is never kept: it is screened (and checked) every time,
    # so a lone surrogate is refused however often it comes.
    for _ in range(2):
        assert redaction.normalize_screened({"t": "café-1"})[1]
    assert screened.count("café-1") == 2
    for _ in range(2):
        with pytest.raises(InvalidArgument):
            redaction.normalize_screened({"t": "\ud800-x"})


# Secrets cut to a ULID's length (26): each differs from a ULID in one way only (a
# lower-case letter, a "-", "=" or "_", an I), so a shape test any looser than the
# ULID's own alphabet would call one of them clean.
_NEAR_ULIDS = (
    "sk-ABCDEFGHJKMNPQRSTVWXYZ0",  # "-"
    "AKIA0123456789ABCDEF 00000",  # an I (and a space)
    "Bearer 0123456789ABCDEFGHJ",  # lower case, a space
    "xoxb-0123456789ABCDEFGHJKM",  # lower case, "-"
    "Cookie: 0123456789ABCDEFGH",  # lower case, ":"
    "TOKEN=0123456789ABCDEFGHJK",  # "="
)


# The ULID alphabet (and a few ids side by side, as text that holds several of them).
_ULID_TEXT = st.lists(st.from_regex(r"\A[0-7][0-9A-HJKMNP-TV-Z]{25}\Z"), min_size=1,
                      max_size=3).map("".join)


@given(text=_ULID_TEXT)
@settings(max_examples=500)
@example(text="7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
@example(text="0GHPEYJXKAKJA0000000000000")  # gh, eyj, ak..a: triggers without a span
def test_no_span_pattern_can_match_the_ulid_alphabet(text: str) -> None:
    # What lets the screen settle a ULID by its shape without running the patterns
    # (redaction._ulid_shaped): the patterns themselves, asked directly, find nothing
    # in text of that alphabet. A pattern added later that could match such text
    # fails here, before the shortcut could let a secret of that shape through.
    assert not redaction.contains_secret(text)
    assert not redaction._SECRET_FLAG.search(text)
    assert redaction.redact_text(text) == text


@given(ulid=st.from_regex(r"\A[0-7][0-9A-HJKMNP-TV-Z]{25}\Z"))
@settings(max_examples=300)
def test_an_id_is_clean_by_its_shape_and_remembered_apart(ulid: str) -> None:
    # Whether redact changes a ULID needs no screen (its alphabet holds no character a
    # span needs); it is remembered among the ids, apart from the text that repeats.
    assert redaction.redact({"id": ulid}).paths == ()
    assert redaction.normalize_screened({"id": ulid}) == ({"id": ulid}, True)
    assert redaction.is_clean({"id": [ulid]})
    assert ulid in redaction._SETTLED_IDS


@pytest.mark.parametrize("text", _NEAR_ULIDS)
def test_text_of_an_id_s_length_is_still_screened(text: str) -> None:
    assert len(text) == 26
    assert redaction.redact({"t": text}).paths == ("$.t",)
    assert not redaction.normalize_screened({"t": text})[1]
    assert not redaction.is_clean({"t": text})


def test_a_stream_of_task_ids_keeps_what_repeats_remembered(monkeypatch: Any) -> None:
    # A task's events carry its fresh id beside its kind, state and owner: ids counted
    # in the remembered text's bound filled it every ~1,000 tasks, and each time it was
    # emptied the kind, state and owner were screened again. Both stay bounded.
    ids = UlidSequence()
    redaction.normalize_screened({"kind": "digest", "owner": "worker-7:1"})
    limit = redaction._SETTLED_LIMIT
    settled_again: list[str] = []
    settle = redaction._settle

    def counting(text: str, first: str) -> None:
        settled_again.append(text)
        settle(text, first)

    monkeypatch.setattr(redaction, "_settle", counting)
    for _ in range(3 * limit):
        task_id = ids.next()
        for _event in range(2):
            value, clean = redaction.normalize_screened(
                {"task_id": task_id, "kind": "digest", "owner": "worker-7:1"})
            assert clean and value["task_id"] == task_id
        assert task_id in redaction._SETTLED_TEXT  # its second event's is one lookup
        assert len(redaction._SETTLED_IDS) <= limit
        assert len(redaction._SETTLED_TEXT) <= 2 * limit
    assert {"digest", "worker-7:1"} <= redaction._SETTLED_TEXT
    assert settled_again == []  # the kind and owner were never screened again
