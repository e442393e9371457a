"""``python -m bench memory`` runs end to end at toy sizes and reports every figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.memory import main

pytestmark = pytest.mark.slow


def test_bench_memory_reports_every_figure(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "memory.json"
    assert main(["--sizes", "300", "--ingest", "20", "--queries", "20",
                 "--assembly-items", "200", "--loop-sessions", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["ingest_ms_per_item"] > 0
    assert set(result["search"]["300"]) >= {"p50_ms", "p95_ms", "cpu_p50_ms", "cpu_p95_ms"}
    assert result["retrieval"]["hybrid"]["recall@5"] >= 0.9
    loop = result["tool_loop_assembly"]
    assert loop["items"] == 200 and loop["step_mean_ms_off"] > 0
    assert loop["assembly_ms_per_model_call"] > 0 and loop["assembly_pct_of_step"] > 0
    assert "assembly per model call" in capsys.readouterr().out
