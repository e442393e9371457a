"""``BindAgentRequest``'s field rules (issue 36): the OpenAPI document says what the server
accepts, so a body is document-valid exactly when ``POST /v1/agents/{id}/bindings`` takes it.

The oracle is the ``jsonschema`` library reading the document the daemon serves; the
server is a real daemon over HTTP on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

TOKEN = "binding-rules-admin-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "x-palyra-principal": "admin:rules",
           "x-palyra-device-id": "01J00000000000000000000000"}
ABSENT = object()  # no body at all


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
    with DaemonProcess(tmp_path_factory.mktemp("bindings") / "data", env=env) as proc:
        yield proc


def _operation(doc: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = doc["paths"]["/v1/agents/{agent_id}/bindings"]["post"]
    return op


def _document_valid(doc: dict[str, Any], body: object) -> bool:
    """What the document says of ``body``: sent when required, schema-valid, and no
    property the document marks ``readOnly`` (the daemon writes those)."""
    request = _operation(doc)["requestBody"]
    if body is ABSENT:
        return not request["required"]
    schema = request["content"]["application/json"]["schema"]
    root = {**schema, "components": doc["components"]}
    if not jsonschema.Draft202012Validator(root).is_valid(body):
        return False
    binding = doc["components"]["schemas"]["AgentBinding"]["properties"]
    given = body.get("binding") if isinstance(body, dict) else None
    return not (isinstance(given, dict)
                and any(binding[name].get("readOnly") for name in given if name in binding))


def test_bind_agent_accepts_exactly_what_the_document_allows(daemon: DaemonProcess) -> None:
    base = f"http://127.0.0.1:{daemon.http_port}"
    doc = httpx.get(f"{base}/schema/openapi.json", timeout=30).json()
    agent = httpx.post(f"{base}/v1/agents", headers=HEADERS, timeout=30,
                       json={"agent": {"displayName": "Desk"}}).json()["agent"]["agentId"]
    cases: list[tuple[object, str]] = [
        (ABSENT, "binding"),
        ({}, "binding"),
        ({"binding": None}, "binding"),
        ({"binding": {}}, "binding"),
        ({"binding": {"conversationId": "c-*"}}, "binding"),
        ({"binding": {"sessionKey": ""}}, "binding"),
        ({"binding": {"sessionKey": "desk", "bindingId": "01J00000000000000000000009"}},
         "binding.binding_id"),
        ({"binding": {"sessionKey": "desk", "agentId": "01J00000000000000000000009"}},
         "binding.agent_id"),
        ({"binding": {"sessionKey": "desk"}}, ""),
        ({"binding": {"channel": "webhook:ops", "conversationId": "c-*"}}, ""),
    ]
    for body, refused_field in cases:
        kwargs: dict[str, Any] = {} if body is ABSENT else {"json": body}
        answer = httpx.post(f"{base}/v1/agents/{agent}/bindings", headers=HEADERS, timeout=30,
                            **kwargs)
        assert _document_valid(doc, body) == answer.is_success, (body, answer.text)
        if refused_field:
            error = answer.json()
            assert (answer.status_code, error["code"]) == (400, "INVALID_ARGUMENT"), body
            assert error["details"].get("field") == refused_field, (body, error)
        else:
            made = answer.json()["binding"]
            assert made["agentId"] == agent and made["bindingId"], made
    # Beyond the document, a body may repeat the path's agent id (as UpdateAgent's may).
    same = httpx.post(f"{base}/v1/agents/{agent}/bindings", headers=HEADERS, timeout=30,
                      json={"binding": {"channel": "webhook:ops", "agentId": agent}})
    assert same.is_success, same.text
    listed = httpx.get(f"{base}/v1/agents/{agent}/bindings", headers=HEADERS, timeout=30).json()
    assert len(listed["bindings"]) == 3
