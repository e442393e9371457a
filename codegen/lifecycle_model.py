"""Lifecycle YAML (python-statemachine's document format) → plain records.

Only the subset palyra uses is accepted: flat states with ``initial`` / ``final``
and unguarded ``transitions: [{event, target}]``. Anything else is a spec error,
because the pure transition table cannot express it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from codegen.diagnostics import SpecError

_STATE_KEYS = frozenset({"initial", "final", "transitions", "description"})
_TRANSITION_KEYS = frozenset({"event", "target", "description"})


@dataclass(frozen=True)
class Transition:
    """``source --event--> target``."""

    source: str
    event: str
    target: str


@dataclass(frozen=True)
class Lifecycle:
    """One lifecycle document, in declaration order."""

    label: str
    stem: str
    name: str
    description: str
    states: tuple[str, ...]
    initial: tuple[str, ...]
    finals: tuple[str, ...]
    transitions: tuple[Transition, ...]

    @property
    def events(self) -> tuple[str, ...]:
        """Event names in order of first use."""
        return tuple(dict.fromkeys(t.event for t in self.transitions))

    @property
    def enum_name(self) -> str:
        """The proto enum this lifecycle binds to by convention (``Run`` → ``RunState``)."""
        return f"{self.name}State"

    @property
    def enum_prefix(self) -> str:
        """Proto value prefix (``BackgroundTask`` → ``BACKGROUND_TASK_STATE_``)."""
        return f"{snake(self.name).upper()}_STATE_"


def snake(name: str) -> str:
    """``BackgroundTask`` → ``background_task``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def load_lifecycle(path: Path, label: str) -> Lifecycle:
    """Parse one lifecycle YAML; raise ``SpecError`` naming the element on bad shape."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError([f"{label}: not valid YAML: {exc}"]) from exc
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise SpecError([f"{label}: expected a mapping with 'name' and 'states'"])
    name = doc.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
        problems.append(f"{label}: 'name' must be a CamelCase identifier, got {name!r}")
        name = "Invalid"
    states_doc = doc.get("states")
    if not isinstance(states_doc, dict) or not states_doc:
        raise SpecError([*problems, f"{label}: 'states' must be a non-empty mapping"])

    states: list[str] = []
    initial: list[str] = []
    finals: list[str] = []
    transitions: list[Transition] = []
    for state, body in states_doc.items():
        states.append(str(state))
        body = body or {}
        if not isinstance(body, dict):
            problems.append(f"{label}: state {state!r} must be a mapping")
            continue
        for key in sorted(set(body) - _STATE_KEYS):
            problems.append(f"{label}: state {state!r} has unsupported key {key!r}")
        if body.get("initial"):
            initial.append(str(state))
        if body.get("final"):
            finals.append(str(state))
        for item in body.get("transitions") or []:
            transitions.extend(_transition(label, str(state), item, problems))
    if problems:
        raise SpecError(problems)
    return Lifecycle(
        label=label,
        stem=path.stem,
        name=name,
        description=" ".join(str(doc.get("description") or "").split()),
        states=tuple(states),
        initial=tuple(initial),
        finals=tuple(finals),
        transitions=tuple(transitions),
    )


def _transition(label: str, state: str, item: Any, problems: list[str]) -> list[Transition]:
    if not isinstance(item, dict) or "event" not in item or "target" not in item:
        problems.append(f"{label}: state {state!r} has a transition without 'event' and 'target'")
        return []
    extra = sorted(set(item) - _TRANSITION_KEYS)
    if extra:
        # Guards and actions would make the pure table lie: the engine decides, the
        # machine only permits (see the header of spec/lifecycle/run.yaml).
        problems.append(
            f"{label}: transition {state!r} --{item['event']}--> {item['target']!r} "
            f"has unsupported keys {extra} (guards/actions are not allowed)"
        )
        return []
    return [Transition(state, str(item["event"]), str(item["target"]))]
