"""Files palyra keeps in the data dir (besides the journal) are 0600, dirs 0700.

Checked under a permissive umask (022), the usual default that made
``daemon.json`` and ``cli.device_id`` world-readable before.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from palyra.cli._client import DEVICE_FILE, resolve_target
from palyra.daemon.datadir import ensure_data_dir, write_private
from palyra.daemon.discovery import DAEMON_FILE, DaemonInfo, read_daemon_info, write_daemon_info
from palyra.daemon.tokens import ADMIN_TOKEN_FILE, load_or_create_admin_token


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_data_dir_is_created_0700_and_an_existing_one_tightened(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "data"
    ensure_data_dir(fresh)
    assert _mode(fresh) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    ensure_data_dir(loose)
    assert _mode(loose) == 0o700


def test_admin_token_is_0600_when_created_rewritten_or_found_loose(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token, created = load_or_create_admin_token(data)
    assert created and _mode(data / ADMIN_TOKEN_FILE) == 0o600 and _mode(data) == 0o700
    os.chmod(data / ADMIN_TOKEN_FILE, 0o644)
    assert load_or_create_admin_token(data) == (token, False)
    assert _mode(data / ADMIN_TOKEN_FILE) == 0o600
    (data / ADMIN_TOKEN_FILE).write_text("")  # a crash between create and write
    os.chmod(data / ADMIN_TOKEN_FILE, 0o644)
    _, created = load_or_create_admin_token(data)
    assert created and _mode(data / ADMIN_TOKEN_FILE) == 0o600


def test_daemon_json_is_0600_and_leaves_no_temp_file(tmp_path: Path) -> None:
    ensure_data_dir(tmp_path / "data")
    info = DaemonInfo(pid=os.getpid(), grpc_host="127.0.0.1", grpc_port=1, http_host="127.0.0.1",
                      http_port=2, data_dir=str(tmp_path / "data"), version="0")
    path = write_daemon_info(tmp_path / "data", info)
    assert path.name == DAEMON_FILE and _mode(path) == 0o600
    assert read_daemon_info(tmp_path / "data") == info
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [DAEMON_FILE]
    os.chmod(path, 0o644)
    write_daemon_info(tmp_path / "data", info)  # a rewrite replaces the loose file
    assert _mode(path) == 0o600


def test_cli_device_id_is_0600_and_stable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ensure_data_dir(data)
    args = argparse.Namespace(data_dir=data, address="127.0.0.1:1", token="t", principal="user:x",
                              device_id=None, channel="")
    first = resolve_target(args).metadata["x-palyra-device-id"]
    assert _mode(data / DEVICE_FILE) == 0o600
    assert resolve_target(args).metadata["x-palyra-device-id"] == first


def test_cli_does_not_create_a_missing_data_dir(tmp_path: Path) -> None:
    args = argparse.Namespace(data_dir=tmp_path / "absent", address="127.0.0.1:1", token="t",
                              principal="user:x", device_id=None, channel="")
    assert resolve_target(args).metadata["x-palyra-device-id"]
    assert not (tmp_path / "absent").exists()


def test_write_private_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("old")
    os.chmod(path, 0o666)
    write_private(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
