"""``palyra chat`` as a user drives it: banner, /help, postures, approvals explained, Ctrl-D.

The real CLI process talks gRPC to a real daemon; its stdin is a pipe, so every
prompt is answered (or closed) exactly as a terminal user would.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow

TEXT = ("Start from 0 and add 1 to the running total {k} times, one add tool call per step, "
        "then reply with the final result.")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env()
    with DaemonProcess(tmp_path_factory.mktemp("chat") / "data", env=env) as proc:
        yield proc


def _command(daemon: DaemonProcess, *args: str) -> list[str]:
    return [sys.executable, "-m", "palyra.cli.main", *args, "--data-dir", str(daemon.data_dir),
            "--principal", "user:chatter"]


def _env() -> dict[str, str]:
    return clean_env()


def test_help_postures_and_an_explained_approval(daemon: DaemonProcess) -> None:
    typed = "\n".join(["/help", "", "/bogus", "/posture add ask_each_time", TEXT.format(k=2),
                       "a", "/status", "/quit"]) + "\n"
    chat = subprocess.run(_command(daemon, "chat", "--session", "explained"), input=typed,
                          capture_output=True, text=True, env=_env(), timeout=60, check=False)
    out = chat.stdout
    assert chat.returncode == 0, chat.stderr + out
    assert out.startswith("palyra chat: 127.0.0.1:") and "session explained" in out
    assert "/help lists commands; an empty line is ignored; Ctrl-D or /quit ends" in out
    assert "/posture TOOL POSTURE" in out and "/abort" in out  # /help, not sent to the model
    assert "unknown command /bogus" in out
    assert "add: ask_each_time in this session" in out
    # The question says what each answer covers, the "session" grant included.
    assert "s  allow this exact call (same tool, same arguments) again in this session" in out
    assert "a  always allow add in this session, any arguments" in out
    # "a" set the posture, so only the first of the two calls asked.
    assert out.count("? approval needed: add") == 1
    assert "add: always_allow in this session" in out
    assert "result=2" in out
    assert re.search(r"run \w+: in_progress, 3 turns, 2 tool calls", out), out
    assert "[run " in out and "done: completed]" in out
    sessions = subprocess.run(_command(daemon, "sessions", "list"), capture_output=True,
                              text=True, env=_env(), timeout=60, check=False)
    assert "explained" in sessions.stdout
    inherit = subprocess.run(_command(daemon, "sessions", "posture", "explained", "add",
                                      "inherit"), capture_output=True, text=True, env=_env(),
                             timeout=60, check=False)
    assert inherit.returncode == 0, inherit.stderr
    assert re.match(r"session \w{26} \(explained\): add -> inherit", inherit.stdout)


async def _read_until(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> re.Match[str]:
    async with asyncio.timeout(30):
        while True:
            if match := re.search(pattern, "".join(seen)):
                return match
            chunk = await stream.read(4096)
            if not chunk:
                raise AssertionError(f"output ended before {pattern!r}: {''.join(seen)}")
            seen.append(chunk.decode())


async def test_ctrl_d_at_an_approval_ends_the_chat_at_once_and_leaves_it_pending(
        daemon: DaemonProcess) -> None:
    posture = await asyncio.to_thread(
        subprocess.run, _command(daemon, "sessions", "posture", "pending-one", "add",
                                 "ask_each_time"), capture_output=True, text=True, env=_env(),
        timeout=60, check=False)
    assert posture.returncode != 0 and "NOT_FOUND" in posture.stderr  # no such session yet
    proc = await asyncio.create_subprocess_exec(
        *_command(daemon, "chat", "--session", "pending-one"), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[str] = []
    await _read_until(proc.stdout, r"you> ", seen)
    proc.stdin.write(b"/posture add ask_each_time\n" + TEXT.format(k=1).encode() + b"\n")
    await proc.stdin.drain()
    match = await _read_until(proc.stdout, r"approve\|deny (\w{26})`", seen)
    proc.stdin.close()  # Ctrl-D at the question
    said = await _read_until(proc.stdout, r"the chat ends now; approval (\w{26}) stays "
                                          r"pending and run (\w{26}) waits for it", seen)
    assert said.group(1) == match.group(1)
    # It ends without waiting for anyone to decide (no silent interval, no prompt).
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    rest = (await proc.stdout.read()).decode()
    assert "answer [y/s/a/n]" not in rest and "you>" not in rest
    pending = await asyncio.to_thread(subprocess.run, _command(daemon, "approvals", "list"),
                                      capture_output=True, text=True, env=_env(), timeout=60,
                                      check=False)
    assert match.group(1) in pending.stdout
    decided = await asyncio.to_thread(subprocess.run, _command(
        daemon, "approvals", "approve", match.group(1)), capture_output=True, text=True,
        env=_env(), timeout=60, check=False)
    assert decided.returncode == 0, decided.stderr
    followed = await asyncio.to_thread(subprocess.run, _command(
        daemon, "runs", "tail", said.group(2), "--follow"), capture_output=True, text=True,
        env=_env(), timeout=60, check=False)
    assert "result=1" in followed.stdout, followed.stdout + followed.stderr


async def _read_until(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> re.Match[str]:
    async with asyncio.timeout(30):
        while True:
            if match := re.search(pattern, "".join(seen)):
                return match
            chunk = await stream.read(4096)
            if not chunk:
                raise AssertionError(f"output ended before {pattern!r}: {''.join(seen)}")
            seen.append(chunk.decode())
