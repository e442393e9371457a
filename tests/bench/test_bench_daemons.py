"""``bench daemons`` drives every daemon it starts, on LMDB and on one PostgreSQL journal."""

from __future__ import annotations

import json
from pathlib import Path

from bench import daemons


def test_each_daemon_serves_its_share_of_the_sessions(tmp_path: Path) -> None:
    out = tmp_path / "daemons.json"
    # Enough steps that the PostgreSQL server's CPU shows: the kernel counts a process's
    # CPU in 10 ms clock ticks, and 12 steps (six sessions of two) came to none once.
    code = daemons.main(["-n", "8", "-k", "8", "-c", "4", "-r", "1", "--daemons", "2",
                         "--json", str(out)])  # fmt: skip
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["lmdb x1", "postgres x2"]
    lmdb, shared = results["lmdb x1"]["runs"][0], results["postgres x2"]["runs"][0]
    assert lmdb["ok"] and shared["ok"]
    assert lmdb["steps_per_s"] > 0 and shared["steps_per_s"] > 0
    # Sessions are spread over the daemons: each one committed steps in the window.
    assert len(shared["commits_each"]) == 2 and min(shared["commits_each"]) > 0
    assert shared["postgres_cpu_ms_per_step"] > 0 and shared["pg_transactions_per_step"] > 0
    assert "postgres_cpu_ms_per_step" not in lmdb
