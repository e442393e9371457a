"""``palyra doctor``: one line per check, exit 1 on any failure, each failure saying why."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from palyra.cli.main import main as palyra_main
from palyra.daemon.discovery import DaemonInfo, write_daemon_info
from palyra.journal import EventDraft, JournalStore
from palyra.ops.doctor import journal_checks


def _doctor(capsys: pytest.CaptureFixture[str], config: Path, data_dir: Path) -> tuple[int, str]:
    code = palyra_main(["doctor", "--config", str(config), "--data-dir", str(data_dir),
                        "--timeout", "1"])
    return code, capsys.readouterr().out


def _lines(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("ok", "FAIL"):
            name, _, detail = rest.strip().partition(": ")
            found[name] = f"{status} {detail}"
    return found


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    config = tmp_path / "palyra.toml"
    config.write_text('[grpc]\nport = 0\n[http]\nport = 0\n')
    return config, data_dir


async def _journal(data_dir: Path, events: int) -> None:
    with JournalStore.open(data_dir) as store:
        await store.append([EventDraft(kind="note", actor="user:d", payload={"i": i},
                                       session_id="01J00000000000000000000000")
                            for i in range(events)])


async def test_a_sound_setup_passes_every_check(
        setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, data_dir = setup
    await _journal(data_dir, 5)
    code, out = _doctor(capsys, config, data_dir)
    assert code == 0, out
    lines = _lines(out)
    assert all(v.startswith("ok") for v in lines.values()), out
    assert {"config", "grpc_port", "http_port", "data_dir", "disk", "journal_map", "clock",
            "journal_verify", "embedder", "policy"} <= set(lines)
    assert "5 events" in lines["journal_verify"]


def test_a_bad_value_is_named_with_file_line_and_range(
        setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, data_dir = setup
    config.write_text('[grpc]\nport = 0\n[http]\nhost = "127.0.0.1"\nport = 70000\n')
    code, out = _doctor(capsys, config, data_dir)
    assert code == 1
    assert out.startswith(f"FAIL config: {config}:5: ")
    assert "http.port" in out and "0..65535" in out


def test_ports_held_by_another_process_fail_and_by_this_daemon_pass(
        setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, data_dir = setup
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        config.write_text(f'[grpc]\nport = 0\n[http]\nport = {port}\n')
        code, out = _doctor(capsys, config, data_dir)
        assert code == 1
        assert _lines(out)["http_port"].startswith("FAIL"), out
        write_daemon_info(data_dir, DaemonInfo(pid=os.getpid(), grpc_host="127.0.0.1",
                                               grpc_port=1, http_host="127.0.0.1",
                                               http_port=port, data_dir=str(data_dir),
                                               version="t"))
        code, out = _doctor(capsys, config, data_dir)
        assert _lines(out)["http_port"].startswith("ok"), out
        assert f"pid {os.getpid()}" in _lines(out)["http_port"]


def test_data_dir_mode_policy_and_unreachable_endpoint_fail(
        setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config, data_dir = setup
    os.chmod(data_dir, 0o755)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "broken.cedar").write_text("permit(principal, action resource);")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]  # bound, never listening: connections are refused
        config.write_text('[grpc]\nport = 0\n[http]\nport = 0\n[provider]\nkind = "openai"\n'
                          f'model = "m"\nbase_url = "http://127.0.0.1:{dead}"\n'
                          'api_key_env = ""\n')
        code, out = _doctor(capsys, config, data_dir)
    lines = _lines(out)
    assert code == 1
    assert lines["data_dir"].startswith("FAIL") and "0755" in lines["data_dir"]
    assert lines["policy"].startswith("FAIL") and "broken.cedar" in lines["policy"], out
    assert lines["provider openai"].startswith("FAIL"), out


async def test_a_clock_behind_the_journal_fails(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await _journal(data_dir, 1)
    with JournalStore.open(data_dir) as store:
        last = store.read_range(0, 1)[0].ts_ms
    checks = {c.name: c for c in journal_checks(data_dir, now_ms=lambda: last - 60_000)}
    assert not checks["clock"].ok and "60.0 s behind" in checks["clock"].detail
    checks = {c.name: c for c in journal_checks(data_dir, now_ms=lambda: last)}
    assert checks["clock"].ok
