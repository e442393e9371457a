"""bench/http_trace.py: both sides' stamps of an HTTP turn, joined by run and tape sequence."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import http_trace, tool_loop

MS = 1_000_000  # ns
T = 5_000 * MS  # a monotonic clock's reading: none of the stamps is 0 (0 is "not stamped")


def test_each_part_of_a_first_answer_is_the_gap_between_its_two_stamps() -> None:
    stamps = {"t0": T, "read": T + 1 * MS, "serve": T + 3 * MS, "first": T + 20 * MS,
              "written": T + 21 * MS}
    frame = b'id: 4\nevent: status\ndata: {"v":1,"event":{"runId":"R1","tapeSeq":"4"}}\n\n'
    later = b'id: 9\nevent: toolResult\ndata: {"v":1,"event":{"runId":"R1","tapeSeq":"9"}}\n\n'
    rows = [
        ["start_run", "R1", T + 4 * MS, T + 19 * MS],
        ["first", "R1", 4, stamps],
        ["r", T + 23 * MS, frame.decode()],
        ["w", "R1", 9, T + 30 * MS],
        ["r", T + 34 * MS, later.decode()],
    ]
    result = http_trace.breakdown(rows)
    parts = {name: values[0] for name, values in result["first_answer"].items()}
    assert parts == {
        "client send → daemon read": 1.0,
        "daemon read → ASGI task": 2.0,
        "ASGI task → start_run": 1.0,
        "start_run (session, accept commit)": 15.0,
        "start_run → first item": 1.0,
        "first item → written": 1.0,
        "written → client read": 2.0,
        "client send → client read": 23.0,
    }
    assert result["later_frame_written_to_read"][0] == 4.0
    assert result["daemon_write_gap"][0] == 9.0
    assert result["client_read_gap"][0] == 11.0


@pytest.mark.slow
def test_a_traced_http_run_stamps_every_part_on_both_sides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon's stamps come from bench/_site's hooks into the real gateway (its
    # protocol, front, SSE writer and Engine.start_run); the client's from the lean
    # client. A hook that does not take leaves its parts empty.
    prefix = tmp_path / "trace"
    monkeypatch.setenv(http_trace.ENV, str(prefix))
    http_trace.RECORDS.clear()
    try:
        code = tool_loop.main(["-n", "3", "-k", "2", "-c", "2", "-r", "1", "--transport",
                               "http", "--http-client", "lean", "--db", str(tmp_path / "d")])
        assert code == 0
        # A file beside the records that shares their prefix is not one of them.
        (tmp_path / "trace.txt").write_text("the run's printed table\n")
        rows = http_trace.read_records(str(prefix)) + http_trace.RECORDS
    finally:
        http_trace.RECORDS.clear()
    result = http_trace.breakdown(rows)
    assert result["turns"] >= 3
    for name, (p50, p90, p99) in result["first_answer"].items():
        assert p50 is not None and 0 <= p50 <= p90 <= p99, name
    assert result["later_frame_written_to_read"][0] is not None
