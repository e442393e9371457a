"""Structural diff of two versions of one lifecycle (states, events, transitions).

Removals are breaking: a journal or client may hold a state or rely on a
transition that no longer exists. Additions are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from codegen.lifecycle_model import Lifecycle


@dataclass
class LifecycleDiff:
    """What changed in one lifecycle; ``breaking`` lists the reasons it is breaking."""

    name: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    breaking: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing changed."""
        return not (self.added or self.removed or self.changed)


def _edges(lc: Lifecycle) -> set[str]:
    return {f"{t.source} --{t.event}--> {t.target}" for t in lc.transitions}


def diff_lifecycles(stem: str, old: Lifecycle | None, new: Lifecycle | None) -> LifecycleDiff:
    """Compare two versions of ``stem``; either side may be missing."""
    d = LifecycleDiff(stem)
    if old is None and new is not None:
        d.added.append(f"lifecycle `{new.name}`")
        return d
    if new is None and old is not None:
        d.removed.append(f"lifecycle `{old.name}`")
        d.breaking.append(f"lifecycle `{old.name}` removed")
        return d
    assert old is not None and new is not None
    for kind, before, after in (
        ("state", set(old.states), set(new.states)),
        ("event", set(old.events), set(new.events)),
        ("transition", _edges(old), _edges(new)),
    ):
        for item in sorted(after - before):
            d.added.append(f"{kind} `{item}`")
        for item in sorted(before - after):
            d.removed.append(f"{kind} `{item}`")
            d.breaking.append(f"{kind} `{item}` removed")
    if old.initial != new.initial:
        d.changed.append(f"initial state {list(old.initial)} → {list(new.initial)}")
        d.breaking.append("initial state changed")
    kept = set(old.states) & set(new.states)
    for state in sorted(kept):
        was, now = state in old.finals, state in new.finals
        if was != now:
            d.changed.append(f"state `{state}` {'is no longer' if was else 'is now'} final")
            if now:
                # Events that used to be accepted in this state are now refused.
                d.breaking.append(f"state `{state}` became final")
    return d
