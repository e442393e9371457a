"""``palyra serve``: run the daemon in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from palyra.config import load_config
from palyra.core.errors import PalyraError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and its flags."""
    parser = commands.add_parser(
        "serve", help="run the daemon (gRPC + HTTP) in the foreground",
        description="Run the daemon. Settings layer: --config TOML < PALYRA_* env < flags.",
    )
    parser.add_argument("--config", type=Path, help="TOML config file (or $PALYRA_CONFIG)")
    parser.add_argument("--data-dir", type=Path, help="data dir (default ./palyra-data)")
    parser.add_argument("--grpc-host", help="gRPC bind address (default 127.0.0.1)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port (default 7443; 0 = ephemeral)")
    parser.add_argument("--http-host", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--http-port", type=int, help="HTTP port (default 7142; 0 = ephemeral)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["kv", "json", "console"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load the layered config and serve until a signal; exit 0 after a clean drain."""
    # Imported here so client commands do not pay for uvicorn/litestar imports.
    from palyra.daemon.daemon import run_daemon

    try:
        config = load_config(
            config_file=args.config,
            env=os.environ,
            overrides={
                "data_dir": args.data_dir,
                "grpc.host": args.grpc_host,
                "grpc.port": args.grpc_port,
                "http.host": args.http_host,
                "http.port": args.http_port,
                "log.level": args.log_level,
                "log.format": args.log_format,
            },
        )
        return asyncio.run(run_daemon(config))
    except PalyraError as exc:
        print(f"palyra serve: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 2
