"""Spec consistency rules (CONVENTIONS item 3: the generator checks itself).

Every rule reports the file and the element so the spec author can fix it without
reading generator code. All problems are collected and reported together.
python-statemachine's own ``InvalidDefinition`` checks run last, as a backstop:
its messages do not name the spec file.
"""

from __future__ import annotations

import keyword
import re
from collections import Counter, deque
from collections.abc import Iterable

from codegen.descriptors import ProtoSpec
from codegen.layout import SpecLayout
from codegen.lifecycle_model import Lifecycle, snake

ERROR_CODE_ENUM = "palyra.v1.ErrorCode"
_IDENT = re.compile(r"[a-z][a-z0-9_]*")
_PATH_VAR = re.compile(r"\{([^}=]+)(?:=[^}]*)?\}")


def _reserved_names() -> frozenset[str]:
    # Names python-statemachine already uses on a machine instance; a state or
    # event with such a name would silently shadow library behaviour.
    from statemachine import StateMachine

    return frozenset(dir(StateMachine)) | frozenset(keyword.kwlist)


def check_lifecycle(lc: Lifecycle) -> list[str]:
    """Graph and naming rules for one lifecycle; returns problem messages."""
    where = lc.label
    problems: list[str] = []
    states = set(lc.states)
    if snake(lc.name) != lc.stem:
        problems.append(
            f"{where}: name {lc.name!r} does not match the file name (expected {snake(lc.name)}.yaml)"
        )
    reserved = _reserved_names()
    for kind, names in (("state", lc.states), ("event", lc.events)):
        for name in names:
            if not _IDENT.fullmatch(name) or name in reserved:
                problems.append(f"{where}: {kind} {name!r} is not a usable snake_case identifier")
    for name in sorted(states & set(lc.events)):
        problems.append(f"{where}: {name!r} is both a state and an event")
    if len(lc.initial) != 1:
        problems.append(f"{where}: expected exactly one initial state, found {list(lc.initial)}")
    for t in lc.transitions:
        if t.target not in states:
            problems.append(
                f"{where}: transition {t.source!r} --{t.event}--> {t.target!r} targets an undefined state"
            )
    for (source, event), n in sorted(Counter((t.source, t.event) for t in lc.transitions).items()):
        if n > 1:
            problems.append(
                f"{where}: state {source!r} has {n} transitions on event {event!r} (must be deterministic)"
            )
    problems += _graph_problems(lc)
    return problems


def _graph_problems(lc: Lifecycle) -> list[str]:
    where = lc.label
    problems: list[str] = []
    outgoing: dict[str, list[str]] = {s: [] for s in lc.states}
    incoming: dict[str, list[str]] = {s: [] for s in lc.states}
    for t in lc.transitions:
        if t.target in outgoing:
            outgoing[t.source].append(t.target)
            incoming[t.target].append(t.source)
    for state in lc.finals:
        for t in lc.transitions:
            if t.source == state:
                problems.append(
                    f"{where}: final state {state!r} has an outgoing transition --{t.event}--> {t.target!r}"
                )
    for state in lc.states:
        if state not in lc.finals and not outgoing[state]:
            problems.append(
                f"{where}: state {state!r} is not final and has no way out (trap state)"
            )
    if len(lc.initial) == 1:
        initial = lc.initial[0]
        reachable = _closure([initial], outgoing)
        for state in lc.states:
            if state not in reachable:
                problems.append(
                    f"{where}: state {state!r} is unreachable from initial state {initial!r}"
                )
    can_finish = _closure(lc.finals, incoming)
    for state in lc.states:
        if state not in can_finish and outgoing[state]:
            problems.append(f"{where}: state {state!r} cannot reach any final state")
    return problems


def _closure(start: Iterable[str], edges: dict[str, list[str]]) -> set[str]:
    seen = set(start)
    queue = deque(seen)
    while queue:
        for nxt in edges[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def check_lifecycle_enum(lc: Lifecycle, proto: ProtoSpec, layout: SpecLayout) -> list[str]:
    """Lifecycle states ↔ ``<Name>State`` proto enum values, both ways."""
    enum = next(
        (e for name, e in proto.enums.items() if name.rsplit(".", 1)[-1] == lc.enum_name), None
    )
    if enum is None:
        return [f"{lc.label}: no proto enum {lc.enum_name} for lifecycle {lc.name!r}"]
    problems: list[str] = []
    proto_where = layout.proto_label(enum.file)
    values = {v.name for v in enum.values}
    for state in lc.states:
        if lc.enum_prefix + state.upper() not in values:
            problems.append(
                f"{lc.label}: state {state!r} has no value {lc.enum_prefix}{state.upper()} in enum {enum.full_name}"
            )
    expected = {lc.enum_prefix + s.upper() for s in lc.states} | {lc.enum_prefix + "UNSPECIFIED"}
    for value in enum.values:
        if value.name not in expected:
            problems.append(
                f"{proto_where}: enum value {value.name} of {enum.full_name} has no state in {lc.label}"
            )
    return problems


def check_statemachine_accepts(lc: Lifecycle, layout: SpecLayout) -> list[str]:
    """Backstop: python-statemachine must build the document too (InvalidDefinition)."""
    import statemachine.io

    try:
        statemachine.io.load(str(layout.lifecycle_dir / f"{lc.stem}.yaml"))
    except Exception as exc:  # any rejection is a spec problem; show the library's words
        return [f"{lc.label}: python-statemachine rejected the definition: {exc}"]
    return []


def check_rpcs(proto: ProtoSpec, layout: SpecLayout) -> list[str]:
    """Every RPC has an HTTP mapping whose path variables exist; (method, path) is unique."""
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for rpc in proto.rpcs:
        where = f"{layout.proto_label(rpc.file)}: rpc {rpc.service}.{rpc.name}"
        if not rpc.bindings:
            problems.append(f"{where} has no HTTP mapping (option (google.api.http))")
        for b in rpc.bindings:
            for var in _PATH_VAR.findall(b.path):
                if var.split(".")[0] not in rpc.request_fields:
                    problems.append(
                        f"{where}: path variable {{{var}}} is not a field of {rpc.request_type}"
                    )
            key = (b.http_method, b.path)
            if key in seen:
                problems.append(
                    f"{where}: {b.http_method} {b.path} is already mapped by {seen[key]}"
                )
            seen.setdefault(key, f"{rpc.service}.{rpc.name}")
    return problems


def check_error_codes(proto: ProtoSpec, layout: SpecLayout) -> list[str]:
    """``palyra.v1.ErrorCode`` exists and every value carries ``(error_mapping)``."""
    enum = proto.enums.get(ERROR_CODE_ENUM)
    if enum is None:
        return [f"spec/proto: enum {ERROR_CODE_ENUM} is missing"]
    where = layout.proto_label(enum.file)
    return [
        f"{where}: ErrorCode value {v.name} has no (palyra.v1.error_mapping) option"
        for v in enum.values
        if v.error_mapping is None
    ]
