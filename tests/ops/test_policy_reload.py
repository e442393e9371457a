"""Policy reload at run time through ``palyra policy reload`` (SIGHUP) against a real daemon.

A forbid written next to the config takes effect without a restart; a broken file
leaves the set in force, makes ``/readyz`` fail naming the file, and clears once fixed.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from palyra.cli.main import main as palyra_main
from palyra.journal import JournalConfig, JournalStore
from palyra.testing.apps import tool_loop_text
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow

USER = {"x-palyra-principal": "user:ops", "x-palyra-device-id": "01J00000000000000000000000"}
NO_ADD = 'forbid (principal, action, resource == Tool::"add");\n'


def _denied(daemon: DaemonProcess) -> float:
    text = httpx.get(f"http://127.0.0.1:{daemon.http_port}/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "palyra_policy_decisions_total" and s.labels["outcome"] == "deny")


def _run(daemon: DaemonProcess) -> None:
    answer = httpx.post(f"http://127.0.0.1:{daemon.http_port}/v1/runs", timeout=60,
                        headers={**USER, "authorization": f"Bearer {daemon.token}"},
                        json={"input": {"text": tool_loop_text(1)}, "complete": True,
                              "wait": True})
    assert answer.status_code == 200, answer.text


def _readyz(daemon: DaemonProcess) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{daemon.http_port}/readyz")


def test_reload_applies_a_good_set_and_keeps_the_old_one_on_a_bad_set(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "palyra.toml"
    config.write_text("")
    policies = tmp_path / "policies"
    policies.mkdir()
    data = tmp_path / "data"
    reload = ["policy", "reload", "--data-dir", str(data)]
    with DaemonProcess(data, env=clean_env(), extra_args=("--config", str(config))) as daemon:
        _run(daemon)
        assert _denied(daemon) == 0
        first_hash = _readyz(daemon).json()["checks"][-1]["detail"]

        (policies / "no_add.cedar").write_text(NO_ADD)
        assert palyra_main(reload) == 0
        assert "reload 1" in capsys.readouterr().out
        _run(daemon)
        assert _denied(daemon) == 1  # the new forbid decides, no restart
        ready = _readyz(daemon)
        assert ready.status_code == 200 and ready.json()["checks"][-1]["detail"] != first_hash

        (policies / "broken.cedar").write_text("permit(principal, action resource);")
        assert palyra_main(reload) == 2
        assert "broken.cedar" in capsys.readouterr().err
        down = _readyz(daemon)
        assert down.status_code == 503
        assert "broken.cedar" in down.json()["reason"] and "still enforcing" in down.json()["reason"]
        _run(daemon)
        assert _denied(daemon) == 2  # the set in force stayed in force

        (policies / "broken.cedar").unlink()
        assert palyra_main(reload) == 0
        assert _readyz(daemon).status_code == 200
    store = JournalStore.open(data, config=JournalConfig(readonly=True))
    try:
        reloaded = [e.payload for e in store.read_range(0, 10_000) if e.kind == "policy.reloaded"]
    finally:
        store.close()
    assert len(reloaded) == 1  # the good reload changed the hash; the last one restored it
    assert reloaded[0]["previous_hash"] != reloaded[0]["policy_hash"]
    assert any(i.startswith("policies/no_add.cedar") for i in reloaded[0]["policy_ids"])
