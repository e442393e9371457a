"""The OpenAPI document, read as a user would: proto comments, strict shapes, streams."""

from __future__ import annotations

import re
from typing import Any

import pytest

from palyra.transport.http._openapi import build_openapi
from palyra.transport.http._routes import RouteTable


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return build_openapi(RouteTable())


def _walk(node: Any) -> list[Any]:
    out = [node]
    if isinstance(node, dict):
        for value in node.values():
            out += _walk(value)
    elif isinstance(node, list):
        for value in node:
            out += _walk(value)
    return out


def test_descriptions_come_from_the_proto_comments(doc: dict[str, Any]) -> None:
    texts = [n["description"] for n in _walk(doc) if isinstance(n, dict)
             and isinstance(n.get("description"), str)]
    assert texts and not [t for t in texts if "<factory>" in t or "v: 'int'" in t]
    create = doc["components"]["schemas"]["CreateRunRequest"]
    assert create["properties"]["complete"]["description"].startswith("Done when the agent loop")


def test_integers_are_bounded_and_64_bit_strings_have_a_pattern(doc: dict[str, Any]) -> None:
    tape = doc["paths"]["/v1/runs/{run_id}/tape"]["get"]
    params = {p.get("name"): p for p in tape["parameters"]}
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
    event = doc["components"]["schemas"]["TapeEvent"]["properties"]["tapeSeq"]
    forms = event["anyOf"][0]["anyOf"]
    assert {"type": "integer", "minimum": 0, "maximum": 2**64 - 1} in forms  # uint64
    [text] = [f["pattern"] for f in forms if f.get("type") == "string"]
    assert re.match(text, str(2**64 - 1)) and not re.match(text, str(2**64))
    version = doc["components"]["schemas"]["CreateRunRequest"]["properties"]["v"]
    assert version["anyOf"][0]["enum"] == [0, 1] and version["anyOf"][1] == {"type": "null"}


def test_path_fields_are_not_repeated_in_bodies(doc: dict[str, Any]) -> None:
    decide = doc["paths"]["/v1/approvals/{approval_id}:decide"]["post"]
    body = decide["requestBody"]["content"]["application/json"]["schema"]
    assert "approvalId" not in body["properties"] and "decision" in body["properties"]


def test_streams_are_streams_of_events_whose_data_is_the_message(doc: dict[str, Any]) -> None:
    watch = doc["paths"]["/v1/runs/{run_id}/events"]["get"]
    item = watch["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
    assert item["properties"]["data"]["contentSchema"] == {
        "$ref": "#/components/schemas/WatchRunResponse"}
    last = next(p for p in watch["parameters"] if p.get("name") == "Last-Event-ID")
    assert last["schema"]["pattern"] == "^([0-9]{1,18})?$"  # empty: no cursor


def test_every_operation_is_built(doc: dict[str, Any]) -> None:
    assert not [f"{m} {path}" for path, item in doc["paths"].items() for m, op in item.items()
                if "501" in op["responses"] or "x-palyra-unimplemented" in op]
    assert "/v1/channels/{channel}/messages:route" in doc["paths"]
    assert doc["openapi"] == "3.2.0"


def test_fields_the_server_requires_are_required_and_never_null(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    ingest = schemas["IngestMemoryRequest"]
    assert ingest["required"] == ["item"]
    item = ingest["properties"]["item"]["allOf"]  # the message, and its placement rule
    assert item[0]["$ref"] == "#/components/schemas/MemoryItem"
    assert "anyOf" not in item[0]  # not nullable
    assert "if" in item[1]["allOf"][0] and "then" in item[1]["allOf"][0]
    search = schemas["SearchMemoryRequest"]
    assert search["required"] == ["query"] and search["properties"]["query"]["minLength"] == 1
    append = schemas["AppendEventRequest"]
    assert set(append["required"]) == {"sessionId", "runId", "kind", "actor", "timestampUnixMs"}
    assert append["properties"]["runId"]["pattern"] == "^[0-7][0-9A-HJKMNP-TV-Z]{25}$"
    decide = doc["paths"]["/v1/approvals/{approval_id}:decide"]["post"]
    body = decide["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["decision"]
    assert 0 in body["properties"]["decision"]["allOf"][1]["not"]["enum"]
    for name in ("CreateAgentRequest", "IssueTokenRequest"):
        assert schemas[name].get("required"), name
    for path, field in (("/v1/channels/{channel}/messages:route", "message"),
                        ("/v1/runs/{run_id}/inputs", "input"),
                        ("/v1/sessions/{session_id}/tool-postures", "toolName")):
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"]["required"] == [field], path
    assert "required" not in schemas["CreateRunRequest"]
    # A body holding a required field must be sent; one of defaults only may be left out.
    bodies = {f"{m} {path}": op["requestBody"]["required"] for path, item in doc["paths"].items()
              for m, op in item.items() if "requestBody" in op}
    assert bodies["post /v1/memory"] and bodies["post /v1/agents/{agent_id}/bindings"]
    assert not bodies["post /v1/runs"] and not bodies["post /v1/runs/{run_id}:abort"]


def test_query_parameters_keep_their_fields_rules(doc: dict[str, Any]) -> None:
    listing = {p.get("name"): p for p in doc["paths"]["/v1/runs"]["get"]["parameters"]}
    assert listing["page_token"]["schema"]["pattern"] == "^([0-7][0-9A-HJKMNP-TV-Z]{25})?$"


def test_a_rules_schema_joins_the_fields_own(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    agent = schemas["Agent"]["properties"]
    assert agent["agentId"]["readOnly"] is True  # an annotation stands beside the type
    assert agent["displayName"]["allOf"][1] == {"maxLength": 200}
    assert "displayName" in schemas["Agent"]["required"]
    binding = doc["paths"]["/v1/agents/{agent_id}/bindings"]["post"]["requestBody"]
    body = binding["content"]["application/json"]["schema"]
    assert body["required"] == ["binding"]
    assert [b["required"] for b in body["properties"]["binding"]["allOf"][1]["anyOf"]] == [
        ["sessionKey"], ["channel"]]


def test_number_and_id_formats_the_server_enforces(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    days = schemas["PruneJournalRequest"]["properties"]["olderThanDays"]
    # Finite (no "Infinity"/"NaN" strings) and >= 0; null is the default, 0.
    own, extra = days["allOf"]
    assert (own["type"], own["minimum"]) == (["number", "null"], 0.0) and "anyOf" not in own
    assert extra == {"maximum": 1000000}
    run_id = schemas["RunStreamRequest"]["properties"]["runId"]
    assert run_id["pattern"] == "^([0-7][0-9A-HJKMNP-TV-Z]{25})?$"


def test_cursor_truncation_is_declared_where_it_can_happen(doc: dict[str, Any]) -> None:
    with_410 = sorted(f"{m} {path}" for path, item in doc["paths"].items()
                      for m, op in item.items() if "410" in op["responses"])
    assert with_410 == ["get /v1/runs/{run_id}/compactions:expand",
                        "get /v1/runs/{run_id}/events", "get /v1/runs/{run_id}/tape"]
