"""Telegram long polling: ``getUpdates`` for a daemon Telegram cannot reach.

Each update is admitted with the next offset written in its admission commit, so
the offset never runs ahead of what is durable: after a crash, polling resumes at
the first update not admitted, and Telegram (which drops updates below the offset
it was last asked for) redelivers the rest. Updates palyra ignores move the offset
in a commit of their own.
"""

from __future__ import annotations

import asyncio
import logging

from palyra.channels import records
from palyra.channels.adapters.telegram import BotApi
from palyra.channels.config import TelegramAdapterConfig
from palyra.channels.ingress import TELEGRAM_PREFIX, Ingress, offset_key, offset_write
from palyra.journal import JournalStore

log = logging.getLogger("palyra.channels")
MAX_BACKOFF_S = 60.0


def stored_offset(store: JournalStore, channel: str) -> int:
    """The offset to ask for next (0 before the first update)."""
    raw = store.get_entity(records.TABLE, offset_key(channel))
    return int(raw) if raw else 0


async def poll_telegram(name: str, cfg: TelegramAdapterConfig, api: BotApi, ingress: Ingress,
                        store: JournalStore) -> None:
    """Poll forever (a daemon background task); errors back off and retry."""
    channel = TELEGRAM_PREFIX + name
    offset = stored_offset(store, channel)
    backoff = 1.0
    while True:
        try:
            updates = await api.get_updates(offset, cfg.poll_timeout_s)
            for update in updates:
                nxt = max(offset, update.update_id + 1)
                await ingress.telegram_update(name, update, also=[offset_write(channel, nxt)])
                offset = nxt
            backoff = 1.0
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("telegram getUpdates failed (%s: %s); retrying in %.0f s",
                        type(exc).__name__, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
