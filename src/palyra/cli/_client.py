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

from grpclib.const import Status
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
EXIT_SETUP = 2
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
    # Where the token came from ("" when none was found) and the data dir
    # looked in: what a failure message must name for the user to act on it.
    token_source: str = ""
    data_dir: Path = Path("palyra-data")


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
    token, token_source = _token(args, data_dir)
    metadata = {
        "x-palyra-principal": (args.principal or os.environ.get("PALYRA_PRINCIPAL")
                               or f"admin:{_login()}"),
        "x-palyra-device-id": args.device_id or _device_id(data_dir),
    }
    if token:
        metadata["authorization"] = f"Bearer {token}"
    if args.channel:
        metadata["x-palyra-channel"] = args.channel
    return Target(host, port_number, metadata, token_source, data_dir)


def _token(args: argparse.Namespace, data_dir: Path) -> tuple[str, str]:
    if args.token:
        return args.token, "--token"
    if os.environ.get("PALYRA_ADMIN_TOKEN"):
        return os.environ["PALYRA_ADMIN_TOKEN"], "$PALYRA_ADMIN_TOKEN"
    stored = read_admin_token(data_dir)
    if stored:
        return stored, str(data_dir / "admin.token")
    return "", ""


class CliSetupError(Exception):
    """The command cannot be made as asked (no data dir, wrong daemon): one line, exit 2."""


def _no_token(target: Target) -> CliSetupError:
    if not target.data_dir.is_dir():
        return CliSetupError(f"no {target.data_dir} here; pass --data-dir (the daemon's data "
                             "dir, holding admin.token) or --token / $PALYRA_ADMIN_TOKEN")
    return CliSetupError(f"{target.data_dir} has no admin.token (the daemon was started with "
                         "$PALYRA_ADMIN_TOKEN?); pass --token or set $PALYRA_ADMIN_TOKEN")


def _refused(target: Target, exc: GRPCError) -> CliSetupError | GRPCError:
    # A token the daemon does not know at all, from a data dir: most likely the
    # address names another daemon than the one of that data dir.
    if exc.status is not Status.UNAUTHENTICATED or not (exc.message or "").startswith(
            "invalid token"):
        return exc
    return CliSetupError(
        f"the daemon at {target.host}:{target.port} does not know the token from "
        f"{target.token_source}: it is not the daemon of {target.data_dir}, or was started "
        "with another $PALYRA_ADMIN_TOKEN; pass the --data-dir of the daemon you mean "
        "(or --address with --token)")


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
    usage: v1.UsageServiceStub
    metadata: dict[str, str]


@contextlib.asynccontextmanager
async def connect(args: argparse.Namespace) -> AsyncIterator[Stubs]:
    """Open a channel to the daemon for the duration of one command."""
    target = resolve_target(args)
    if not target.token_source:
        raise _no_token(target)
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
            usage=v1.UsageServiceStub(channel, metadata=target.metadata),
            metadata=target.metadata,
        )
    except GRPCError as exc:
        raise _refused(target, exc) from None
    finally:
        channel.close()


def report_error(exc: BaseException) -> int:
    """Print a client-side failure the way a user can act on it; return the exit code."""
    if isinstance(exc, CliSetupError):
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP
    if isinstance(exc, GRPCError):
        print(f"error: {exc.status.name}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    if isinstance(exc, (ConnectionError, OSError)):
        print(f"error: cannot reach the daemon ({exc}); is `palyra serve` running?",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    raise exc
