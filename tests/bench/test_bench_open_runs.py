"""``bench open-runs`` reports the daemon's memory per open run and after completion."""

from __future__ import annotations

import pytest

from bench import open_runs


@pytest.mark.slow
def test_open_runs_reports_memory_per_run_and_after_completion() -> None:
    result = open_runs.run(40, settle_s=0.2, rounds=2)
    assert result["runs"] == 40
    for key in ("anon_kib_per_open_run", "file_kib_per_open_run", "rss_kib_per_open_run",
                "data_mdb_kib_per_open_run"):
        assert isinstance(result[key], float)
    assert result["idle_mib"]["VmRSS"] > 10
    assert set(result["after_completion_over_idle_mib"]) == {"VmRSS", "RssAnon", "RssFile"}
    assert len(result["after_later_rounds_over_idle_mib"]) == 1
    assert result["started_mib"]["RssAnon"] > 10 and result["data_mdb_mib"] > 0
    assert result["data_mdb_kib_per_open_run"] >= 0
    assert result["rss_kib_per_open_run"] == pytest.approx(
        result["anon_kib_per_open_run"] + result["file_kib_per_open_run"], abs=2)
