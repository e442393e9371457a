"""The filter of dedupe keys never calls a key absent that the table may hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.channels import records
from palyra.channels.seen import SeenKeys


def _key(i: int) -> str:
    return records.dedupe_key("webhook", "hooks", f"msg_{i}")


@settings(max_examples=200, deadline=None)
@given(added=st.sets(st.integers(0, 10**6), max_size=200),
       asked=st.sets(st.integers(0, 10**6), max_size=200))
def test_a_key_added_is_never_called_absent(added: set[int], asked: set[int]) -> None:
    seen = SeenKeys(len(added))
    for i in added:
        seen.add(_key(i))
    for i in added | asked:
        if i in added:
            assert not seen.absent(_key(i))


def test_most_new_keys_are_called_absent() -> None:
    seen = SeenKeys(1000)
    for i in range(1000):
        seen.add(_key(i))
    fresh = [_key(i) for i in range(10**6, 10**6 + 2000)]
    assert sum(seen.absent(k) for k in fresh) >= 1990  # about one "maybe" in 2,000


def test_after_another_daemons_writes_it_answers_maybe() -> None:
    foreign = [0]
    seen = SeenKeys(foreign=lambda: foreign[0])
    probe = records.dedupe_key("webhook", "hooks", "never-added")
    assert seen.absent(probe)
    foreign[0] += 1  # another daemon wrote the channels table: its keys are unknown here
    assert not seen.absent(probe)
