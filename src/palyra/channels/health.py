"""What ListChannels shows: each channel, how it is set up, and figures of its health.

Pure: the caller streams the outbox's send tasks and the quarantine past
:func:`channel_health`; nothing here reads the journal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from palyra.channels.config import ChannelsConfig

TWO_WAY = "two_way"
"""Replies are sent back through the channel's adapter."""
INBOUND_ONLY = "inbound_only"
"""Messages come in; replies go only to a RouteMessage caller (no outbox)."""
RPC = "rpc"
"""No adapter: the channel's messages come through RouteMessage."""
_PENDING = frozenset({"queued", "running", "paused", "cancel_requested"})
_FAILED = frozenset({"failed", "expired"})


@dataclass(frozen=True, slots=True)
class ChannelHealth:
    channel: str
    kind: str
    mode: str
    dm_policy: str
    concurrency: int
    outbox_pending: int = 0
    outbox_failed: int = 0
    quarantined: int = 0


def channel_health(config: ChannelsConfig, sends: Iterable[tuple[str, str]],
                   quarantined: Iterable[str]) -> list[ChannelHealth]:
    """Every configured channel (adapters, then policy tables), and any other channel
    with quarantined messages, sorted by id.

    ``sends`` are ``(channel, task state)`` of the outbox's send tasks;
    ``quarantined`` the channel of each quarantined message.
    """
    kinds: dict[str, tuple[str, str]] = {}
    for name, slack in config.slack.items():
        kinds[f"slack:{name}"] = ("slack", TWO_WAY if slack.bot_token else INBOUND_ONLY)
    for name, hook in config.webhooks.items():
        kinds[f"webhook:{name}"] = ("webhook", TWO_WAY if hook.reply_url else INBOUND_ONLY)
    for channel in config.policy:
        kinds.setdefault(channel, (RPC, INBOUND_ONLY))
    pending: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for channel, state in sends:
        if state in _PENDING:
            pending[channel] += 1
        elif state in _FAILED:
            failed[channel] += 1
    kept = Counter(quarantined)
    for channel in (*pending, *failed, *kept):
        kinds.setdefault(channel, (RPC, INBOUND_ONLY))
    out = []
    for channel, (kind, mode) in sorted(kinds.items()):
        policy = config.policy_for(channel)
        out.append(ChannelHealth(channel, kind, mode, policy.dm_policy, policy.concurrency,
                                 pending[channel], failed[channel], kept[channel]))
    return out
