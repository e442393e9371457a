"""The OpenAPI document and the server agree: schemathesis over every operation.

A live daemon serves its own document; schemathesis generates requests from it
(a bounded number of examples per operation, under several seeds: a fixed one, the
issue's regression seeds and one that rotates daily; every failure names its seed
and ``PALYRA_FUZZ_SEEDS=7,424242`` replays chosen ones) and checks every answer: no 5xx, only documented statuses, content types and headers, responses
that match their schemas, and — for requests the document calls valid — never
``MALFORMED_REQUEST`` or ``UNSUPPORTED_VERSION`` (a shape or value the document allows
but the server refuses).
Semantic refusals of well-formed requests (``INVALID_ARGUMENT``, ``NOT_FOUND``,
``PERMISSION_DENIED``) are the server's business, not a disagreement.
Requests the document calls invalid must never reach a 2xx or a 5xx
(``negative_data_rejection``).
Operations marked ``x-palyra-unimplemented`` are checked to answer 501.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import get_state_machine_test
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup

from palyra.testing.spawn import DaemonProcess, clean_env

FIXED_SEEDS = (20261124, 7, 424242)
EXAMPLES = 12


def seeds() -> list[int]:
    """The fixed seeds plus today's (``PALYRA_FUZZ_SEEDS`` overrides: comma-separated)."""
    chosen = os.environ.get("PALYRA_FUZZ_SEEDS", "")
    if chosen:
        return [int(s) for s in chosen.split(",") if s.strip()]
    return [*FIXED_SEEDS, int(datetime.date.today().strftime("%Y%m%d"))]
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


def _sends_nothing_invalid(case: Any) -> bool:
    """A "negative" case whose only invalid part is an unknown query parameter with an
    empty list of values: nothing of it goes on the wire, so the request sent is valid
    (a schemathesis generation artifact, not a server that accepts bad input)."""
    declared = {p.name for p in case.operation.query}
    unknown = {k: v for k, v in (case.query or {}).items() if k not in declared}
    return bool(unknown) and all(v == [] for v in unknown.values())


def _fuzz(op: Any, mode: GenerationMode, base_url: str, run_seed: int) -> list[str]:
    failures: list[str] = []

    @seed(run_seed)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=HEADERS, timeout=15)
        label = (f"seed {run_seed}: {op.label} [{mode.value}] query={case.query!r} "
                 f"headers={case.headers!r} body={str(case.body)[:200]} -> "
                 f"{response.status_code}: {response.text[:300]}")
        checks = SHAPE_CHECKS
        if mode is GenerationMode.NEGATIVE:
            checks = [not_a_server_error]
            if not _sends_nothing_invalid(case):
                checks.append(negative_data_rejection)
        try:
            case.validate_response(response, checks=checks)
        except (AssertionError, FailureGroup) as exc:
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
        for run_seed in seeds():
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                failures += _fuzz(op, mode, base_url, run_seed)
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


STATEFUL_EXAMPLES = 25
STATEFUL_STEPS = 6


@pytest.mark.slow
def test_sequences_of_linked_calls_agree_with_the_document(daemon: DaemonProcess) -> None:
    """The stateful phase: schemathesis follows the document's links (an answer's ids fed
    to the routes that take them, e.g. POST /v1/runs → GET /v1/runs/{run_id}) and checks
    every answer in the sequence, under each seed."""
    doc = _document(daemon)
    assert sum(len(op["responses"]["200"].get("links", {})) for item in doc["paths"].values()
               for op in item.values()) >= 50
    schema = schemathesis.openapi.from_dict(doc)
    base_url = f"http://127.0.0.1:{daemon.http_port}"
    failures: list[str] = []
    calls: list[str] = []

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        run_seed = 0

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            calls.append(case.operation.label)
            return {"base_url": base_url, "headers": HEADERS, "timeout": 15}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            label = (f"seed {self.run_seed}: {case.operation.label} -> {response.status_code}: "
                     f"{response.text[:300]}")
            try:
                case.validate_response(response, checks=SHAPE_CHECKS)
            except (AssertionError, FailureGroup) as exc:
                failures.append(f"{label}\n    {str(exc).splitlines()[0] if str(exc) else exc!r}")

    for run_seed in seeds():
        Machine.run_seed = run_seed
        run = get_state_machine_test(Machine, settings=settings(
            max_examples=STATEFUL_EXAMPLES, deadline=None, database=None,
            stateful_step_count=STATEFUL_STEPS, suppress_health_check=list(HealthCheck)))
        seed(run_seed)(run)()
    # Sequences, not single calls: the links were followed.
    assert len(calls) > 2 * STATEFUL_EXAMPLES * len(seeds()), len(calls)
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures[:40])
