"""bench.report: medians across repeats keep the shape of one run; the table and ratios read them."""

from __future__ import annotations

from bench import report


def test_median_tree_takes_each_leaf_median_and_keeps_the_shape() -> None:
    runs = [
        {"steps_per_s": 100.0, "ok": True, "transport": "inproc", "by": {"a": 1, "b": 9},
         "index": [1.0, 5.0]},
        {"steps_per_s": 300.0, "ok": True, "transport": "inproc", "by": {"a": 3, "b": 7},
         "index": [3.0, 4.0]},
        {"steps_per_s": 200.0, "ok": False, "transport": "inproc", "by": {"a": 2},
         "index": [2.0, 6.0], "failures": ["x"]},
    ]
    median = report.median_tree(runs)
    assert median["steps_per_s"] == 200.0
    assert median["ok"] is False  # one failed run fails the configuration
    assert median["transport"] == "inproc"
    assert median["by"] == {"a": 2, "b": 8}  # b is missing from one run: median of the two
    assert median["index"] == [2.0, 5.0]
    assert median["failures"] == ["x"]


def test_table_shows_median_min_and_max_and_says_when_flushes_were_not_counted() -> None:
    runs = [{"steps_per_s": v, "cpu_ms_per_step": c, "ok": True,
             "flushes": {"available": False, "reason": "perf not installed"}}
            for v, c in ((100.0, 2.0), (300.0, 1.0), (200.0, 3.0))]
    text = report.table("title", report.median_tree(runs), runs)
    row = next(line for line in text.splitlines() if line.startswith("steps/s"))
    assert row.split()[1:] == ["200.0", "100.0", "300.0"]
    assert "device flushes not counted: perf not installed" in text
    assert "journal records/step" not in text  # absent figures get no row


def test_comparison_divides_transport_medians_by_in_process_ones() -> None:
    wire = {"cpu_ms_per_step": 3.0, "client_cpu_ms_per_step": 1.0, "steps_per_s": 50.0,
            "p50_step_ms": 4.0, "messages_per_step": 34.0,
            "cpu_ms_per_step_by_bucket": {"event_loop": 2.0}}
    inproc = {"cpu_ms_per_step": 2.0, "steps_per_s": 100.0, "p50_step_ms": 2.0,
              "messages_per_step": 34.0, "cpu_ms_per_step_by_bucket": {"event_loop": 1.0}}
    ratios = report.comparison(wire, inproc)
    assert ratios == {"cpu_ms_per_step_ratio": 1.5, "cpu_ms_per_step_with_client_ratio": 2.0,
                      "event_loop_cpu_ratio": 2.0, "steps_per_s_ratio": 0.5,
                      "p50_step_ratio": 2.0, "messages_per_step_ratio": 1.0}
    assert "= 1.50x" in report.comparison_text("grpc", wire, inproc, ratios)


def test_diff_sets_two_documents_side_by_side() -> None:
    from bench import diff

    def document(steps_per_s: float, commit: str) -> dict[str, object]:
        median = {"steps_per_s": steps_per_s, "cpu_ms_per_step": 2.0, "ok": True}
        return {"args": {"sessions": 200, "steps": 10, "concurrency": 16, "hitl": False},
                "tree": {"commit": commit, "dirty": False},
                "results": {"inproc": {"median": median, "runs": [median]}}}

    text = diff.render(document(400.0, "a" * 40), document(1000.0, "b" * 40))
    row = next(line for line in text.splitlines() if line.startswith("steps/s"))
    assert row.split()[1:] == ["400.0", "1000.0", "2.50x"]
    assert "before: aaaaaaaaaa" in text and "after:  bbbbbbbbbb" in text
