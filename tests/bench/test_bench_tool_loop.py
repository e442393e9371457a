"""``python -m bench tool-loop`` end to end on a tiny workload: every figure is there and adds up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import flushes, tool_loop


def _figures(path: Path, kind: str) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert document["bench"] == "tool-loop" and document["schema"] == tool_loop.SCHEMA
    assert document["tree"]["commit"]
    median: dict[str, Any] = document["results"][kind]["median"]
    return median


def test_in_process_run_reports_every_tracked_figure(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "2", "-k", "2", "-c", "2", "-r", "2", "--json", str(out),
                           "--db", str(tmp_path / "data")])
    assert code == 0
    table = capsys.readouterr().out
    assert "steps/s" in table and "betterproto2 messages/step" in table
    figures = _figures(out, "inproc")
    assert figures["ok"] is True
    json_runs = json.loads(out.read_text())["results"]["inproc"]["runs"]
    assert len(json_runs) == 2
    for run in json_runs:
        assert run["runs"] == 2 and run["steps"] == 2
        commits, records = run["commits_per_step"], run["records_per_step"]
        assert 0 < commits <= records
        assert 0 < run["lmdb_txns_per_step"] <= commits  # LMDB takes frames in batches
        assert run["messages_per_step"] > 0
        assert run["cpu_ms_per_step"] >= run["cpu_ms_per_step_by_bucket"]["event_loop"] > 0
        assert run["floors"]["fdatasync_p50_us"] > 0 and run["floors"]["sha256_mb_s"] > 0
        if flushes.unavailable_reason() is None:
            # The store syncs every commit: at least one flush each, all counted.
            assert run["flushes"]["available"]
            assert run["flushes"]["per_commit"] >= 1.0


def test_a_hitl_run_reports_how_long_each_decision_took_to_be_answered(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "2", "-k", "3", "-c", "1", "-r", "1", "--hitl", "--json",
                           str(out), "--db", str(tmp_path / "data")])
    assert code == 0
    assert "approval decide → durable answer p99 ms" in capsys.readouterr().out
    run = json.loads(out.read_text())["results"]["inproc"]["runs"][0]
    assert run["ok"] is True and run["approvals"] == 6
    assert 0 < run["p50_decide_ms"] <= run["p99_decide_ms"] < run["turn_latency_ms"]["max"]


@pytest.mark.slow
def test_grpc_run_measures_the_daemon_and_compares_with_in_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "2", "-k", "2", "-r", "1", "--transport", "grpc",
                           "--compare-inproc", "--json", str(out), "--db", str(tmp_path / "d")])
    assert code == 0
    wire, inproc = _figures(out, "grpc"), _figures(out, "inproc")
    assert wire["ok"] is True and inproc["ok"] is True
    assert wire["messages_per_step"] > 0  # counted inside the daemon by the probe
    assert wire["commits_per_step"] > 0  # the probe found the store despite gc.freeze()
    assert wire["gc_frozen_objects"] > 0  # the daemon froze what start-up built
    assert wire["gc_ms_per_step"] >= 0 and len(wire["gc_collections"]) == 3
    assert "client_cpu_ms_per_step" in wire and "client_cpu_ms_per_step" not in inproc
    ratios = json.loads(out.read_text())["comparison"]
    assert ratios["cpu_ms_per_step_ratio"] > 0
    assert "learning.enabled = false" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("hitl", [False, True])
def test_the_lean_http_client_drives_turns_to_result_k(tmp_path: Path, hitl: bool) -> None:
    # Every step's tool result and the run's end come through its SSE reading (ok needs
    # result=K, K results and a DONE run); with --hitl its JSON posts set the posture and
    # decide each approval.
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "3", "-k", "2", "-c", "2", "-r", "1", "--transport", "http",
                           "--http-client", "lean", "--json", str(out),
                           "--db", str(tmp_path / "d"), *(["--hitl"] if hitl else [])])
    assert code == 0
    run = json.loads(out.read_text())["results"]["http"]["runs"][0]
    assert run["ok"] is True and run["runs"] == 3 and run["steps"] == 2
    assert run["approvals"] == (6 if hitl else 0)


@pytest.mark.slow
@pytest.mark.parametrize("hitl", [False, True])
def test_the_grpcio_client_drives_turns_to_result_k(tmp_path: Path, hitl: bool) -> None:
    # Every step's tool result and the run's end come through grpcio's reading of RunStream
    # (decoded by palyra.core.protobin: ok needs result=K, K results and a DONE run); with
    # --hitl its unary calls set the posture and each decision goes up the turn's stream.
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "3", "-k", "2", "-c", "2", "-r", "1", "--transport", "grpc",
                           "--grpc-client", "grpcio", "--json", str(out),
                           "--db", str(tmp_path / "d"), *(["--hitl"] if hitl else [])])
    assert code == 0
    run = json.loads(out.read_text())["results"]["grpc"]["runs"][0]
    assert run["ok"] is True and run["runs"] == 3 and run["steps"] == 2
    assert run["approvals"] == (6 if hitl else 0)
    assert run["client_cpu_ms_per_step"] > 0  # grpcio's C-core threads are this process's


@pytest.mark.parametrize("rpc", ["stream", "create-watch-get"])
def test_both_call_shapes_drive_turns_to_result_k_in_process(tmp_path: Path, rpc: str) -> None:
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "2", "-k", "3", "-c", "2", "-r", "1", "--rpc", rpc,
                           "--json", str(out), "--db", str(tmp_path / "data")])
    assert code == 0
    run = json.loads(out.read_text())["results"]["inproc"]["runs"][0]
    assert run["ok"] is True and run["runs"] == 2 and run["steps"] == 3


async def test_a_streamed_turn_reports_the_outcome_its_tape_shows() -> None:
    from palyra_gen.palyra import v1 as pb

    from bench.workload import StreamedTurn

    def event(seq: int, **member: object) -> pb.TapeEvent:
        return pb.TapeEvent(run_id="r1", tape_seq=seq, **member)  # type: ignore[arg-type]

    async def responses() -> Any:
        yield pb.RunStreamResponse(events=[event(0, status=pb.RunStatus(
            state=pb.RunState.ACCEPTED))])
        yield pb.RunStreamResponse(event=event(1, message_replied=pb.MessageReplied(
            reply_text="result=3")))
        yield pb.RunStreamResponse(events=[event(2, status=pb.RunStatus(
            state=pb.RunState.DONE))])

    turn = StreamedTurn(responses())
    assert await turn.start() == "r1"
    seen: list[int] = []

    async def on_event(e: pb.TapeEvent) -> None:
        seen.append(e.tape_seq)

    run = await turn.follow(on_event)
    assert seen == [0, 1, 2]
    assert (run.run_id, run.state, run.final_text) == ("r1", pb.RunState.DONE, "result=3")


def test_compare_tools_alternates_add_mcp_and_skill_and_prints_the_ratios(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = tool_loop.main(["-n", "2", "-k", "2", "-r", "2", "--compare-tools", "--json", str(out),
                           "--db", str(tmp_path / "data")])
    assert code == 0
    document = json.loads(out.read_text())
    assert list(document["results"]) == ["tool:add", "tool:mcp", "tool:skill"]
    for kind in document["results"]:
        assert [r["tool"] for r in document["results"][kind]["runs"]] == \
            [kind.removeprefix("tool:")] * 2
    ratios = document["tool_ratios"]
    assert set(ratios) == {"mcp", "skill"}
    add = document["results"]["tool:add"]["median"]["cpu_ms_per_step"]
    for tool, r in ratios.items():
        own = document["results"][f"tool:{tool}"]["median"]["cpu_ms_per_step"]
        assert r["cpu_ratio"] == round(own / add, 3)
    # The server's own process, beside the daemon's (ticks of 10 ms: 0 on so few steps).
    assert ratios["mcp"]["tool_server_cpu_ms_per_step"] >= 0
    assert (ratios["mcp"]["target_ratio"], ratios["skill"]["target_ratio"]) == (2.0, 1.3)
    assert "mcp: " in capsys.readouterr().out


def test_tool_calls_times_each_add_apart_from_the_run(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from bench import tool_calls

    out = tmp_path / "calls.json"
    assert tool_calls.main(["-n", "20", "-r", "2", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["add", "mcp", "skill"]
    for result in results.values():
        assert len(result["runs"]) == 2
        assert result["median"]["cpu_us_per_call"] > 0
        assert result["median"]["wall_us_per_call"] >= result["median"]["cpu_us_per_call"] * 0.5
    # An MCP call waits for another process: its wall time is well over a built-in's.
    assert results["mcp"]["median"]["wall_us_per_call"] > results["add"]["median"][
        "wall_us_per_call"]
    assert "CPU µs/call" in capsys.readouterr().out
