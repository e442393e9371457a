"""``bench ingress`` sends every message to a conversation of its own, on every platform.

A message to a conversation that already had one is a different workload: its run
assembles the conversation's recent turns (and the first such run in a daemon loads the
token counter's tokenizer). The bench measures first messages only, so a tag's events
must not land in another tag's conversations (warm-up, load and races reuse indices).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.ingress_platforms import PLATFORMS


def _conversation(name: str, body: dict[str, Any]) -> str:
    """The conversation a platform's request names, read as the daemon's adapter reads it."""
    if name == "webhook":
        return str(body["data"]["conversation_id"])
    if name == "slack":
        return str(body["event"]["channel"])
    if name == "telegram":
        return str(body["message"]["chat"]["id"])
    return str(body["channel_id"])  # discord


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_every_event_of_every_tag_has_a_conversation_of_its_own(name: str) -> None:
    platform = PLATFORMS[name]()
    with platform.fake:  # (made with its socket: entered, so that leaving closes it)
        events = [platform.event(tag, i)
                  for tag, count in (("warm", 16), ("load", 40), ("race", 4)) for i in range(count)]
    conversations = [_conversation(name, json.loads(event.body)) for event in events]
    assert len(set(conversations)) == len(events), sorted(conversations)
