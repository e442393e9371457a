"""Strict proto3-JSON decoding of HTTP requests, and the spec-derived route table."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from palyra_gen.http_routes import ROUTES
from palyra_gen.palyra import v1

from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.http._decode import decode_request
from palyra.transport.http._json import normalize_message
from palyra.transport.http._routes import RouteTable

TABLE = RouteTable()


def _route(method: str, path: str) -> tuple[Any, dict[str, str]]:
    found = TABLE.match(method, path)
    assert found is not None, (method, path)
    return found


def test_every_spec_route_is_served() -> None:
    assert len(TABLE.routes) == len(ROUTES)
    served = {(r.http_method, r.template) for r in TABLE.routes}
    assert served == {(r.http_method, r.path) for r in ROUTES}


@pytest.mark.parametrize(
    ("method", "path", "rpc", "params"),
    [
        ("GET", "/healthz", "GetHealth", {}),
        ("POST", "/v1/runs", "CreateRun", {}),
        ("GET", "/v1/runs/01ABC", "GetRun", {"run_id": "01ABC"}),
        ("POST", "/v1/runs/01ABC:abort", "AbortRun", {"run_id": "01ABC"}),
        ("GET", "/v1/runs/01ABC/events", "WatchRun", {"run_id": "01ABC"}),
        ("POST", "/v1/approvals/A1:decide", "DecideApproval", {"approval_id": "A1"}),
        ("GET", "/v1/approvals:export", "ExportApprovals", {}),
        ("GET", "/v1/approvals/A1", "GetApproval", {"approval_id": "A1"}),
        ("POST", "/v1/sessions:resolve", "ResolveSession", {}),
        ("GET", "/v1/journal/head", "GetJournalHead", {}),
    ],
)
def test_routes_match(method: str, path: str, rpc: str, params: dict[str, str]) -> None:
    route, found = _route(method, path)
    assert (route.rpc, found) == (rpc, params)


def _outcome(find: Any, method: str, path: str) -> Any:
    try:
        found = find(method, path)
    except LookupError:
        return "405"
    return None if found is None else (found[0].rpc, found[1])


def test_a_literal_paths_look_up_agrees_with_the_scan() -> None:
    """Every literal path, templated path and near miss, in every method: the look-up by
    (method, literal path) finds what trying each route's pattern in order finds."""
    paths = {"/v1/nothing", "/v1/runs\n", "/v1/runs/", "/v1/runs%3Astream"}
    for route in TABLE.routes:
        path = route.template
        for name in route.path_params:
            path = path.replace("{" + name + "}", "01ABC")
        paths |= {path, path + "/x", path.upper()}
    methods = {r.http_method for r in TABLE.routes} | {"OPTIONS", "PUT"}
    for path in sorted(paths):
        for method in sorted(methods):
            assert _outcome(TABLE.match, method, path) == _outcome(TABLE.scan, method, path), \
                (method, path)


def test_wrong_method_and_unknown_path() -> None:
    with pytest.raises(LookupError):
        TABLE.match("DELETE", "/v1/runs")
    assert TABLE.match("GET", "/v1/nothing") is None


def _decode(method: str, path: str, *, query: list[tuple[str, str]] | None = None,
            body: bytes = b"", headers: dict[str, str] | None = None) -> Any:
    route, params = _route(method, path)
    return decode_request(route, params, query or [], body, headers or {})


def test_body_and_path_merge() -> None:
    message = _decode("POST", "/v1/approvals/A1:decide",
                      body=b'{"decision": "APPROVE", "scope": "session", "ttlSeconds": "30"}')
    assert message == v1.DecideApprovalRequest(
        approval_id="A1", decision=v1.ApprovalDecision.APPROVE,
        scope=v1.ApprovalScope.SESSION, ttl_seconds=30)
    with pytest.raises(PalyraError) as info:
        _decode("POST", "/v1/approvals/A1:decide", body=b'{"approval_id": "B2"}')
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_query_params_are_typed() -> None:
    message = _decode("GET", "/v1/runs/R/tape", query=[("after_seq", "4"), ("limit", "10")])
    assert message == v1.ListRunTapeRequest(run_id="R", after_seq=4, limit=10)
    message = _decode("GET", "/v1/approvals", query=[("state", "pending")])
    assert message == v1.ListApprovalsRequest(state=v1.ApprovalState.PENDING)


def test_cursor_defaults_to_the_start_and_honours_last_event_id() -> None:
    assert _decode("GET", "/v1/runs/R/tape").after_seq == -1
    assert _decode("GET", "/v1/runs/R/events").after_seq == -1
    resumed = _decode("GET", "/v1/runs/R/events", query=[("after_seq", "2")],
                      headers={"last-event-id": "7"})
    assert resumed.after_seq == 7  # the reconnecting EventSource's cursor wins


@pytest.mark.parametrize(
    ("method", "path", "query", "body"),
    [
        ("POST", "/v1/runs", [], b"{not json"),
        ("POST", "/v1/runs", [], b"[1, 2]"),
        ("POST", "/v1/runs", [], b'{"bogus": 1}'),
        ("POST", "/v1/runs", [], b'{"input": {"text": 5}}'),
        ("POST", "/v1/runs", [], b'{"complete": "yes"}'),
        ("POST", "/v1/runs", [], b'{"v": -1}'),
        ("POST", "/v1/runs", [], b'{"run_id": "a", "runId": "a"}'),
        ("POST", "/v1/runs", [("x", "1")], b"{}"),
        ("GET", "/v1/runs/R/tape", [("limit", "many")], b""),
        ("GET", "/v1/runs/R/tape", [("nope", "1")], b""),
        ("GET", "/v1/approvals", [("state", "maybe")], b""),
        ("GET", "/v1/runs/R", [], b'{"run_id": "R"}'),
        ("GET", "/v1/runs/R/events", [], b""),
    ],
)
def test_malformed_requests_are_refused(
    method: str, path: str, query: list[tuple[str, str]], body: bytes
) -> None:
    headers = {"last-event-id": "x"} if path.endswith("/events") else {}
    with pytest.raises(PalyraError) as info:
        _decode(method, path, query=query, body=body, headers=headers)
    assert info.value.code is ErrorCode.MALFORMED_REQUEST


def test_oneof_takes_one_member() -> None:
    with pytest.raises(PalyraError, match="only one of oneof"):
        normalize_message(v1.TapeEvent, {"status": {}, "modelToken": {}})


_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                          st.floats(allow_nan=False), st.text(max_size=8))
_json = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=10)


@given(st.dictionaries(st.sampled_from(["input", "complete", "wait", "runId", "session_key", "v",
                                        "agentId", "x"]), _json, max_size=4))
def test_any_json_either_decodes_or_is_malformed(data: dict[str, Any]) -> None:
    """No JSON body makes the decoder fail in any other way than MALFORMED_REQUEST."""
    try:
        message = v1.CreateRunRequest.from_dict(normalize_message(v1.CreateRunRequest, data))
    except PalyraError as exc:
        assert exc.code is ErrorCode.MALFORMED_REQUEST
    else:
        assert isinstance(message, v1.CreateRunRequest)
        bytes(message)  # and it serialises


def test_64_bit_strings_are_ascii_decimal_and_every_value_of_the_type() -> None:
    """The document's pattern for a 64-bit string is the decoder's rule, both ways: any
    in-range decimal (19 digits too), and nothing Python's int() would also take."""
    import re

    from palyra.transport.http._openapi import build_openapi

    doc = build_openapi(RouteTable())
    int64 = doc["components"]["schemas"]["Run"]["properties"]["createdAtUnixMs"]["anyOf"][0]
    pattern = re.compile(next(f["pattern"] for f in int64["anyOf"] if f.get("type") == "string"))
    for text, ok in (("9223372036854775807", True), ("9223372036854775808", False),
                     ("0", True), ("1_000", False), ("+5", False), ("\u0661\u0662", False)):
        assert bool(pattern.match(text)) is ok, text
        query = [("after_seq", text)]
        if ok:
            assert _decode("GET", "/v1/runs/R/tape", query=query).after_seq == int(text)
        else:
            with pytest.raises(PalyraError) as info:
                _decode("GET", "/v1/runs/R/tape", query=query)
            assert info.value.code is not ErrorCode.INTERNAL, text
