"""The OpenAPI document and the server agree: schemathesis over every operation.

A live daemon serves its own document, and schemathesis (its command line, as a user
runs it) tests it with **every check** and **every phase**: the coverage phase (each
boundary and each missing, null or wrong value, one at a time), the fuzzing phase
(valid and invalid requests), and the stateful phase (sequences that follow the
document's links: an answer's ids fed to the routes that take them, e.g.
``POST /v1/memory`` → ``DELETE /v1/memory/{memory_id}`` → ``GET`` it again). It runs
under several seeds — a fixed one, the issue's regression seeds and one that rotates
daily; a failure names its seed and the command that replays it, and
``PALYRA_FUZZ_SEEDS=7,424242`` chooses them.

What the checks hold the server to: no 5xx; only documented statuses, content types
and headers; answers that match their schemas; a document-valid request accepted
(``positive_data_acceptance``: a 2xx, or a 401/403/404/409, never a 400); a
document-invalid one refused (``negative_data_rejection``); a declared method other
than OPTIONS answered 405 with ``Allow`` (``unsupported_method``,
``allow_header_conformance``); a request without the bearer token refused
(``ignored_auth``); a resource just created readable (``ensure_resource_availability``)
and one just deleted gone (``use_after_free``); no answer slower than
``MAX_RESPONSE_S`` (``max_response_time``: a request that hangs, not a speed target —
speed is measured in ``bench/``). ``missing_required_header`` has nothing to check:
the document declares no required header (the identity headers are required with the
admin or a connector token but not with a per-principal one, which names its own
principal, and OpenAPI cannot tie a header to one bearer token; ``Last-Event-ID`` is
optional).
"""

from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

FIXED_SEEDS = (20261124, 7, 424242)
# Per-operation settings: where a schema-valid request may still break a rule the
# document cannot state (each one named in the file).
CONFIG = Path(__file__).with_name("schemathesis.toml")
# Examples per operation and phase; several seeds reach further than more examples.
# ``PALYRA_FUZZ_EXAMPLES=50`` runs a deeper search by hand (about ten times as long).
EXAMPLES = int(os.environ.get("PALYRA_FUZZ_EXAMPLES", "5"))
# A hang, not a speed target: the longest a handler waits on purpose is RouteMessage's
# 30 s for a run's replies, and none of the fuzzed requests should get near it.
MAX_RESPONSE_S = 30


def seeds() -> list[int]:
    """The fixed seeds plus today's (``PALYRA_FUZZ_SEEDS`` overrides: comma-separated)."""
    chosen = os.environ.get("PALYRA_FUZZ_SEEDS", "")
    if chosen:
        return [int(s) for s in chosen.split(",") if s.strip()]
    return [*FIXED_SEEDS, int(datetime.date.today().strftime("%Y%m%d"))]


TOKEN = "fuzz-admin-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "x-palyra-principal": "admin:fuzz",
           "x-palyra-device-id": "01J00000000000000000000000"}


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


def schemathesis_command(base_url: str, run_seed: int, report_dir: Path) -> list[str]:
    """``st run`` with every check and phase, as a user would type it."""
    headers = [arg for name, value in HEADERS.items() for arg in ("-H", f"{name}: {value}")]
    return [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run",
            f"{base_url}/schema/openapi.json",
            "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
            "--seed", str(run_seed), "--max-examples", str(EXAMPLES), "--workers", "1",
            "--max-response-time", str(MAX_RESPONSE_S), "--request-timeout", "60",
            "--output-sanitize", "false", "--report", "junit", "--report-dir",
            str(report_dir), *headers]


def _failures(report_dir: Path) -> tuple[int, list[str]]:
    """How many operations were tested, and each failure or error the JUnit report holds."""
    [report] = report_dir.glob("*.xml")
    root = ET.parse(report).getroot()
    tested, found = 0, []
    for case in root.iter("testcase"):
        tested += 1
        for outcome in case:
            if outcome.tag in ("failure", "error"):
                text = (outcome.text or outcome.get("message") or "").strip()
                found.append(f"{case.get('name')}: {outcome.tag}\n{text[:1500]}")
    return tested, found


@pytest.mark.slow
@pytest.mark.timeout(2400)  # about 2.5 min a seed on a loaded 2-core machine
def test_every_check_and_phase_under_several_seeds(daemon: DaemonProcess,
                                                  tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{daemon.http_port}"
    operations = sum(len(item) for item in _document(daemon)["paths"].values())
    assert operations >= 20
    problems: list[str] = []
    for run_seed in seeds():
        report_dir = tmp_path / f"seed-{run_seed}"
        command = schemathesis_command(base_url, run_seed, report_dir)
        # In a directory of its own: the command line keeps a crash cache (.schemathesis/)
        # in its working directory, which would carry one run's findings into the next.
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                              check=False, env={**os.environ, "NO_COLOR": "1"},
                              cwd=tmp_path)
        tested, found = _failures(report_dir)
        replay = shlex.join(["st", *command[3:]])
        assert tested >= operations, (run_seed, done.stdout[-3000:], done.stderr[-3000:])
        if found or done.returncode != 0:
            problems.append(f"seed {run_seed} (replay: {replay}): exit {done.returncode}, "
                            f"{len(found)} failures\n" + "\n".join(found[:20])
                            + ("" if found else done.stdout[-4000:]))
    assert not problems, "\n\n".join(problems)


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
