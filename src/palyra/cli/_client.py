"""How CLI commands reach a running daemon over gRPC.

Address and token resolve from flags, then ``PALYRA_ADDRESS`` /
``PALYRA_ADMIN_TOKEN``, then the data dir (``daemon.json``, ``admin.token``),
then the defaults (127.0.0.1:7443).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.config import DEFAULT_GRPC_PORT
from palyra.core.ids import is_ulid, new_ulid
from palyra.daemon.datadir import write_private
from palyra.daemon.discovery import read_daemon_info
from palyra.daemon.tokens import read_admin_token
from palyra.transport.grpc import ClientCodec, CorkedChannel

DEVICE_FILE = "cli.device_id"
EXIT_ERROR = 1
EXIT_UNREACHABLE = 3


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """Flags every client command shares."""
    group = parser.add_argument_group("connection")
    group.add_argument("--data-dir", type=Path, help="daemon data dir (default $PALYRA_DATA_DIR "
                       "or ./palyra-data): read daemon.json and admin.token from it")
    group.add_argument("--address", help="HOST:PORT of the gRPC listener (or $PALYRA_ADDRESS)")
    group.add_argument("--token", help="bearer token (or $PALYRA_ADMIN_TOKEN)")
    group.add_argument("--principal", help="caller principal (or $PALYRA_PRINCIPAL; default "
                       "admin:<login>: the CLI is the operator's console and holds the admin token)")
    group.add_argument("--device-id", help="caller device ULID (default: stored per data dir)")
    group.add_argument("--channel", default="", help="caller channel header")


@dataclass(frozen=True, slots=True)
class Target:
    """Where and as whom to call."""

    host: str
    port: int
    metadata: dict[str, str]


def resolve_target(args: argparse.Namespace) -> Target:
    """Resolve address, token and identity headers from flags, env and data dir."""
    data_dir = args.data_dir or Path(os.environ.get("PALYRA_DATA_DIR", "palyra-data"))
    address = args.address or os.environ.get("PALYRA_ADDRESS", "")
    if address:
        host, _, port = address.rpartition(":")
        host, port_number = host or "127.0.0.1", int(port)
    else:
        info = read_daemon_info(data_dir)
        if info is not None and info.alive():
            host, port_number = info.grpc_host, info.grpc_port
        else:
            host, port_number = "127.0.0.1", DEFAULT_GRPC_PORT
    token = args.token or os.environ.get("PALYRA_ADMIN_TOKEN") or read_admin_token(data_dir) or ""
    metadata = {
        "x-palyra-principal": (args.principal or os.environ.get("PALYRA_PRINCIPAL")
                               or f"admin:{_login()}"),
        "x-palyra-device-id": args.device_id or _device_id(data_dir),
    }
    if token:
        metadata["authorization"] = f"Bearer {token}"
    if args.channel:
        metadata["x-palyra-channel"] = args.channel
    return Target(host, port_number, metadata)


def running_daemon_target(data_dir: Path) -> Target | None:
    """The daemon that published ``<data_dir>/daemon.json``, if its process is alive.

    Token and identity resolve as for every client command (``$PALYRA_ADMIN_TOKEN``
    or ``admin.token``; ``$PALYRA_PRINCIPAL`` or ``admin:<login>``).
    """
    info = read_daemon_info(data_dir)
    if info is None or not info.alive():
        return None
    return resolve_target(argparse.Namespace(
        data_dir=data_dir, address=f"{info.grpc_host}:{info.grpc_port}", token=None,
        principal=None, device_id=None, channel=""))


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _device_id(data_dir: Path) -> str:
    # Sessions are bound to (principal, device); a stable device id lets a
    # later `palyra chat` continue the same sessions.
    path = data_dir / DEVICE_FILE
    with contextlib.suppress(OSError):
        stored = path.read_text(encoding="utf-8").strip()
        if is_ulid(stored):
            return stored
    device = new_ulid()
    # Only into an existing data dir (the CLI does not create one); 0600.
    with contextlib.suppress(OSError):
        write_private(path, device + "\n")
    return device


@dataclass(slots=True)
class Stubs:
    """The service stubs over one channel, plus the call metadata."""

    gateway: v1.GatewayServiceStub
    approvals: v1.ApprovalsServiceStub
    tokens: v1.TokensServiceStub
    memory: v1.MemoryServiceStub
    channels: v1.ChannelsServiceStub
    tasks: v1.TasksServiceStub
    watchdog: v1.WatchdogServiceStub
    learning: v1.LearningServiceStub
    metadata: dict[str, str]


@contextlib.asynccontextmanager
async def connect(args: argparse.Namespace) -> AsyncIterator[Stubs]:
    """Open a channel to the daemon for the duration of one command."""
    target = resolve_target(args)
    channel = CorkedChannel(target.host, target.port, codec=ClientCodec())
    try:
        yield Stubs(
            gateway=v1.GatewayServiceStub(channel, metadata=target.metadata),
            approvals=v1.ApprovalsServiceStub(channel, metadata=target.metadata),
            tokens=v1.TokensServiceStub(channel, metadata=target.metadata),
            memory=v1.MemoryServiceStub(channel, metadata=target.metadata),
            channels=v1.ChannelsServiceStub(channel, metadata=target.metadata),
            tasks=v1.TasksServiceStub(channel, metadata=target.metadata),
            watchdog=v1.WatchdogServiceStub(channel, metadata=target.metadata),
            learning=v1.LearningServiceStub(channel, metadata=target.metadata),
            metadata=target.metadata,
        )
    finally:
        channel.close()


def report_error(exc: BaseException) -> int:
    """Print a client-side failure the way a user can act on it; return the exit code."""
    if isinstance(exc, GRPCError):
        print(f"error: {exc.status.name}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    if isinstance(exc, (ConnectionError, OSError)):
        print(f"error: cannot reach the daemon ({exc}); is `palyra serve` running?",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    raise exc
