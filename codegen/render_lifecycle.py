"""Source text of ``palyra_gen/lifecycle/``: state tables, ``next_state`` and machines.

The pure table (``TRANSITIONS`` / ``next_state``) is what the engine's core uses;
the python-statemachine class exists for callers that want listeners and a
rehydratable object, built at its first use (module ``__getattr__``) so that a
daemon does not import python-statemachine. Both are emitted from the same parsed YAML so they cannot
disagree. Output is unformatted; ``banner.ruff_format`` tidies it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from codegen.lifecycle_model import Lifecycle

GENERATOR = "codegen/render_lifecycle.py"

# The package __init__ does not depend on any YAML: it holds what all machines share.
_PACKAGE_TEMPLATE = '''\
"""Lifecycle tables and strict state machines generated from ``spec/lifecycle/*.yaml``.

One module per lifecycle ({modules}). This package holds what they share: the
error raised for an event that is not allowed, and the strict machine base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # what the machines subclass, as the type checker sees it
    from statemachine import StateMachine as StrictMachine

__all__ = ("LIFECYCLES", "IllegalTransitionError", "StrictMachine")

#: Module names of the generated lifecycles.
LIFECYCLES: tuple[str, ...] = {lifecycles!r}


class IllegalTransitionError(Exception):
    """Raised when a lifecycle event is not allowed in the current state.

    ``state`` and ``event`` are the YAML names; ``lifecycle`` is the lifecycle name
    (e.g. ``"Run"``). ``code`` matches ``palyra.core.errors.ErrorCode.ILLEGAL_TRANSITION``.
    """

    code: ClassVar[str] = "ILLEGAL_TRANSITION"

    def __init__(self, state: str, event: str, lifecycle: str = "") -> None:
        self.state = str(state)
        self.event = str(event)
        self.lifecycle = lifecycle
        super().__init__(
            f"{{lifecycle or 'lifecycle'}}: event {{self.event!r}} is not allowed in state {{self.state!r}}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps the error picklable despite the custom signature.
        return (type(self), (self.state, self.event, self.lifecycle))


def __getattr__(name: str) -> Any:
    # The machines are built at their first use (tests, callers that want listeners):
    # the engine uses only the pure tables, and python-statemachine costs a daemon
    # about 1 MiB resident at start.
    if name == "StrictMachine":
        globals()[name] = machine = _strict_machine()
        return machine
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")


def _strict_machine() -> type[Any]:
    from statemachine import StateMachine
    from statemachine.exceptions import TransitionNotAllowed

    class StrictMachine(StateMachine):
        """Base of the generated machines: every illegal event raises ``IllegalTransitionError``.

        ``StateMachine`` (not ``StateChart``) already refuses events without a transition
        and lets callback errors propagate. The two hooks below are where both ways of
        sending an event (``machine.send("x")`` and ``machine.x()``) reach the engine; the
        "machine already final" refusal happens in the first, the "no transition" refusal
        in the second. Pinned python-statemachine version; the lifecycle tests cover both.
        """

        _lifecycle_name: ClassVar[str] = ""

        def _put_nonblocking(self, trigger_data: Any, internal: bool = False) -> None:
            try:
                super()._put_nonblocking(trigger_data, internal=internal)
            except TransitionNotAllowed as exc:
                raise self._illegal(exc) from exc

        def _processing_loop(self, caller_future: Any = None) -> Any:
            try:
                return super()._processing_loop(caller_future)
            except TransitionNotAllowed as exc:
                raise self._illegal(exc) from exc

        def _illegal(self, exc: TransitionNotAllowed) -> IllegalTransitionError:
            event = getattr(exc.event, "id", None) or str(exc.event or "")
            return IllegalTransitionError(str(self.current_state_value), event, self._lifecycle_name)

    StrictMachine.__qualname__ = "StrictMachine"
    return StrictMachine
'''

#: Names the machine class defines itself; a state or event may not use them.
MACHINE_MEMBERS = frozenset({"at", "state_id", "_lifecycle_name", "_illegal"})


def render_package(lifecycles: Sequence[Lifecycle]) -> str:
    """``palyra_gen/lifecycle/__init__.py``."""
    stems = tuple(sorted(lc.stem for lc in lifecycles))
    return _PACKAGE_TEMPLATE.format(modules=", ".join(stems), lifecycles=stems)


def _member(name: str) -> str:
    return name.upper()


def render_module(lc: Lifecycle, proto_enum: str) -> str:
    """``palyra_gen/lifecycle/<stem>.py`` for one lifecycle bound to ``proto_enum``."""
    n = lc.name
    sid, ev = f"{n}StateId", f"{n}Event"
    out: list[str] = []
    w = out.append
    desc = textwrap.fill(lc.description or f"The {n} lifecycle.", width=88)
    w(f'"""{n} lifecycle ({lc.label}).\n\n{desc}\n"""\n')
    w("from __future__ import annotations\n\nimport enum\nfrom typing import Any, Final\n\n")
    w(f"from ..palyra.v1 import {proto_enum}\n")
    w("from . import IllegalTransitionError\n\n")
    names = [
        "INITIAL",
        "FINAL_STATES",
        "TRANSITIONS",
        "STATE_TO_PROTO",
        "PROTO_TO_STATE",
        sid,
        ev,
        f"{n}Machine",
        "allowed_events",
        "next_state",
    ]
    w(f"__all__ = {tuple(sorted(names))!r}\n")

    w(
        f'class {sid}(enum.StrEnum):\n    """States of the {n} lifecycle (YAML names), in spec order."""\n'
    )
    for s in lc.states:
        w(f"    {_member(s)} = {s!r}\n")
    w(
        f'class {ev}(enum.StrEnum):\n    """Events of the {n} lifecycle (YAML names), in order of first use."""\n'
    )
    for e in lc.events:
        w(f"    {_member(e)} = {e!r}\n")

    w(f"#: The state a new {n} starts in.\n")
    w(f"INITIAL: Final = {sid}.{_member(lc.initial[0])}\n")
    w("#: States that accept no event.\n")
    finals = ", ".join(f"{sid}.{_member(s)}" for s in lc.finals)
    w(f"FINAL_STATES: Final[frozenset[{sid}]] = frozenset({{{finals}}})\n")
    w("#: (state, event) -> next state; a missing key is an illegal event.\n")
    w(f"TRANSITIONS: Final[dict[tuple[{sid}, {ev}], {sid}]] = {{\n")
    for t in lc.transitions:
        w(f"    ({sid}.{_member(t.source)}, {ev}.{_member(t.event)}): {sid}.{_member(t.target)},\n")
    w("}\n")
    w(f"#: Lifecycle state -> wire enum value ({proto_enum}).\n")
    w(f"STATE_TO_PROTO: Final[dict[{sid}, {proto_enum}]] = {{\n")
    for s in lc.states:
        w(f"    {sid}.{_member(s)}: {proto_enum}.{_member(s)},\n")
    w("}\n")
    w(f"#: Wire enum value -> lifecycle state (no entry for {proto_enum}.UNSPECIFIED).\n")
    w(f"PROTO_TO_STATE: Final[dict[{proto_enum}, {sid}]] = {{\n")
    for s in lc.states:
        w(f"    {proto_enum}.{_member(s)}: {sid}.{_member(s)},\n")
    w("}\n")

    allowed: dict[str, list[str]] = {s: [] for s in lc.states}
    for t in lc.transitions:
        allowed[t.source].append(t.event)
    w(f"_ALLOWED: Final[dict[{sid}, tuple[{ev}, ...]]] = {{\n")
    for s, events in allowed.items():
        items = "".join(f"{ev}.{_member(e)}, " for e in events)
        w(f"    {sid}.{_member(s)}: ({items}),\n")
    w("}\n")
    w("# The same tables keyed by plain names: StrEnum members hash and compare like\n")
    w("# their values, so a lookup by name or by member finds the same entry.\n")
    w(f"_BY_NAME: Final[dict[tuple[str, str], {sid}]] = {{\n")
    w("    (str(s), str(e)): target for (s, e), target in TRANSITIONS.items()\n")
    w("}\n")
    w(f"_ALLOWED_BY_NAME: Final[dict[str, tuple[{ev}, ...]]] = {{\n")
    w("    str(s): events for s, events in _ALLOWED.items()\n")
    w("}\n")

    w(f'''
def next_state(state: {sid} | str, event: {ev} | str) -> {sid}:
    """The state after ``event`` in ``state``. Pure.

    Raises:
        IllegalTransitionError: if ``event`` is not allowed in ``state`` (including
            unknown names and any event in a final state).
    """
    target = _BY_NAME.get((state, event))
    if target is None:
        raise IllegalTransitionError(str(state), str(event), {n!r})
    return target


def allowed_events(state: {sid} | str) -> tuple[{ev}, ...]:
    """Events allowed in ``state``, in spec order (empty for final or unknown states)."""
    return _ALLOWED_BY_NAME.get(state, ())

''')
    w(f'''
def __getattr__(name: str) -> Any:
    # The machine is built at its first use (see the package's ``__getattr__``).
    if name == "{n}Machine":
        globals()[name] = machine = _machine()
        return machine
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")


def _machine() -> type[Any]:
    from statemachine import State

    from . import StrictMachine

''')
    w(textwrap.indent(_render_machine(lc, sid), "    "))
    w(f"\n    {n}Machine.__qualname__ = {n + 'Machine'!r}\n    return {n}Machine\n")
    return "".join(out)


def _render_machine(lc: Lifecycle, sid: str) -> str:
    n = lc.name
    out = [
        f"class {n}Machine(StrictMachine):\n",
        f'    """Strict python-statemachine machine for the {n} lifecycle.\n\n'
        f"    Illegal events raise ``IllegalTransitionError``; errors in callbacks propagate.\n"
        f"    Rehydrate from the journal with ``{n}Machine.at(state)`` (enters ``state``\n"
        f'    directly, running only its enter callbacks).\n    """\n\n',
        f"    _lifecycle_name = {n!r}\n\n",
    ]
    for s in lc.states:
        flags = ", initial=True" if s in lc.initial else ""
        flags += ", final=True" if s in lc.finals else ""
        out.append(f"    {s} = State(value={sid}.{_member(s)}{flags})\n")
    out.append("\n")
    for e in lc.events:
        legs = " | ".join(f"{t.source}.to({t.target})" for t in lc.transitions if t.event == e)
        out.append(f"    {e} = {legs}\n")
    out.append(f'''
    @classmethod
    def at(cls, state: {sid} | str, **kwargs: Any) -> {n}Machine:
        """A machine already in ``state`` (for rehydration from the journal)."""
        return cls(start_value={sid}(state), **kwargs)

    @property
    def state_id(self) -> {sid}:
        """The current state."""
        return {sid}(self.current_state_value)
''')
    return "".join(out)
