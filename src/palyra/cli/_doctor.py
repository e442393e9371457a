"""``palyra doctor``: one line per check of what a user gets wrong; exit 1 when any fails."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from palyra.config import load_config
from palyra.daemon.discovery import read_daemon_info
from palyra.ops.doctor import (
    config_check,
    data_dir_check,
    disk_check,
    embedder_check,
    endpoint_checks,
    journal_checks,
    policy_check,
    port_checks,
)
from palyra.ops.readiness import Check


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``doctor``."""
    parser = commands.add_parser(
        "doctor", help="check a set-up: config, ports, disk, journal, endpoints",
        description="Check what a palyra set-up gets wrong, one line per check; exit status "
                    "1 when any check fails. Safe beside a running daemon (read-only).")
    parser.add_argument("--config", type=Path, help="TOML config file (or $PALYRA_CONFIG)")
    parser.add_argument("--data-dir", type=Path, help="data dir (default from the config)")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds each remote endpoint gets to answer (default 5)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run every check; print ``ok``/``FAIL`` lines; 0 when all pass."""
    out = out or sys.stdout
    path = args.config or (Path(os.environ["PALYRA_CONFIG"]) if os.environ.get("PALYRA_CONFIG")
                           else None)
    check, config = config_check(path, lambda: load_config(
        config_file=path, env=os.environ, overrides={"data_dir": args.data_dir}))
    checks: list[Check] = [check]
    _print(out, checks)
    if config is None:
        return 1
    data_dir = config.data_dir
    info = read_daemon_info(data_dir)
    alive = info.pid if info is not None and _alive(info.pid) else None
    for group in (port_checks(config, alive), [data_dir_check(data_dir), disk_check(data_dir)],
                  journal_checks(data_dir), [embedder_check(config, os.environ),
                                             policy_check(config)],
                  endpoint_checks(config, args.timeout)):
        for one in group:
            checks.append(one)
            _print(out, [one])
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed", file=out)
    return 1 if failed else 0


def _print(out: TextIO, checks: Iterable[Check]) -> None:
    for check in checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}", file=out,
              flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
