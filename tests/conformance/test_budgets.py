"""An enforced budget answers BUDGET_EXHAUSTED on every client (gRPC, HTTP, TypeScript), with
the spec's status, and GetUsage reports what was spent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from palyra_gen.errors import ERROR_MAPPING

from palyra.testing.spawn import DaemonProcess

from .clients import CallFailed
from .conftest import OpenClient, daemon_env

GATEWAY, USAGE = "GatewayService", "UsageService"

CONFIG = """
# Every principal may spend 4 tokens a day (the scripted model counts words).
[[usage.budgets]]
scope = "principal"
subject = "*"
period = "day"
tokens = 4
mode = "enforced"
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("budgets")
    config = root / "palyra.toml"
    config.write_text(CONFIG)
    with DaemonProcess(root / "data", env=daemon_env(),
                       extra_args=("--config", str(config))) as proc:
        yield proc
    assert proc.proc is not None and proc.proc.returncode == 0, proc.log()[-3000:]


async def test_an_enforced_budget_is_budget_exhausted_on_every_client(
        kind: str, connect: OpenClient) -> None:
    client = await connect(kind, principal=f"user:budget-{kind}")
    run = (await client.call(GATEWAY, "CreateRun", {
        "v": 1, "sessionKey": f"budget-{kind}", "input": {"text": "three words here"},
        "complete": True, "wait": True}))["run"]
    assert run["state"] == "RUN_STATE_DONE"
    usage = await client.call(USAGE, "GetUsage", {})
    [day] = [line for line in usage["lines"] if line["period"].startswith("day:")]
    assert day["scope"] == "principal" and day["subject"] == f"user:budget-{kind}"
    assert int(day["totals"]["inputTokens"]) + int(day["totals"]["outputTokens"]) >= 4
    [budget] = usage["budgets"]
    assert (budget["mode"], budget["exhausted"]) == ("enforced", True)
    with pytest.raises(CallFailed) as refused:
        await client.call(GATEWAY, "CreateRun", {
            "v": 1, "sessionKey": f"budget-{kind}", "input": {"text": "more"}})
    assert refused.value.code == "BUDGET_EXHAUSTED"
    assert "enforced day budget of principal" in refused.value.message
    # The status the spec maps the code to, on this transport.
    mapping = ERROR_MAPPING["BUDGET_EXHAUSTED"]
    assert refused.value.status == (f"http:{mapping.http_status}" if kind == "http"
                                    else f"grpc:{mapping.grpc_status}")
    with pytest.raises(CallFailed) as streamed:
        await client.run_stream({"v": 1, "sessionKey": f"budget-{kind}",
                                 "input": {"text": "more"}})
    assert streamed.value.code == "BUDGET_EXHAUSTED"
