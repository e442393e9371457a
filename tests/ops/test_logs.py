"""Log lines of a real daemon: request context on every line, and no planted secret anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "adm1n-PLANTED-token-0123456789abcdef"
METRICS_TOKEN = "metr1cs-PLANTED-zz99yy88xx77"  # not secret-shaped: only exact matching finds it
PROVIDER_KEY = "prov1der-PLANTED-key-5555666677778888"
SHAPED = "sk-proj-PLANTEDshapedSecret0123456789"  # found by the journal's redaction rules
DEVICE = "01J00000000000000000000000"


def test_request_lines_carry_context_and_no_secret(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"
    config.write_text(f'[metrics]\ntoken = "{METRICS_TOKEN}"\n'
                      '[provider]\napi_key_env = "PLANTED_PROVIDER_KEY"\n'
                      '[log]\nlevel = "debug"\nformat = "json"\n')
    env = clean_env(PALYRA_ADMIN_TOKEN=ADMIN_TOKEN, PLANTED_PROVIDER_KEY=PROVIDER_KEY)
    with DaemonProcess(tmp_path / "data", env=env,
                       extra_args=("--config", str(config))) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        auth = {"authorization": f"Bearer {ADMIN_TOKEN}", "x-palyra-principal": "user:logs",
                "x-palyra-device-id": DEVICE}
        with httpx.Client(base_url=base, timeout=30) as client:
            for planted in (ADMIN_TOKEN, METRICS_TOKEN, PROVIDER_KEY, SHAPED):
                # A client-chosen request id rides on every line of its request.
                run = client.post("/v1/runs", headers={**auth, "x-request-id": planted},
                                  json={"input": {"text": f"hello {planted}"},
                                        "complete": True, "wait": True})
                assert run.status_code == 200, run.text
                wrong = client.get("/v1/journal/head", headers={
                    **auth, "authorization": f"Bearer {planted}x", "x-request-id": planted})
                assert wrong.status_code == 401
            assert client.post("/v1/runs", headers={**auth, "x-request-id": "req-visible"}, json={
                "input": {"text": "hi"}, "complete": True, "wait": True}).status_code == 200
        daemon.stop()
        text = daemon.log()
    for planted in (ADMIN_TOKEN, METRICS_TOKEN, PROVIDER_KEY, SHAPED):
        assert planted not in text, planted
        assert planted[:16] not in text, planted  # nor half of one
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    visible = [line for line in lines if line.get("request_id") == "req-visible"]
    assert visible, text[-3000:]
    for line in visible:
        assert line["principal"] == "user:logs"
        assert len(line["trace_id"]) == 32
    assert any(line.get("run_id") and line.get("session_id") for line in visible), visible
    assert any(line.get("request_id") == "<redacted>" for line in lines)
