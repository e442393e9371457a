"""The OpenAPI document and the server agree: schemathesis over every operation.

A live daemon serves its own document; schemathesis generates requests from it
(fixed seed, a bounded number of examples per operation) and checks every
answer: no 5xx, only documented statuses, content types and headers, responses
that match their schemas, and — for requests the document calls valid — never
``MALFORMED_REQUEST`` or ``UNSUPPORTED_VERSION`` (a shape or value the document allows
but the server refuses).
Semantic refusals of well-formed requests (``INVALID_ARGUMENT``, ``NOT_FOUND``,
``PERMISSION_DENIED``) are the server's business, not a disagreement.
Requests the document calls invalid must never reach a 2xx or a 5xx.
Operations marked ``x-palyra-unimplemented`` are checked to answer 501.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from palyra.testing.spawn import DaemonProcess, clean_env

SEED = 20261124
EXAMPLES = 12
TOKEN = "fuzz-admin-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "x-palyra-principal": "admin:fuzz",
           "x-palyra-device-id": "01J00000000000000000000000"}
# Codes that mean "the request's shape or values break the rules": a request the
# document calls valid must never get one.
SHAPE_CODES = ("MALFORMED_REQUEST", "UNSUPPORTED_VERSION")
SHAPE_CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
                response_headers_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
    with DaemonProcess(tmp_path_factory.mktemp("fuzz") / "data", env=env) as proc:
        yield proc


def _document(daemon: DaemonProcess) -> dict[str, Any]:
    response = httpx.get(f"http://127.0.0.1:{daemon.http_port}/schema/openapi.json")
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


def _fuzz(op: Any, mode: GenerationMode, base_url: str) -> list[str]:
    failures: list[str] = []

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=HEADERS, timeout=15)
        label = f"{op.label} [{mode.value}] -> {response.status_code}: {response.text[:300]}"
        try:
            case.validate_response(response, checks=[not_a_server_error] if
                                   mode is GenerationMode.NEGATIVE else SHAPE_CHECKS)
        except AssertionError as exc:
            failures.append(f"{label}\n    {str(exc).splitlines()[0] if str(exc) else exc!r}")
            return
        body = response.text
        if mode is GenerationMode.POSITIVE and any(f'"{code}"' in body for code in SHAPE_CODES):
            failures.append(f"{label}\n    a document-valid request was refused for its shape")

    try:
        run()
    except Unsatisfiable:
        # Nothing of this operation can be made invalid (e.g. no parameters).
        assert mode is GenerationMode.NEGATIVE, op.label
    return failures


@pytest.mark.slow
def test_every_operation_agrees_with_the_document(daemon: DaemonProcess,
                                                  tmp_path: Path) -> None:
    doc = _document(daemon)
    schema = schemathesis.openapi.from_dict(doc)
    base_url = f"http://127.0.0.1:{daemon.http_port}"
    tested = 0
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()
        tested += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += _fuzz(op, mode, base_url)
    assert tested == len(list(schema.get_all_operations()))
    assert tested >= 20
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures[:40])


def test_no_operation_answers_501(daemon: DaemonProcess) -> None:
    """Every RPC of the spec is built: none answers UNIMPLEMENTED (a call with an empty
    body may be refused for what it lacks, never for being missing)."""
    doc = _document(daemon)
    for path, item in sorted(doc["paths"].items()):
        for method in item:
            url = path.replace("{", "").replace("}", "")
            response = httpx.request(method.upper(), f"http://127.0.0.1:{daemon.http_port}{url}",
                                     headers=HEADERS,
                                     json={} if method in ("post", "patch") else None, timeout=40)
            assert response.status_code != 501, (method, path, response.text)


def test_options_answers_the_routes_real_methods(daemon: DaemonProcess) -> None:
    base = f"http://127.0.0.1:{daemon.http_port}"
    runs = httpx.options(f"{base}/v1/runs")
    assert runs.status_code == 204 and runs.headers["allow"] == "GET, POST, OPTIONS"
    run = httpx.options(f"{base}/v1/runs/01J00000000000000000000000")
    assert run.status_code == 204 and run.headers["allow"] == "GET, OPTIONS"
    unknown = httpx.options(f"{base}/v1/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["code"] == "NOT_FOUND"
