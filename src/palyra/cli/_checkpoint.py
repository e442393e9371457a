"""``palyra journal checkpoint``: through the running daemon, else on the data dir.

A running daemon holds the data dir's writer lock, so the checkpoint is asked
of it (``JournalService.CreateCheckpoint``, found via ``daemon.json`` and
``admin.token``). With no daemon running, the data dir is opened directly.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.cli._client import Target, running_daemon_target
from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalStore

EXIT_OK = 0
EXIT_ERROR = 2
DAEMON_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Made:
    """A stored checkpoint, whoever signed it."""

    position: int
    head_hash: str
    public_key: str
    signature: str
    where: str


class DaemonRefused(Exception):
    """The running daemon answered with an error (auth, permission, ...)."""


async def _via_daemon(target: Target) -> tuple[Made | None, str]:
    """The daemon's checkpoint, or ``(None, why it did not answer)``.

    Raises:
        DaemonRefused: the daemon answered, with an error.
    """
    address = f"{target.host}:{target.port}"
    channel = Channel(target.host, target.port)
    try:
        stub = v1.JournalServiceStub(channel, metadata=target.metadata)
        async with asyncio.timeout(DAEMON_TIMEOUT_S):
            reply = await stub.create_checkpoint(v1.CreateCheckpointRequest())
    except GRPCError as exc:
        raise DaemonRefused(f"the daemon at {address} refused: {exc.status.name}: "
                            f"{exc.message}") from exc
    except OSError as exc:  # refused connection, timeout
        return None, f"the daemon at {address} did not answer ({exc or type(exc).__name__})"
    finally:
        channel.close()
    return Made(reply.position, reply.head_hash, reply.public_key, reply.signature,
                f"daemon {address}"), ""


def _on_data_dir(data_dir: Path) -> Made:
    """Open the data dir (taking its writer lock) and sign the head in process.

    Raises:
        PalyraError: ``DATA_DIR_LOCKED`` when another process holds the data dir.
    """
    store = JournalStore.open(data_dir)
    try:
        made = asyncio.run(store.checkpoint())
    finally:
        store.close()
    return Made(made.position, made.head_hash, made.public_key, made.signature,
                f"data dir {data_dir}")


def locked_hint(data_dir: Path, why: str, what: str = "checkpoint") -> str:
    """What to do when the data dir is held but no daemon answered (checkpoint, prune)."""
    return (f"hint: another process holds the data dir, but no daemon answered ({why}). "
            f"If `palyra serve` owns {data_dir}, make sure it is up and {data_dir}/daemon.json "
            f"exists, then retry: the {what} is then asked of the daemon over gRPC with "
            "admin.token (or $PALYRA_ADMIN_TOKEN). Otherwise wait for the other palyra "
            "command to finish, or stop that process, and retry.")


T = TypeVar("T")


def daemon_else_data_dir(
    data_dir: Path,
    via_daemon: Callable[[Target], Coroutine[object, object, tuple[T | None, str]]],
    on_data_dir: Callable[[], T],
    what: str,
) -> T | None:
    """Ask the running daemon (it holds the writer), else open the data dir; a failure is
    printed (with a hint when the dir is held but no daemon answered) and gives None."""
    why = "no live daemon.json in the data dir"
    target = running_daemon_target(data_dir)
    try:
        made: T | None = None
        if target is not None:
            made, why = asyncio.run(via_daemon(target))
        return made if made is not None else on_data_dir()
    except DaemonRefused as exc:
        print(f"ERROR {exc}", file=sys.stderr)
    except PalyraError as exc:
        print(f"ERROR {exc.code.value}: {exc.message}", file=sys.stderr)
        if exc.code is ErrorCode.DATA_DIR_LOCKED:
            print(locked_hint(data_dir, why, what), file=sys.stderr)
    except OSError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
    return None


def run(data_dir: Path) -> int:
    """Take one checkpoint; print it (or the failure) and return the exit code."""
    made = daemon_else_data_dir(data_dir, _via_daemon, lambda: _on_data_dir(data_dir),
                                "checkpoint")
    if made is None:
        return EXIT_ERROR
    print(f"checkpoint position={made.position} head={made.head_hash} "
          f"key={made.public_key} signature={made.signature} by={made.where}")
    return EXIT_OK
