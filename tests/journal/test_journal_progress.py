"""Progress of long verify/export runs: a library callback, and a TTY-only stderr line.

The callback is optional (default ``None``) and changes no result; the CLI shows
progress only when stderr is a terminal, so pipes and captured output (and the
stdout contract: first line OK/TAMPERED, or the export summary) stay as before.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from palyra.cli import journal_cmd
from palyra.journal import JournalStore, export_bundle, verify_bundle, verify_store

from .helpers import draft, rewrite_record


async def _fill(data_dir: Path, events: int = 25) -> None:
    async with JournalStore.open(data_dir) as store:
        for i in range(events):
            await store.append([draft(i, session_id=f"s{i % 2}", payload={"i": i})])
        await store.checkpoint()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_callbacks_see_every_position_and_change_nothing(
    data_dir: Path, tmp_path: Path
) -> None:
    await _fill(data_dir)
    seen: list[int] = []
    assert verify_store(data_dir, progress=seen.append) == verify_store(data_dir)
    assert seen == list(range(1, 26))

    exported: list[int] = []
    out = tmp_path / "b.ndjson"
    summary = export_bundle(data_dir, out, session_id="s0", progress=exported.append)
    assert exported == list(range(1, 26)) and summary.events == 13 and summary.links == 12

    read: list[int] = []
    with_cb = verify_bundle(out, progress=read.append)
    assert with_cb == verify_bundle(out) and with_cb.ok
    assert read == list(range(1, 26))


async def test_callback_stops_at_the_tampered_position(data_dir: Path) -> None:
    await _fill(data_dir)
    rewrite_record(data_dir, 9, ts_ms=1)
    seen: list[int] = []
    report = verify_store(data_dir, progress=seen.append)
    assert report.problem is not None and report.problem.position == 9
    assert seen == list(range(1, 9))


async def test_cli_progress_only_on_a_tty_and_stdout_unchanged(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _fill(data_dir)
    monkeypatch.setattr(journal_cmd, "PROGRESS_EVERY", 10)
    out = tmp_path / "b.ndjson"
    commands = [["verify", "--data-dir", str(data_dir)],
                ["export", "--data-dir", str(data_dir), "--out", str(out)],
                ["verify", "--bundle", str(out)]]
    piped = []
    for argv in commands:  # captured stderr is not a TTY: nothing there
        assert journal_cmd.main(argv) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        piped.append(captured.out.replace(str(out), "OUT"))
    for argv, stdout in zip(commands, piped, strict=True):
        tty = _Tty()
        monkeypatch.setattr("sys.stderr", tty)
        assert journal_cmd.main(argv) == 0
        label = argv[0]
        assert tty.getvalue().startswith(f"\r{label}: 10 events (")
        assert f"\r{label}: 20 events (" in tty.getvalue()
        assert tty.getvalue().endswith("\r\033[K")  # erased before the result
        assert capsys.readouterr().out.replace(str(out), "OUT") == stdout
    assert piped[0].startswith("OK events=25 checkpoints=1 head_position=25 head=")


async def test_cli_progress_on_tamper_keeps_the_first_stdout_line(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(data_dir)
    rewrite_record(data_dir, 17, ts_ms=1)
    monkeypatch.setattr(journal_cmd, "PROGRESS_EVERY", 5)
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert journal_cmd.main(["verify", "--data-dir", str(data_dir)]) == 1
    assert "\rverify: 15 events (" in tty.getvalue() and tty.getvalue().endswith("\r\033[K")
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("TAMPERED position=17: record under key 17 (position 17): hash is ")
