"""The daemon's start-up ``recovered`` log line is structured, not a repr."""

from __future__ import annotations

import contextlib
from pathlib import Path

import structlog

from palyra.config import PalyraConfig
from palyra.daemon.wiring import open_application, recovery_log_fields
from palyra.engine import RecoveryReport


def test_recovery_fields_are_counts_and_sorted_run_ids() -> None:
    report = RecoveryReport(resumed=["R2", "R1"], waiting=["R3"], idle=[])
    fields = recovery_log_fields(report)
    expected = {"resumed": 2, "resumed_runs": ["R1", "R2"], "waiting": 1,
                "waiting_runs": ["R3"], "idle": 0, "idle_runs": [], "total": 3}
    assert {k: fields[k] for k in expected} == expected


async def test_open_application_logs_recovery_as_fields(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        async with contextlib.AsyncExitStack() as stack:
            await open_application(PalyraConfig(data_dir=tmp_path / "data"), stack)
    [line] = [entry for entry in logs if entry["event"] == "recovered"]
    assert "report" not in line
    assert line["total"] == 0
    for name in ("resumed", "waiting", "idle"):
        assert line[name] == 0 and line[f"{name}_runs"] == []
