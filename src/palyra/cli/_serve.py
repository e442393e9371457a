"""``palyra serve``: run the daemon in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from palyra.config import load_config
from palyra.core.errors import PalyraError

# Flag → the dotted setting it overrides (None: not given).
FLAG_SETTINGS = {
    "data_dir": "data_dir", "grpc_host": "grpc.host", "grpc_port": "grpc.port",
    "http_host": "http.host", "http_port": "http.port", "log_level": "log.level",
    "log_format": "log.format",
}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The settings flags ``serve`` and ``config show`` share."""
    parser.add_argument("--config", type=Path, help="TOML config file (or $PALYRA_CONFIG)")
    parser.add_argument("--data-dir", type=Path, help="data dir (default ./palyra-data)")
    parser.add_argument("--grpc-host", help="gRPC bind address (default 127.0.0.1)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port (default 7443; 0 = ephemeral)")
    parser.add_argument("--http-host", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--http-port", type=int, help="HTTP port (default 7142; 0 = ephemeral)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["kv", "json", "console"])


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given, as dotted settings."""
    return {setting: getattr(args, flag) for flag, setting in FLAG_SETTINGS.items()}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and its flags."""
    parser = commands.add_parser(
        "serve", help="run the daemon (gRPC + HTTP) in the foreground",
        description="Run the daemon. Settings layer: --config TOML < PALYRA_* env < flags.",
    )
    add_config_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load the layered config and serve until a signal; exit 0 after a clean drain."""
    # Imported here so client commands do not pay for uvicorn/litestar imports.
    from palyra.daemon.daemon import run_daemon

    try:
        config = load_config(config_file=args.config, env=os.environ, overrides=overrides(args))
        # uvloop, not asyncio's own loop: the daemon's event-loop thread is its bottleneck,
        # and uvloop's transports, timers and callbacks cost less CPU per step over HTTP/SSE
        # and gRPC alike (measured with `bench tool-loop --transport http`, docs/bench.md).
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run_daemon(config))
    except PalyraError as exc:
        print(f"palyra serve: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 2
