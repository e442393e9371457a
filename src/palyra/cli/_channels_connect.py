"""``palyra channels connect telegram NAME --url URL``: point a platform at this daemon.

For Telegram this generates the webhook's secret token, stores it (0600) in the
data dir where the daemon's ingress reads it, and calls ``setWebhook`` with the
daemon's public ingress URL and that secret. A ``webhook_secret`` set in the
config is used instead of a generated one (and not stored).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
from pathlib import Path

from palyra.channels.adapters.telegram import BotApi
from palyra.channels.ingress import telegram_secret_path
from palyra.config import load_config
from palyra.core.errors import PalyraError
from palyra.daemon.datadir import ensure_data_dir, write_private


def add_connect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``channels connect`` in the ``channels`` group."""
    connect = sub.add_parser("connect", help="register this daemon with a platform",
                             description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    connect.add_argument("platform", choices=["telegram"])
    connect.add_argument("name", help="the adapter's name: [channels.telegram.NAME]")
    connect.add_argument("--url", required=True,
                         help="the daemon's public base URL, e.g. https://palyra.example.org")
    connect.add_argument("--config", type=Path, help="TOML config file (or $PALYRA_CONFIG)")
    connect.add_argument("--data-dir", type=Path, help="data dir (default ./palyra-data)")
    connect.set_defaults(handler=lambda args: asyncio.run(_connect(args)))


async def _connect(args: argparse.Namespace) -> int:
    try:
        config = load_config(config_file=args.config, env=os.environ,
                             overrides={"data_dir": args.data_dir})
    except PalyraError as exc:
        print(f"palyra channels connect: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 2
    bot = config.channels.telegram.get(args.name)
    if bot is None:
        print(f"palyra channels connect: no [channels.telegram.{args.name}] in the config",
              file=sys.stderr)
        return 2
    if bot.mode != "webhook":
        print(f"palyra channels connect: telegram {args.name} has mode = {bot.mode!r}; "
              "set mode = \"webhook\" to receive updates by webhook", file=sys.stderr)
        return 2
    secret = bot.webhook_secret
    if not secret:
        secret = secrets.token_urlsafe(32)  # Telegram takes 1-256 of A-Z a-z 0-9 _ -
        path = telegram_secret_path(config.data_dir, args.name)
        ensure_data_dir(config.data_dir)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        write_private(path, secret + "\n")
    url = f"{args.url.rstrip('/')}/v1/ingress/telegram/{args.name}"
    api = BotApi(bot.api_base_url, bot.bot_token)
    try:
        await api.set_webhook(url, secret)
    except Exception as exc:
        print(f"palyra channels connect: {exc}", file=sys.stderr)
        return 1
    finally:
        await api.aclose()
    print(f"telegram:{args.name}: updates go to {url} (secret token stored)")
    return 0
