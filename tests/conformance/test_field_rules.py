"""Every ``(palyra.v1.field_rule)`` of the spec is refused on every client's transport.

For each unary RPC a client speaks, each rule reachable from its request message
(top level or inside a message field) is broken alone: the rest of the request is
built to satisfy every other rule, and the rule's field is left unset (``required``),
given a string its pattern refuses (``pattern``; Python's ``re`` is the oracle of the
spec's pattern), or a number under its ``minimum``. The daemon must answer
``INVALID_ARGUMENT`` naming the field's path, whatever the handler behind it checks
or forgets, so a rule added to the spec is held here with no test written for it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from typing import Any

import betterproto2
import pytest
from palyra_gen.field_rules import RULES, FieldRule
from palyra_gen.http_routes import ROUTES
from palyra_gen.palyra import v1
from palyra_gen.services import RPCS

from palyra.core.protojson import encode_message
from palyra.testing.spawn import DaemonProcess

from .clients import CallFailed
from .conftest import OpenClient, daemon_env

pytestmark = [pytest.mark.conformance, pytest.mark.slow]

# The services each test client speaks (the TypeScript one loads four).
SPOKEN = {
    "grpc": {"GatewayService", "ApprovalsService", "MemoryService", "JournalService",
             "ChannelsService", "UsageService"},
    "http": {r.service.rsplit(".", 1)[-1] for r in RPCS},
    "ts": {"GatewayService", "ApprovalsService", "JournalService", "UsageService"},
}
# Strings tried, in order, as a rule's satisfying value and as its breaking one.
GOOD = ("01J00000000000000000000000", "2026-11-28", "user:alice", "x")
BAD = ("not a valid value !", " ", "admin:x", "28/11/2026")
Path = tuple[str, ...]
PATH_PARAMS = {(r.service, r.method): re.findall(r"{(\w+)", r.path) for r in ROUTES}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One LMDB daemon: the rules are checked before any storage is reached."""
    with DaemonProcess(tmp_path_factory.mktemp("rules") / "data", env=daemon_env()) as proc:
        yield proc


def _rule(cls: type, name: str) -> FieldRule | None:
    rule = RULES.get(f"palyra.v1.{cls.__name__}.{name}")
    if rule is None or not (rule.required or rule.pattern or rule.minimum is not None):
        return None
    return rule


def _rules_below(cls: type, path: Path = ()) -> Iterator[tuple[Path, FieldRule, str]]:
    """Every checked rule reachable from ``cls``: its field path, the rule, and its
    ``Message.field`` name in the spec."""
    meta = cls._betterproto  # type: ignore[attr-defined]
    for name in meta.sorted_field_names:
        rule = _rule(cls, name)
        if rule is not None:
            yield (*path, name), rule, f"{cls.__name__}.{name}"
        field = meta.meta_by_field_name[name]
        if field.proto_type == "message" and field.map_meta is None and len(path) < 3:
            child = meta.cls_by_field[name]
            if hasattr(child, "_betterproto"):
                yield from _rules_below(child, (*path, name))


def _good(cls: type) -> betterproto2.Message:
    """An instance of ``cls`` whose every checked field satisfies its rule."""
    meta = cls._betterproto  # type: ignore[attr-defined]
    message: betterproto2.Message = cls()
    for name in meta.sorted_field_names:
        rule = _rule(cls, name)
        if rule is None:
            continue
        field = meta.meta_by_field_name[name]
        value = _good_value(cls, name, field, rule)
        setattr(message, name, [value] if field.repeated else value)
    return message


def _good_value(cls: type, name: str, field: Any, rule: FieldRule) -> Any:
    kind = field.proto_type
    if kind == "message":
        return _good(cls._betterproto.cls_by_field[name])  # type: ignore[attr-defined]
    if kind == "string":
        return next(s for s in GOOD if not rule.pattern or re.search(rule.pattern, s))
    if kind == "bytes":
        return b"x"
    if kind == "enum":
        members = cls._betterproto.cls_by_field[name]  # type: ignore[attr-defined]
        return next(m for m in members if isinstance(m, enum.Enum) and m.value)
    if kind == "bool":
        return True
    return max(1, int(rule.minimum or 0) + 1)


def _broken(cls: type, path: Path, rule: FieldRule) -> betterproto2.Message:
    """A good ``cls`` request with the rule at ``path`` broken."""
    message = _good(cls)
    owner: Any = message
    for name in path[:-1]:  # the messages on the way, made (good) where unset
        meta = owner._betterproto
        inner = getattr(owner, name)
        if not inner:
            made = _good(meta.cls_by_field[name])
            inner = [made] if meta.meta_by_field_name[name].repeated else made
            setattr(owner, name, inner)
        owner = inner[0] if isinstance(inner, list) else inner
    name = path[-1]
    field = owner._betterproto.meta_by_field_name[name]
    if rule.pattern and field.proto_type == "string":
        bad = next(s for s in BAD if not re.search(rule.pattern, s))
        setattr(owner, name, [bad] if field.repeated else bad)
    elif rule.minimum is not None:
        setattr(owner, name, int(rule.minimum) - 1)
    else:  # required: left unset
        setattr(owner, name, type(owner)().__getattribute__(name))
    return message


Case = tuple[str, str, str, str, dict[str, Any]]
"""(service, method, the broken field's path, its ``Message.field``, the request)"""


def _cases(kind: str) -> Iterator[Case]:
    for rpc in RPCS:
        service = rpc.service.rsplit(".", 1)[-1]
        streamed_out = rpc.server_streaming and not rpc.client_streaming
        if streamed_out or service not in SPOKEN[kind]:
            continue  # server streams: their requests' rules are those of unary ones
        cls = getattr(v1, rpc.request_type.rsplit(".", 1)[-1])
        for path, rule, name in _rules_below(cls):
            message = _broken(cls, path, rule)
            for param in PATH_PARAMS.get((rpc.service, rpc.method), ()):
                if not getattr(message, param):  # the HTTP route needs its path filled
                    setattr(message, param, GOOD[0])
            yield service, rpc.method, ".".join(path), name, encode_message(message)


def test_every_rule_is_broken_by_some_case() -> None:
    """No checked rule of the spec goes untested for want of a client that speaks it."""
    checked = {key.removeprefix("palyra.v1.") for key, rule in RULES.items()
               if rule.required or rule.pattern or rule.minimum is not None}
    reached = {case[3] for kind in SPOKEN for case in _cases(kind)}
    assert checked <= reached, sorted(checked - reached)


async def test_each_broken_rule_is_invalid_argument_naming_its_field(
        kind: str, connect: OpenClient) -> None:
    client = await connect(kind, principal="admin:rules")
    cases = list(_cases(kind))
    assert cases, kind
    wrong: list[str] = []
    for service, method, path, _name, request in cases:
        try:
            if method == "RunStream":  # its first message: the check runs per message
                await client.run_stream(request, limit_s=10)
            else:
                await client.call(service, method, request)
        except CallFailed as failed:
            named = failed.message.replace("[0].", ".")  # the first item of a list
            if failed.code != "INVALID_ARGUMENT" or path not in named:
                wrong.append(f"{method} {path}: {failed.code} {failed.message!r}")
            continue
        wrong.append(f"{method} {path}: accepted {request!r}")
    assert not wrong, "\n".join(wrong)
