"""Generated lifecycle machines against an independent reading of ``spec/lifecycle/*.yaml``.

The oracle below parses the YAML with PyYAML directly; it deliberately does not use
``TRANSITIONS`` or anything else from ``palyra_gen`` (or ``codegen``), so a generator
bug cannot hide behind a table it also produced.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from palyra_gen.lifecycle import IllegalTransitionError
from palyra_gen.palyra import v1

from palyra.core.errors import ErrorCode, IllegalTransition, PalyraError
from palyra.engine.model import lifecycle as engine_lifecycle

REPO_ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE_DIR = REPO_ROOT / "spec" / "lifecycle"
STEMS = sorted(p.stem for p in LIFECYCLE_DIR.glob("*.yaml"))


@dataclass(frozen=True)
class Oracle:
    """What the YAML says, read independently of the generator."""

    name: str
    states: tuple[str, ...]
    initial: str
    finals: frozenset[str]
    table: dict[tuple[str, str], str]

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(sorted({e for _, e in self.table}))

    def allowed(self, state: str) -> list[str]:
        return sorted(e for (s, e) in self.table if s == state)


def read_oracle(stem: str) -> Oracle:
    doc = yaml.safe_load((LIFECYCLE_DIR / f"{stem}.yaml").read_text())
    states = tuple(doc["states"])
    table = {
        (state, t["event"]): t["target"]
        for state, body in doc["states"].items()
        for t in (body or {}).get("transitions", [])
    }
    (initial,) = [s for s, b in doc["states"].items() if (b or {}).get("initial")]
    finals = frozenset(s for s, b in doc["states"].items() if (b or {}).get("final"))
    return Oracle(doc["name"], states, initial, finals, table)


def generated(stem: str) -> ModuleType:
    return importlib.import_module(f"palyra_gen.lifecycle.{stem}")


def machine_class(stem: str) -> Any:
    return getattr(generated(stem), f"{read_oracle(stem).name}Machine")


def fire(machine: Any, event: str, via_send: bool) -> None:
    if via_send:
        machine.send(event)
    else:
        getattr(machine, event)()


def check_mapped(exc: IllegalTransitionError, state: str, event: str) -> None:
    """The engine's one lifecycle wrapper turns the generated error into IllegalTransition."""
    assert exc.code == "ILLEGAL_TRANSITION"
    mapped = engine_lifecycle.as_illegal_transition(exc)
    assert isinstance(mapped, IllegalTransition)
    assert isinstance(mapped, PalyraError)
    assert mapped.code is ErrorCode.ILLEGAL_TRANSITION
    assert mapped.details["state"] == state
    assert mapped.details["event"] == event


def make_conformance(stem: str) -> type[RuleBasedStateMachine]:
    oracle = read_oracle(stem)
    module = generated(stem)
    cls = machine_class(stem)
    # Random unknown event names; names of machine attributes are left out because
    # python-statemachine resolves `send(name)` through getattr (not our contract).
    unknown_names = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True).filter(
        lambda e: e not in oracle.events and not hasattr(cls, e)
    )

    class Conformance(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.machine = cls()
            self.state = oracle.initial

        @precondition(lambda self: self.state not in oracle.finals)
        @rule(data=st.data())
        def legal_event(self, data: st.DataObject) -> None:
            event = data.draw(st.sampled_from(oracle.allowed(self.state)), label="event")
            target = oracle.table[(self.state, event)]
            assert module.next_state(self.state, event) == target
            fire(self.machine, event, data.draw(st.booleans(), label="via_send"))
            self.state = target

        @rule(data=st.data())
        def illegal_event(self, data: st.DataObject) -> None:
            known_illegal = [e for e in oracle.events if (self.state, e) not in oracle.table]
            known = st.sampled_from(known_illegal) if known_illegal else unknown_names
            # Spec events most of the time: they are the ones a buggy table would accept.
            event = data.draw(st.one_of(known, known, known, unknown_names), label="event")
            via_send = event not in oracle.events or data.draw(st.booleans(), label="via_send")
            with pytest.raises(IllegalTransitionError) as info:
                fire(self.machine, event, via_send)
            assert (info.value.state, info.value.event) == (self.state, event)
            assert info.value.lifecycle == oracle.name
            check_mapped(info.value, self.state, event)
            with pytest.raises(IllegalTransitionError):
                module.next_state(self.state, event)

        @precondition(lambda self: self.state in oracle.finals)
        @rule()
        def final_accepts_nothing(self) -> None:
            for event in oracle.events:
                with pytest.raises(IllegalTransitionError):
                    fire(self.machine, event, via_send=False)
            assert module.allowed_events(self.state) == ()

        @rule()
        def rehydrate(self) -> None:
            # As the engine does after a restart: a fresh machine at the journaled state.
            self.machine = cls.at(self.state)

        @rule(state=st.sampled_from(oracle.states))
        def rehydrate_anywhere(self, state: str) -> None:
            # Jumping to any state keeps runs from piling up in final states (every
            # state offers `fail`/`cancel`), so rarely reached states get explored too.
            self.machine = cls.at(state)
            self.state = state

        @invariant()
        def machine_matches_oracle(self) -> None:
            assert self.machine.state_id == self.state
            assert set(module.allowed_events(self.state)) == set(oracle.allowed(self.state))
            assert module.PROTO_TO_STATE[module.STATE_TO_PROTO[self.state]] == self.state

    Conformance.__name__ = f"{oracle.name}Conformance"
    return Conformance


for _stem in STEMS:
    _cls = make_conformance(_stem)
    globals()[f"Test{_cls.__name__}"] = _cls.TestCase


@pytest.mark.parametrize("stem", STEMS)
def test_tables_equal_oracle(stem: str) -> None:
    oracle, module = read_oracle(stem), generated(stem)
    assert {(str(s), str(e)): str(t) for (s, e), t in module.TRANSITIONS.items()} == oracle.table
    assert oracle.initial == module.INITIAL
    assert {str(s) for s in module.FINAL_STATES} == oracle.finals
    assert [str(s) for s in getattr(module, f"{oracle.name}StateId")] == list(oracle.states)
    assert {str(e) for e in getattr(module, f"{oracle.name}Event")} == set(oracle.events)


@pytest.mark.parametrize("stem", STEMS)
def test_every_state_event_pair_exhaustively(stem: str) -> None:
    oracle, cls = read_oracle(stem), machine_class(stem)
    for state in oracle.states:
        for event in oracle.events:
            machine = cls.at(state)
            if (state, event) in oracle.table:
                machine.send(event)
                assert machine.state_id == oracle.table[(state, event)]
            else:
                with pytest.raises(IllegalTransitionError):
                    machine.send(event)
                assert machine.state_id == state


@pytest.mark.parametrize("stem", STEMS)
def test_proto_mapping_follows_naming_convention(stem: str) -> None:
    oracle, module = read_oracle(stem), generated(stem)
    proto_enum = getattr(v1, f"{oracle.name}State")
    assert {str(k) for k in module.STATE_TO_PROTO} == set(oracle.states)
    for state, value in module.STATE_TO_PROTO.items():
        assert value is proto_enum[state.upper()]
    assert set(proto_enum) - set(module.PROTO_TO_STATE) == {proto_enum.UNSPECIFIED}


@pytest.mark.parametrize("stem", STEMS)
def test_mermaid_diagram_lists_every_transition(stem: str) -> None:
    oracle = read_oracle(stem)
    text = (REPO_ROOT / "generated" / "docs" / f"{stem}.mmd").read_text()
    edges = {(m[0], m[2]): m[1] for m in re.findall(r"^\s+(\w+) --> (\w+) : (\w+)$", text, re.M)}
    assert edges == oracle.table
    assert f"[*] --> {oracle.initial}" in text


def test_callback_errors_propagate() -> None:
    # Errors in callbacks must reach the caller, not turn into error.execution events.
    oracle = read_oracle("run")
    event = oracle.allowed(oracle.initial)[0]
    target = oracle.table[(oracle.initial, event)]

    class Boom:
        def __init__(self) -> None:
            setattr(self, f"on_enter_{target}", self.explode)

        def explode(self) -> None:
            raise RuntimeError("boom")

    machine = machine_class("run")(listeners=[Boom()])
    with pytest.raises(RuntimeError, match="boom"):
        machine.send(event)


def test_engine_wrappers_raise_illegal_transition() -> None:
    assert engine_lifecycle.run_next("pending", "accept") == "accepted"
    assert engine_lifecycle.approval_next("pending", "approve") == "approved"
    for call, state in (
        (engine_lifecycle.run_next, "done"),
        (engine_lifecycle.approval_next, "denied"),
    ):
        with pytest.raises(IllegalTransition) as info:
            call(state, "no_such_event")
        assert info.value.code is ErrorCode.ILLEGAL_TRANSITION
        assert isinstance(info.value.__cause__, IllegalTransitionError)
    assert not engine_lifecycle.run_can("done", "accept")
    assert engine_lifecycle.run_can("in_progress", "complete")


def test_machine_errors_map_to_illegal_transition() -> None:
    machine = machine_class("run").at("done")
    with pytest.raises(IllegalTransitionError) as info:
        machine.send("accept")
    mapped = engine_lifecycle.as_illegal_transition(info.value)
    assert mapped.code is ErrorCode.ILLEGAL_TRANSITION
    assert mapped.details == {"lifecycle": "Run", "state": "done", "event": "accept"}


def test_illegal_transition_error_pickles() -> None:
    import pickle

    exc = pickle.loads(pickle.dumps(IllegalTransitionError("done", "accept", "Run")))
    assert (exc.state, exc.event, exc.lifecycle, exc.code) == (
        "done",
        "accept",
        "Run",
        "ILLEGAL_TRANSITION",
    )


def test_run_state_proto_by_name() -> None:
    """Every run state's wire value, looked up by the state's plain name, is the
    spec's (the RunState member named alike); an unknown name is refused."""
    for state in engine_lifecycle.RunStateId:
        got = engine_lifecycle.run_state_proto(str(state.value))
        assert got is v1.RunState[state.name]
    with pytest.raises(ValueError, match="not_a_state"):
        engine_lifecycle.run_state_proto("not_a_state")
