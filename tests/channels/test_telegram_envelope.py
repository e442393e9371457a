"""A Telegram update's envelope: media and the sender's display name, shape by shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from palyra.channels.adapters import telegram


def _update(**message: Any) -> telegram.Update:
    sender = message.pop("sender", {"id": 42, "first_name": "Ada"})
    body = {"update_id": 1, "message": {"message_id": 7, "chat": {"id": 42, "type": "private"},
                                        "from": sender, **message}}
    return telegram.decode(json.dumps(body).encode())


@pytest.mark.parametrize(("media", "expected"), [
    ({}, False),
    ({"photo": []}, False),
    ({"document": None, "sticker": None}, False),
    ({"photo": [{"file_id": "p"}]}, True),
    ({"document": {"file_id": "d"}}, True),
    ({"video": {"file_id": "v"}}, True),
    ({"voice": {"file_id": "o"}}, True),
    ({"audio": {"file_id": "a"}}, True),
    ({"sticker": {"file_id": "s"}}, True),
])
def test_media_is_any_attachment_that_is_present(media: dict[str, Any], expected: bool) -> None:
    env = telegram.envelope("telegram:bot", _update(text="hi", **media), me=1, username="bot")
    assert env is not None and env.has_media is expected


@pytest.mark.parametrize(("sender", "display"), [
    ({"id": 5, "username": "ada", "first_name": "Ada", "last_name": "L"}, "ada"),
    ({"id": 5, "first_name": "Ada", "last_name": "Lovelace"}, "Ada Lovelace"),
    ({"id": 5, "first_name": "Ada"}, "Ada"),
    ({"id": 5, "last_name": "Lovelace"}, "Lovelace"),
    ({"id": 5}, ""),
])
def test_display_name_is_the_username_else_the_names_present(sender: dict[str, Any],
                                                             display: str) -> None:
    env = telegram.envelope("telegram:bot", _update(text="hi", sender=sender), me=1,
                            username="bot")
    assert env is not None and env.sender_display == display


def test_a_media_message_without_text_is_kept_and_one_without_either_is_not() -> None:
    assert telegram.envelope("telegram:bot", _update(sticker={"file_id": "s"}), me=1,
                             username="bot") is not None
    assert telegram.envelope("telegram:bot", _update(), me=1, username="bot") is None
