"""The claimers' line: kept as one queue per set of kinds, it still answers first come
first served, as the single queue it replaced did."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from palyra.tasks.line import Claimer, ClaimLine

_KINDS: list[frozenset[str] | None] = [None, frozenset({"a"}), frozenset({"b"}),
                                       frozenset({"a", "b"})]


class _Answer:
    def __init__(self) -> None:
        self.given_up = False

    def done(self) -> bool:
        return self.given_up

    def set_result(self, result: object, /) -> None:
        raise AssertionError("not answered here")

    def set_exception(self, exception: BaseException, /) -> None:
        raise AssertionError("not answered here")


def _first_in_single_line(line: list[Claimer], kind: str | None,
                          skip: set[frozenset[str] | None]) -> Claimer | None:
    for c in line:
        if c.claimed.done() or c.kinds in skip:
            continue
        if kind is None or c.kinds is None or kind in c.kinds:
            return c
    return None


_ops = st.lists(st.tuples(st.sampled_from(["join", "give_up", "first", "take", "back"]),
                          st.integers(0, 3), st.sampled_from([None, "a", "b", "c"]),
                          st.sets(st.integers(0, 3), max_size=2)), max_size=60)


@given(_ops)
def test_first_is_the_single_lines_first(ops: list[tuple[str, int, str | None, set[int]]]
                                         ) -> None:
    line = ClaimLine()
    single: list[Claimer] = []  # the reference: one list in arrival order
    taken: list[Claimer] = []
    for op, k, kind, skip_i in ops:
        skip = {_KINDS[i] for i in skip_i}
        if op == "join":
            c = Claimer("w", _KINDS[k], 1000, _Answer())  # type: ignore[arg-type]
            line.append(c)
            single.append(c)
        elif op == "give_up" and single:
            single[k % len(single)].claimed.given_up = True  # type: ignore[attr-defined]
        elif op in ("first", "take"):
            got = line.first(kind, skip)
            assert got is _first_in_single_line(single, kind, skip)
            if op == "take" and got is not None:
                line.take(got)
                single.remove(got)
                taken.append(got)
        elif op == "back" and taken:
            c = taken.pop()  # the last taken goes back to its place
            line.put_back(c)
            single.append(c)
            single.sort(key=lambda x: x.arrived)
        assert bool(line) >= any(not c.claimed.done() for c in single)


def test_remove_drops_only_that_claimer() -> None:
    line = ClaimLine()
    answers = [_Answer() for _ in range(3)]
    claimers = [Claimer("w", frozenset({"a"}), 1000, a)  # type: ignore[arg-type]
                for a in answers]
    for c in claimers:
        line.append(c)
    line.remove(answers[0])  # type: ignore[arg-type]
    assert line.first("a") is claimers[1]
    line.remove(answers[1])  # type: ignore[arg-type]
    line.remove(answers[2])  # type: ignore[arg-type]
    assert not line
    assert line.first() is None
