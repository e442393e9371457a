"""The key filter never calls a key absent that it was told of, and calls most others absent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.core.key_filter import FALSE_MAYBE, MIN_KEYS, KeyFilter


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, 300), added=st.sets(st.text(max_size=30), max_size=300))
def test_a_key_told_of_is_never_called_absent(count: int, added: set[str]) -> None:
    keys = KeyFilter(count)
    for key in added:
        keys.add(key)
    assert not any(keys.absent(key) for key in added)


def test_most_keys_never_told_of_are_called_absent() -> None:
    keys = KeyFilter(MIN_KEYS // 2)  # filled to the capacity it was sized for
    for i in range(MIN_KEYS):
        keys.add(f"key:{i}")
    fresh = [f"key:{i}" for i in range(MIN_KEYS, MIN_KEYS + 20_000)]
    maybe = sum(not keys.absent(key) for key in fresh)
    assert maybe <= 5 * FALSE_MAYBE * len(fresh), maybe  # about 10 expected


def test_past_its_capacity_every_key_is_maybe() -> None:
    keys = KeyFilter()
    for i in range(MIN_KEYS):
        keys.add(str(i))
    assert keys.absent("never told")
    keys.add(str(MIN_KEYS))  # one more than it was sized for: it may be saturated
    assert not keys.absent("never told")
