"""ULID encoding: the two-digits-per-lookup fast path equals the digit-by-digit definition."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.core.ids import encode_ulid, is_ulid

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _reference(ms: int, entropy: bytes) -> str:
    value = (ms << 80) | int.from_bytes(entropy, "big")
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


@given(ms=st.integers(0, (1 << 48) - 1), entropy=st.binary(min_size=10, max_size=10))
def test_encode_ulid_matches_definition(ms: int, entropy: bytes) -> None:
    ulid = encode_ulid(ms, entropy)
    assert ulid == _reference(ms, entropy)
    assert is_ulid(ulid)


def test_extremes() -> None:
    assert encode_ulid(0, bytes(10)) == "0" * 26
    assert encode_ulid((1 << 48) - 1, b"\xff" * 10) == "7" + "Z" * 25


def test_new_ulids_are_distinct_and_carry_the_time() -> None:
    from palyra.core.ids import new_ulid

    ids = [new_ulid(1_700_000_000_000) for _ in range(2000)]
    assert len(set(ids)) == len(ids) and all(is_ulid(i) for i in ids)
    assert {i[:10] for i in ids} == {encode_ulid(1_700_000_000_000, bytes(10))[:10]}


def test_a_sequence_sorts_in_the_order_made_even_within_one_millisecond() -> None:
    from palyra.core.ids import UlidSequence

    seq = UlidSequence()
    made = [seq.next(1_700_000_000_000) for _ in range(500)]
    made += [seq.next(1_699_999_999_000)]  # the clock stepped back
    made += [seq.next(1_700_000_000_500) for _ in range(10)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(is_ulid(m) for m in made)


@given(
    clock=st.lists(st.integers(1_700_000_000_000, 1_700_000_000_020), min_size=1, max_size=60),
    start=st.one_of(
        st.integers(0, (1 << 79) - 1),
        # just below a carry out of the low 30 bits, which the cached digits must follow
        st.integers(1, (1 << 49) - 1).map(lambda hi: (hi << 30) - 3),
        st.just((1 << 80) - 3),  # near the top: the sequence moves on to a later millisecond
    ),
)
def test_a_sequence_equals_the_definition_and_only_grows(clock: list[int], start: int) -> None:
    """Every id is ``encode_ulid(ms, random)`` of the state that made it, ids strictly grow,
    and an id carries the clock's millisecond unless the clock stepped back (or the
    millisecond's counter ran out): then it keeps counting in the last millisecond."""
    from palyra.core.ids import UlidSequence

    seq = UlidSequence()
    seq.next(clock[0])
    # Place the counter where the property is interesting (with the digits it keeps).
    seq._random, seq._high = start, encode_ulid(seq._ms, start.to_bytes(10, "big"))[10:20]
    made = [seq.next(clock[0])]
    assert made[-1] == encode_ulid(seq._ms, seq._random.to_bytes(10, "big"))
    for ms in clock:
        before = seq._ms
        ulid = seq.next(ms)
        assert ulid == encode_ulid(seq._ms, seq._random.to_bytes(10, "big"))
        assert seq._ms == ms if ms > before else seq._ms in (before, before + 1)
        made.append(ulid)
    assert all(is_ulid(m) for m in made)
    assert all(a < b for a, b in itertools.pairwise(made))


def test_a_reset_sequence_draws_fresh_entropy() -> None:
    from palyra.core.ids import UlidSequence

    seq = UlidSequence()
    first = seq.next(1_700_000_000_000)
    seq.reset()
    again = seq.next(1_700_000_000_000)
    assert again[:10] == first[:10] and again != first


def test_a_sequence_reads_entropy_once_not_per_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new millisecond costs the time's digits, not a read of the entropy pool (one per
    journal commit on an idle daemon); ids still carry each millisecond and grow."""
    from palyra.core import ids

    reads: list[bytes] = []
    pool = ids._EntropyPool()

    def counted() -> bytes:
        reads.append(chunk := pool.take())
        return chunk

    monkeypatch.setattr(ids._ENTROPY, "take", counted)
    seq = ids.UlidSequence()
    made = [seq.next(1_700_000_000_000 + ms) for ms in range(200) for _ in range(3)]
    assert len(reads) == 1
    assert [m[:10] for m in made[::3]] == [
        encode_ulid(1_700_000_000_000 + ms, bytes(10))[:10] for ms in range(200)]
    assert all(a < b for a, b in itertools.pairwise(made)) and all(is_ulid(m) for m in made)
