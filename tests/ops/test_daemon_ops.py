"""``/metrics`` and ``/readyz`` of a real daemon over loopback, driven by a real tool loop."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from grpclib.client import Channel
from grpclib.health.v1.health_grpc import HealthStub
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from prometheus_client.parser import text_string_to_metric_families

from palyra.testing.apps import tool_loop_text
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow

METRICS_TOKEN = "scrape-token-of-the-tests"
USER = {"x-palyra-principal": "user:ops", "x-palyra-device-id": "01J00000000000000000000000"}
ADMIN = {"x-palyra-principal": "admin:ops", "x-palyra-device-id": "01J00000000000000000000000"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
# Labelled families with nothing to show after one run (no live run at the scrape, no
# channel message, incident or memory change): no sample, so not exposed.
_NOT_IN_A_PLAIN_RUN = {"palyra_runs", "palyra_run_phase", "palyra_tasks_queued",
                       "palyra_channel_messages_total", "palyra_watchdog_incidents_total",
                       "palyra_memory_changes_total", "palyra_channel_duplicates_total",
                       "palyra_channel_signature_failures_total",
                       "palyra_channel_quarantine_size"}


def _family(sample: str) -> str:
    """The documented family name of a sample (``x_total`` → ``x_total``, ``h_bucket`` → ``h``)."""
    for suffix in ("_bucket", "_count", "_sum", "_created"):
        if sample.endswith(suffix):
            return sample.removesuffix(suffix)
    return sample


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    config = tmp_path / "palyra.toml"
    config.write_text(f'[metrics]\ntoken = "{METRICS_TOKEN}"\n')
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as running:
        yield running


@pytest.fixture
async def client(daemon: DaemonProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}",
                                 timeout=30) as made:
        made.headers["authorization"] = f"Bearer {daemon.token}"
        yield made


async def _scrape(client: httpx.AsyncClient) -> Samples:
    answer = await client.get("/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True)  # e2fsprogs (system-packages)


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def _approved_run(client: httpx.AsyncClient, steps: int) -> dict[str, object]:
    """A tool loop of ``steps`` ``add`` calls, each approved over HTTP by an operator."""
    session = (await client.post("/v1/sessions:resolve", headers=USER,
                                 json={"sessionKey": "ops"})).json()["session"]
    posture = await client.post(f"/v1/sessions/{session['sessionId']}/tool-postures",
                                headers=USER, json={"toolName": "add",
                                                    "posture": "ask_each_time"})
    assert posture.status_code == 200, posture.text
    created = await client.post("/v1/runs", headers=USER, json={
        "sessionKey": "ops", "input": {"text": tool_loop_text(steps)}, "complete": True})
    run_id = created.json()["run"]["runId"]
    async with asyncio.timeout(60):
        while True:
            run = (await client.get(f"/v1/runs/{run_id}", headers=USER)).json()["run"]
            if run["state"] in ("RUN_STATE_DONE", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED"):
                return dict(run)
            if run.get("pendingApprovalId"):
                await client.post(f"/v1/approvals/{run['pendingApprovalId']}:decide",
                                  headers=ADMIN, json={"decision": "approve", "scope": "once"})
            await asyncio.sleep(0.02)


async def test_metrics_move_across_a_tool_loop_with_approvals(
        client: httpx.AsyncClient) -> None:
    refused = await client.get("/metrics")  # the admin token is not the scrape token
    assert refused.status_code == 401
    before = await _scrape(client)
    steps = 2
    run = await _approved_run(client, steps)
    assert run["state"] == "RUN_STATE_DONE" and run["finalText"] == f"result={steps}"
    after = await _scrape(client)

    def moved(name: str, **labels: str) -> float:
        return _get(after, name, **labels) - _get(before, name, **labels)

    assert moved("palyra_tool_calls_total", tool="add", outcome="ok") == steps
    assert moved("palyra_policy_decisions_total", outcome="needs_approval") == steps
    assert moved("palyra_approvals_requested_total") == steps
    assert moved("palyra_approvals_decided_total", state="approved") == steps
    assert moved("palyra_approval_wait_seconds_count") == steps
    assert moved("palyra_steps_total") == steps + 1  # the last turn answers
    assert moved("palyra_run_transitions_total", state="done") == 1
    assert moved("palyra_run_transitions_total", state="waiting_for_approval") == steps
    model = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "scripted",
             "gen_ai_request_model": "scripted"}
    assert moved("gen_ai_client_operation_duration_seconds_count", **model) == steps + 1
    assert moved("gen_ai_client_token_usage_count", **model, gen_ai_token_type="input") \
        == steps + 1
    assert moved("gen_ai_client_token_usage_sum", **model, gen_ai_token_type="output") > 0
    assert moved("palyra_tool_duration_seconds_count", tool="add") == steps
    for name in ("palyra_journal_commits_total", "palyra_journal_appends_total",
                 "palyra_journal_commit_seconds_count", "palyra_journal_fsync_seconds_count",
                 "palyra_journal_commit_batch_events_count"):
        assert moved(name) > 0, name
    assert _get(after, "palyra_journal_map_used_bytes") > 0
    documented = set(re.findall(r"^\| `((?:palyra|gen_ai)_[a-z_]+)` \|",
                                OPERATIONS_DOC.read_text(), re.M))
    exposed = {_family(name) for name, _labels in after}
    assert exposed <= documented, exposed - documented  # docs/operations.md lists each one
    # The run's reflection task may still be queued at the scrape, or already done; on a
    # loaded machine its enqueue (run end → task) may not even be committed yet.
    maybe = {"palyra_tasks_queued", "palyra_task_changes_total"}
    assert (documented - exposed) - maybe == _NOT_IN_A_PLAIN_RUN - maybe, documented - exposed
    assert _get(after, "palyra_approvals_pending") == 0
    assert ("palyra_streams_open", frozenset({("transport", "sse")})) in after


async def _grpc_health(daemon: DaemonProcess, service: str = "") -> int:
    """The standard gRPC health service's answer (no token: it is public, like /readyz)."""
    channel = Channel("127.0.0.1", daemon.grpc_port)
    try:
        answer = await HealthStub(channel).Check(HealthCheckRequest(service=service), timeout=10)
        return int(answer.status)
    finally:
        channel.close()


async def test_readyz_is_503_while_the_journal_cannot_commit(
        daemon: DaemonProcess, client: httpx.AsyncClient) -> None:
    ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["ready"] is True
    assert await _grpc_health(daemon) == HealthCheckResponse.SERVING
    assert await _grpc_health(daemon, "palyra.v1.GatewayService") == HealthCheckResponse.SERVING
    log = daemon.data_dir / "journal" / "commit.log"
    assert log.exists()
    _chattr("+i", log)  # writes refused even to root, through fds already open
    try:
        await asyncio.sleep(1.1)  # past the probe interval
        down = await client.get("/readyz")
        assert down.status_code == 503, down.text
        assert "journal_commit" in down.json()["reason"]
        assert await _grpc_health(daemon) == HealthCheckResponse.NOT_SERVING
        health = await client.get("/healthz", headers=USER)  # liveness stays up; says why
        assert health.status_code == 200
        assert health.json().get("ready", False) is False
        failing = [c for c in health.json()["checks"] if not c.get("ok", False)]
        assert [c["name"] for c in failing] == ["journal_commit"]
        refused = await client.post("/v1/runs", headers=USER, json={
            "input": {"text": "hello"}, "complete": True, "wait": True})
        assert refused.status_code == 503, refused.text
    finally:
        _chattr("-i", log)
    await asyncio.sleep(1.1)
    back = await client.get("/readyz")
    assert back.status_code == 200, back.text
    assert await _grpc_health(daemon) == HealthCheckResponse.SERVING
    # Operators also get the doctor's in-daemon checks; other callers do not.
    details = (await client.get("/healthz", headers=ADMIN)).json()["details"]
    assert [(d["name"], d.get("ok", False)) for d in details] == [
        ("data_dir", True), ("disk", True), ("embedder", True)], details
    assert "details" not in (await client.get("/healthz", headers=USER)).json()
    run = await client.post("/v1/runs", headers=USER, json={
        "input": {"text": "hello"}, "complete": True, "wait": True})
    assert run.json()["run"]["state"] == "RUN_STATE_DONE", run.text
