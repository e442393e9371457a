"""The subsystem command groups (agents, memory, channels, tasks, incidents, learning)
against a real daemon, for people (tables) and for scripts (``--json``)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow

SECRET = "whsec_" + base64.b64encode(b"inbound-key-of-the-cli-tests-0123").decode()
LEARN = ("Please remember that my cat is called Miso. I prefer metric units. Start from 0 and "
         "add 1 to the running total 1 times, one `add` tool call per step, then reply with "
         "the final result.")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("cli-subsystems")
    config = root / "palyra.toml"
    config.write_text(f'[channels.webhooks.hooks]\nsecrets = ["{SECRET}"]\n'
                      '[channels.policy."webhook:hooks"]\ndm_policy = "pairing"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    with DaemonProcess(root / "data", env=env, extra_args=("--config", str(config))) as proc:
        yield proc


def palyra(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", *args, "--data-dir",
                           str(daemon.data_dir)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def as_json(daemon: DaemonProcess, *args: str) -> Any:
    done = palyra(daemon, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_agents_create_show_bind_and_delete(daemon: DaemonProcess) -> None:
    created = as_json(daemon, "agents", "create", "--name", "Helper", "--system-prompt",
                      "Be brief.", "--tool", "add", "--posture", "add=ask_each_time")
    agent_id = created["agentId"]
    assert created["toolPostures"] == {"add": "TOOL_POSTURE_ASK_EACH_TIME"}
    listed = palyra(daemon, "agents", "list")
    assert listed.returncode == 0 and agent_id in listed.stdout and "Helper" in listed.stdout
    shown = palyra(daemon, "agents", "show", agent_id)
    assert "Be brief." in shown.stdout and "add=ask_each_time" in shown.stdout
    binding = as_json(daemon, "agents", "bind", agent_id, "--session-key", "helper-desk")
    assert binding["sessionKey"] == "helper-desk"
    bindings = as_json(daemon, "agents", "bindings", agent_id)
    assert [b["bindingId"] for b in bindings] == [binding["bindingId"]]
    updated = as_json(daemon, "agents", "update", agent_id, "--name", "Helper 2")
    assert updated["displayName"] == "Helper 2"
    unbound = palyra(daemon, "agents", "unbind", agent_id, binding["bindingId"])
    assert "removed" in unbound.stdout
    deleted = palyra(daemon, "agents", "delete", agent_id)
    assert deleted.returncode == 0 and "deleted" in deleted.stdout
    gone = palyra(daemon, "agents", "show", agent_id)
    assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr


def test_memory_ingest_search_show_with_provenance_and_delete(daemon: DaemonProcess) -> None:
    item = as_json(daemon, "memory", "ingest", "the staging database lives on host db7",
                   "--tag", "infra")
    memory_id = item["memoryId"]
    hits = as_json(daemon, "memory", "search", "where is the staging database")
    assert hits and hits[0]["item"]["memoryId"] == memory_id
    shown = palyra(daemon, "memory", "show", memory_id)
    assert "provenance" in shown.stdout and "sha256" in shown.stdout
    assert "db7" in shown.stdout
    assert memory_id in palyra(daemon, "memory", "list").stdout
    deleted = palyra(daemon, "memory", "delete", memory_id)
    assert deleted.returncode == 0 and "deleted" in deleted.stdout, deleted.stderr
    assert memory_id not in palyra(daemon, "memory", "list").stdout


def test_channels_list_shows_each_channel_and_its_health(daemon: DaemonProcess) -> None:
    answer = as_json(daemon, "channels", "list")
    over_http = httpx.get(f"http://127.0.0.1:{daemon.http_port}/v1/channels",
                          headers={**_headers(daemon), "x-palyra-principal": "admin:cli"},
                          timeout=30).json()
    assert answer == over_http  # the same RPC, the same proto3 JSON
    assert answer["routerEnabled"] is True
    [hooks] = [c for c in answer["channels"] if c["channel"] == "webhook:hooks"]
    assert (hooks["kind"], hooks["mode"], hooks["dmPolicy"]) == ("webhook", "inbound_only", "pairing")
    table = palyra(daemon, "channels", "list")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["CHANNEL", "KIND", "MODE", "DMS", "SLOTS", "OUTBOX", "FAILED",
                              "QUARANTINED"]
    [row] = [r.split() for r in rows if r.startswith("webhook:hooks ")]
    assert row[:4] == ["webhook:hooks", "webhook", "inbound_only", "pairing"]
    assert row[4:] == [str(hooks.get(k, 0)) for k in
                       ("concurrency", "outboxPending", "outboxFailed", "quarantined")]


def test_channels_pairing_codes_grants_and_quarantine(daemon: DaemonProcess) -> None:
    code = as_json(daemon, "channels", "pair", "webhook:hooks")
    assert code["channel"] == "webhook:hooks" and code["code"]
    listed = palyra(daemon, "channels", "codes", "webhook:hooks")
    assert code["code"] in listed.stdout
    assert as_json(daemon, "channels", "grants", "webhook:hooks") == []
    assert as_json(daemon, "channels", "quarantine", "webhook:hooks") == []
    revoked = palyra(daemon, "channels", "revoke", "webhook:hooks", "no-such-grant")
    assert revoked.returncode == 0 and "was not there" in revoked.stdout, revoked.stderr


def _headers(daemon: DaemonProcess) -> dict[str, str]:
    return {"authorization": f"Bearer {daemon.token}", "x-palyra-principal": "user:cli",
            "x-palyra-device-id": "01J00000000000000000000000"}


def test_learning_tasks_and_incidents(daemon: DaemonProcess) -> None:
    run = httpx.post(f"http://127.0.0.1:{daemon.http_port}/v1/runs", headers=_headers(daemon),
                     json={"sessionKey": "learn", "input": {"text": LEARN}, "complete": True,
                           "wait": True}, timeout=60).json()["run"]
    deadline = time.monotonic() + 30
    candidates: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not candidates:
        candidates = [c for c in as_json(daemon, "learning", "list", "--state",
                                         "pending_review") if c["runId"] == run["runId"]]
        time.sleep(0.2)
    assert candidates, "reflection proposed nothing"
    accepted = as_json(daemon, "learning", "accept", candidates[0]["candidateId"])
    assert accepted["state"] == "LEARNING_CANDIDATE_STATE_ACCEPTED" and accepted["memoryId"]
    tasks = as_json(daemon, "tasks", "list", "--kind", "post_run_reflection")
    assert tasks and all(t["kind"] == "post_run_reflection" for t in tasks)
    assert any(run["runId"] in t["payloadJson"] for t in tasks)
    shown = palyra(daemon, "tasks", "show", tasks[0]["taskId"])
    assert shown.returncode == 0 and tasks[0]["taskId"] in shown.stdout
    table = palyra(daemon, "tasks", "list")
    assert table.stdout.splitlines()[0].split()[:3] == ["TASK", "KIND", "STATE"]
    assert as_json(daemon, "incidents", "list") == []
    missing = palyra(daemon, "incidents", "ack", "01J00000000000000000000000")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_config_show_names_each_values_source(tmp_path: Path) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text("[grpc]\nport = 7000\n[engine]\nmax_turns = 9\n[auth]\n"
                    'admin_token = "do-not-print-me"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env["PALYRA_ENGINE_MAX_TURNS"] = "11"
    done = subprocess.run([sys.executable, "-m", "palyra.cli.main", "config", "show", "--config",
                           str(toml), "--http-port", "7001", "--json"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: (r["value"], r["source"]) for r in json.loads(done.stdout)}
    assert rows["grpc.port"] == (7000, f"file {toml}")
    assert rows["engine.max_turns"] == (11, "env PALYRA_ENGINE_MAX_TURNS")
    assert rows["http.port"] == (7001, "flag --http-port")
    assert rows["grpc.host"] == ("127.0.0.1", "default")
    assert rows["auth.admin_token"] == ("(set)", f"file {toml}")
    assert "do-not-print-me" not in done.stdout
    text = subprocess.run([sys.executable, "-m", "palyra.cli.main", "config", "show"],
                          capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert any(line.startswith("engine.max_turns") and line.endswith("(env "
               "PALYRA_ENGINE_MAX_TURNS)") for line in text.splitlines())


def test_an_operator_lists_a_principals_sessions_on_every_device(daemon: DaemonProcess) -> None:
    # The README's curl: user:me on device 01J0…; the CLI has a device of its own.
    headers = {**_headers(daemon), "x-palyra-principal": "user:me"}
    made = httpx.post(f"http://127.0.0.1:{daemon.http_port}/v1/sessions:resolve",
                      headers=headers, json={"sessionKey": "from-curl"}).json()["session"]
    mine = palyra(daemon, "sessions", "list", "--principal", "user:me")
    assert mine.returncode == 0 and "from-curl" not in mine.stdout  # another device
    listed = palyra(daemon, "sessions", "list", "--owner", "user:me")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "from-curl" in line)
    assert row.split()[0] == made["sessionId"] and row.split()[-1] == "01J00000000000000000000000"
    posture = palyra(daemon, "sessions", "posture", "from-curl", "add", "disabled",
                     "--principal", "user:me", "--device-id", "01J00000000000000000000000")
    assert posture.returncode == 0, posture.stderr
    refused = palyra(daemon, "sessions", "list", "--principal", "user:me", "--owner", "user:you")
    assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stderr
