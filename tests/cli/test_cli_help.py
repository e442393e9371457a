"""Every command group lists its subcommands, one line each, and answers --help on stdout."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

GROUPS = {
    "": ["serve", "chat", "runs", "sessions", "approvals", "tokens", "journal", "agents",
         "memory", "channels", "tasks", "incidents", "learning", "config", "doctor", "skills",
         "usage", "policy"],
    "agents": ["list", "show", "create", "update", "delete", "bind", "bindings", "unbind"],
    "memory": ["ingest", "search", "list", "show", "delete"],
    "channels": ["list", "pair", "codes", "grants", "revoke", "quarantine", "connect"],
    "tasks": ["list", "show", "cancel"],
    "incidents": ["list", "ack"],
    "learning": ["list", "accept", "reject"],
    "config": ["show"],
    "policy": ["reload"],
    "tokens": ["issue", "list", "revoke"],
    "sessions": ["list", "posture"],
    "approvals": ["list", "approve", "deny"],
    "runs": ["tail", "expand", "abort"],
    "journal": ["verify", "export", "checkpoint", "prune", "traces"],
}


def _palyra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("flag", [(), ("--help",)])
def test_a_group_lists_its_subcommands(group: str, flag: tuple[str, ...]) -> None:
    run = _palyra(*([group] if group else []), *flag)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    for sub in GROUPS[group]:
        # The subcommand and its one-line help share a line.
        assert any(re.match(rf"\s+{re.escape(sub)}\s+\S", line) for line in lines), (sub, run.stdout)


def test_an_unknown_journal_subcommand_is_a_usage_error() -> None:
    run = _palyra("journal", "bogus")
    assert run.returncode == 2 and "one of: verify, export, checkpoint, prune, traces" in run.stderr
