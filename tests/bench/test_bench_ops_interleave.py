"""``python -m bench tool-loop --ops interleave``: the instrumentation is on in the on blocks
only, and every figure is there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bench import ops_interleave, tool_loop

pytestmark = pytest.mark.slow


def _args(*extra: str) -> list[str]:
    return ["--ops", "interleave", "-n", "3", "-k", "3", "-c", "2", "--blocks", "8", *extra]


def test_the_metrics_fold_only_what_the_on_blocks_commit() -> None:
    args = tool_loop.parse_args(_args())
    result = asyncio.run(ops_interleave.interleaved_run(args, "metrics", 8))
    assert [block[0] for block in result["per_block"]] == [False, True, True, False] * 2
    assert all(block[3] == 9 for block in result["per_block"])  # 3 sessions x 3 steps
    # Every block is the same workload, so the on blocks' share of the events is half:
    # tapped in the off blocks too, the fold would count twice that; never tapped, none.
    assert result["events_folded_per_on_step"] == pytest.approx(result["events_per_step"],
                                                               rel=0.05)
    assert result["on"]["steps_per_s"] > 0 and result["off"]["cpu_ms_per_step"] > 0


def test_tracing_blocks_send_spans_and_the_run_reports_both_modes(tmp_path: Path) -> None:
    out = tmp_path / "interleave.json"
    assert tool_loop.main([*_args("-r", "1"), "--json", str(out)]) == 0
    metrics, tracing = json.loads(out.read_text())["interleaved"]
    assert (metrics["mode"], tracing["mode"]) == ("metrics", "tracing")
    assert tracing["otlp_bytes_per_step"] > 0  # the continued exporter sent every span
    assert tracing["exporter_cpu_ms_per_step"] > 0 and tracing["exporter_stop_s"] >= 0
