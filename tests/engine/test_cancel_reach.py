"""``cancel_reach``: which delegated runs a run's end takes with it, against a plain
recursive walk of random trees (the pure half of the engine's cascade)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from palyra.engine.model.delegation import cancel_reach


def descendants(root: str, children: dict[str, list[str]]) -> set[str]:
    found: set[str] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found and child != root:
                found.add(child)
                stack.append(child)
    return found


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, list[str]], set[str]]:
    """A delegation tree rooted at ``r0`` (parents always older than their children),
    and which of its runs already ended."""
    n = draw(st.integers(1, 30))
    children: dict[str, list[str]] = {}
    for i in range(1, n):
        parent = draw(st.integers(0, i - 1))
        children.setdefault(f"r{parent}", []).append(f"r{i}")
    ended = {f"r{i}" for i in range(1, n) if draw(st.booleans())}
    return children, ended


@given(trees())
def test_every_running_descendant_once_and_after_its_parent(
        tree: tuple[dict[str, list[str]], set[str]]) -> None:
    children, ended = tree
    reach = cancel_reach("r0", children, ended)
    assert len(reach) == len(set(reach))
    assert set(reach) == descendants("r0", children) - ended
    position = {run: i for i, run in enumerate(reach)}
    for parent, kids in children.items():
        for kid in kids:
            if parent in position and kid in position:
                assert position[parent] < position[kid]


def test_below_an_ended_run_in_index_order() -> None:
    tree = {"p": ["a", "b"], "a": ["c"], "b": ["d", "e"]}
    assert cancel_reach("p", tree, {"b"}) == ["a", "c", "d", "e"]
    assert cancel_reach("p", {}, set()) == []


def test_a_cycle_or_a_shared_child_is_walked_once() -> None:
    assert cancel_reach("p", {"p": ["a"], "a": ["p", "b"], "b": ["a"]}, set()) == ["a", "b"]
    assert cancel_reach("p", {"p": ["a", "b"], "a": ["c"], "b": ["c"]}, set()) == ["a", "b", "c"]
