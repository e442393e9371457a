"""``palyra policy reload``: the running daemon reads its policy files again (SIGHUP).

The policy files live beside the daemon, so this runs on its host: it signals the
daemon named by the data dir's ``daemon.json`` and waits until ``GetHealth``'s
``policy`` check reports that reload. A set that fails to load leaves the one in
force and makes the daemon not ready; the command then exits 2 with the daemon's
reason (the file and line).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from palyra_gen.palyra import v1

from palyra.cli._client import CliSetupError, Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.core.errors import ErrorCode, PalyraError
from palyra.daemon.discovery import read_daemon_info

WAIT_S = 10.0
POLL_S = 0.05


async def _policy_check(stubs: Stubs) -> v1.HealthCheck:
    health = await stubs.gateway.get_health(v1.GetHealthRequest())
    for check in health.checks:
        if check.name == "policy":
            return check
    raise PalyraError("the daemon reports no policy check", code=ErrorCode.UNIMPLEMENTED)


def _daemon_pid(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or Path(os.environ.get("PALYRA_DATA_DIR", "palyra-data"))
    info = read_daemon_info(data_dir)
    if info is None:
        raise CliSetupError(f"no running daemon in {data_dir}; policy reload signals the "
                            "daemon, so run it on the daemon's host with its --data-dir")
    return info.pid


async def _reload(stubs: Stubs, args: argparse.Namespace) -> Shown:
    pid = _daemon_pid(args)
    before = await _policy_check(stubs)
    os.kill(pid, signal.SIGHUP)
    for _ in range(int(WAIT_S / POLL_S)):
        check = await _policy_check(stubs)
        if check.detail != before.detail:  # the detail counts reloads: it changes once done
            break
        await asyncio.sleep(POLL_S)
    else:
        raise PalyraError(f"the daemon did not report the reload within {WAIT_S:g} s",
                          code=ErrorCode.DEADLINE_EXCEEDED)
    if not check.ok:  # the user's files to fix: one line, exit 2
        raise CliSetupError(check.detail)
    return Shown(check, line=check.detail)


def add_parser(commands: SubParsers) -> None:
    """Register the ``policy`` group."""
    sub = add_group(commands, "policy", "the running daemon's Cedar policy set")
    add_command(sub, "reload", "read the policy files again (SIGHUP to the daemon)", _reload,
                description="Make the running daemon read its policy files again (the shipped "
                            "defaults and policies/*.cedar) and wait until it has. A set that "
                            "fails to load leaves the one in force, makes /readyz fail and "
                            "exits 2 naming the file and line.")
