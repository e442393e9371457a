"""The pure learning model: thresholds, sampling, procedures, parsing the model's answer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from palyra.learning import model
from palyra.providers import _scripted


def test_the_scripted_provider_knows_the_reflection_marker() -> None:
    assert _scripted.REFLECTION_MARKER == model.REFLECTION_MARKER
    assert model.REFLECTION_PROMPT.startswith(model.REFLECTION_MARKER)


@given(kind=st.sampled_from(model.KINDS), bps=st.integers(0, 10_000))
def test_thresholds(kind: str, bps: int) -> None:
    state = model.initial_state(kind, bps)
    if bps < model.REVIEW_FLOOR_BPS[kind]:
        assert state is None
    elif kind in model.AUTO_WRITE_BPS and bps >= model.AUTO_WRITE_BPS[kind]:
        assert state is model.State.APPLIED
    else:
        assert state is model.State.PENDING_REVIEW


def test_procedures_are_never_auto_written() -> None:
    assert all(model.initial_state("procedure", b) is not model.State.APPLIED
               for b in range(0, 10_001, 50))


@given(run_id=st.text(min_size=1, max_size=30))
def test_sampling_extremes(run_id: str) -> None:
    assert model.sampled(run_id, 100) and not model.sampled(run_id, 0)


def test_sampling_follows_the_percentage() -> None:
    share = sum(model.sampled(f"run-{i}", 30) for i in range(4000)) / 4000
    assert 0.26 < share < 0.34


def test_procedures_find_repeated_tool_sequences() -> None:
    found = model.procedures([(5, "add"), (8, "add"), (11, "add")])
    assert [(p.text, p.tape_seqs) for p in found] == [
        ("tool sequence add -> add (seen 2 times)", (5, 8, 11))]
    mixed = model.procedures([(1, "read"), (2, "write"), (3, "read"), (4, "write"), (5, "ls")])
    assert [p.text for p in mixed] == ["tool sequence read -> write (seen 2 times)"]
    assert model.procedures([(1, "a"), (2, "b"), (3, "c")]) == []


@given(text=st.text(max_size=300))
def test_parsing_never_raises(text: str) -> None:
    assert isinstance(model.parse_reflection(text, {1, 2}), list)


def test_parsing_keeps_only_sound_candidates() -> None:
    answer = ('noise {"candidates": [{"kind": "durable_fact", "text": " a  b ", '
              '"confidence_bps": 20000, "tape_seqs": [1, 99]}, {"kind": "procedure", '
              '"text": "x", "confidence_bps": 9000, "tape_seqs": [1]}, {"kind": "preference", '
              '"text": "y", "confidence_bps": 8100, "tape_seqs": [99]}, {"kind": "preference",'
              ' "text": "z", "confidence_bps": true, "tape_seqs": [2]}]} trailing')
    got = model.parse_reflection(answer, {1, 2})
    assert got == [model.Proposal("durable_fact", "a b", 10_000, (1,))]


def test_candidate_ids_are_deterministic() -> None:
    a = model.candidate_id("r1", "preference", "x")
    assert a == model.candidate_id("r1", "preference", "x") != model.candidate_id("r2",
                                                                                  "preference", "x")
