"""``docs/channels.md`` stays true: every setting and payload field is documented with its
real default, and each platform's worked example runs as written against ``palyra serve``.

The examples are read from the fenced blocks marked ``example=<name>``; the test only
points the outbound URLs at local fakes (the Slack Web API, a webhook receiver).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from palyra.channels.adapters.standard_webhooks import InboundData
from palyra.channels.config import (
    ChannelPolicy,
    ChannelsConfig,
    DiscordAdapterConfig,
    SlackAdapterConfig,
    TelegramAdapterConfig,
    WebhookAdapterConfig,
)
from palyra.testing.discord import FakeDiscord
from palyra.testing.platforms import FakeSlack, WebhookReceiver, slack_headers, webhook_headers
from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.testing.telegram import FakeTelegram

DOC = Path(__file__).resolve().parents[2] / "docs" / "channels.md"
_BLOCK = re.compile(r"^```\w+ example=([\w-]+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_ROW = re.compile(r"^\| `(\w+)` \| (`[^`]*`|required) \|", re.MULTILINE)


def examples() -> dict[str, str]:
    return {name: body for name, body in _BLOCK.findall(DOC.read_text())}


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"### {title}")
    end = text.find("\n#", start + 4)
    return text[start:end if end > 0 else None]


def _documented_defaults(title: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cell in _ROW.findall(_section(title)):
        out[name] = "required" if cell == "required" else tomllib.loads(
            f"v = {cell.strip('`')}")["v"]
    return out


def _real_default(field: dataclasses.Field[Any]) -> Any:
    missing = field.default is dataclasses.MISSING
    value = field.default_factory() if missing else field.default  # type: ignore[misc]
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize(("title", "cls"), [
    ("`[channels]`", ChannelsConfig),
    ('`[channels.default]` and `[channels.policy."<channel>"]`', ChannelPolicy),
    ("`[channels.slack.<name>]`", SlackAdapterConfig),
    ("`[channels.webhooks.<name>]`", WebhookAdapterConfig),
    ("`[channels.telegram.<name>]`", TelegramAdapterConfig),
    ("`[channels.discord.<name>]`", DiscordAdapterConfig),
])
def test_every_setting_is_documented_with_its_default(title: str, cls: type[Any]) -> None:
    documented = _documented_defaults(title)
    tables = {"default", "policy", "slack", "webhooks", "telegram", "discord"}  # own sections
    for field in dataclasses.fields(cls):
        if field.name in tables:
            continue
        assert field.name in documented, f"{cls.__name__}.{field.name} is not documented"
        if documented[field.name] == "required":
            assert _real_default(field) in ("", (), []), field.name
        else:
            assert documented[field.name] == _real_default(field), field.name
    assert set(documented) <= {f.name for f in dataclasses.fields(cls)}, "a stale row"


def test_every_webhook_payload_field_is_documented() -> None:
    text = DOC.read_text()
    profile = text[text.index("## Standard Webhooks"):text.index("### Worked example: Standard")]
    rows = dict(re.findall(r"^\| `(\w+)` \| (\w+) \|", profile, re.MULTILINE))
    fields = {f.name: f for f in msgspec.structs.fields(InboundData)}
    assert set(rows) == set(fields), "every field of data, and nothing else"
    for name, field in fields.items():
        kind = {str: "string", bool: "bool"}[field.type]
        assert rows[name] == kind, name


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _matches(documented: Any, got: Any, path: str = "") -> None:
    """``got`` is the documented value, where ``<…>`` stands for any text and a
    ``<run id>`` inside a key for the run's id."""
    if isinstance(documented, dict):
        assert isinstance(got, dict) and set(documented) <= set(got), (path, got)
        for key, value in documented.items():
            _matches(value, got[key], f"{path}.{key}")
    elif isinstance(documented, str) and "<" in documented:
        pattern = re.escape(documented).replace(re.escape("<run id>"), r"\w+")
        pattern = re.sub(r"<[^>]*>", ".+", pattern.replace("\\<", "<").replace("\\>", ">"))
        assert re.fullmatch(pattern, got, re.DOTALL), (path, documented, got)
    else:
        assert documented == got, (path, documented, got)


@pytest.mark.slow
def test_the_worked_examples_run_as_written(tmp_path: Path) -> None:
    blocks = examples()
    slack_cfg = tomllib.loads(blocks["slack-config"])["channels"]["slack"]["acme"]
    hook_cfg = tomllib.loads(blocks["webhook-config"])["channels"]["webhooks"]["ops"]
    bot_cfg = tomllib.loads(blocks["telegram-config"])["channels"]["telegram"]["helpdesk"]
    with FakeSlack(slack_cfg["bot_token"]) as slack, \
            WebhookReceiver(hook_cfg["reply_secret"]) as receiver, \
            FakeTelegram(bot_cfg["bot_token"]) as bot, \
            FakeDiscord(tomllib.loads(blocks["discord-config"])["channels"]["discord"]["guild"][
                "bot_token"]) as discord:
        config = (blocks["slack-config"].replace(
            "[channels.slack.acme]\n",
            f'[channels.slack.acme]\napi_base_url = "{slack.api_url}"\n')
            + blocks["webhook-config"].replace(hook_cfg["reply_url"], receiver.url + "/r")
            + blocks["telegram-config"].replace(
                "[channels.telegram.helpdesk]\n",
                f'[channels.telegram.helpdesk]\napi_base_url = "{bot.api_url}"\n')
            + blocks["discord-config"].replace(
                "[channels.discord.guild]\n",
                f'[channels.discord.guild]\napi_base_url = "{discord.api_url}"\n'
                f'gateway_url = "{discord.gateway_url}"\n').replace(
                tomllib.loads(blocks["discord-config"])["channels"]["discord"]["guild"][
                    "public_key"], discord.public_key))
        (tmp_path / "palyra.toml").write_text(config)
        with DaemonProcess(tmp_path / "data", env=clean_env(), extra_args=(
                "--config", str(tmp_path / "palyra.toml"))) as daemon:
            base = f"http://127.0.0.1:{daemon.http_port}"

            event = blocks["slack-event"].encode()
            answer = httpx.post(f"{base}/v1/ingress/slack/acme", content=event,
                                headers=slack_headers(slack_cfg["signing_secret"], event))
            assert answer.status_code == 200, answer.text
            _matches(json.loads(blocks["slack-answer"]), answer.json())
            _wait(lambda: len(slack.replies()) == 1)
            [(channel, [posted])] = slack.messages.items()
            _matches(json.loads(blocks["slack-reply"]), {"channel": channel, **posted})
            assert "hello from Slack" in posted["text"]

            delivery = blocks["webhook-delivery"].encode()
            answer = httpx.post(f"{base}/v1/ingress/webhooks/ops", content=delivery,
                                headers=webhook_headers(hook_cfg["secrets"][0], "msg_2Lh1",
                                                        delivery))
            assert answer.status_code == 200, answer.text
            _matches(json.loads(blocks["webhook-answer"]), answer.json())
            _wait(lambda: len(receiver.replies()) == 1)
            [reply] = receiver.replies()
            _matches(json.loads(blocks["webhook-reply"])["data"], reply)
            assert "hello from a webhook" in reply["text"]
            assert receiver.rejected == 0  # signed with reply_secret, verified independently

            update = blocks["telegram-update"].encode()
            answer = httpx.post(f"{base}/v1/ingress/telegram/helpdesk", content=update,
                                headers={"x-telegram-bot-api-secret-token":
                                         bot_cfg["webhook_secret"]})
            assert answer.status_code == 200, answer.text
            _matches(json.loads(blocks["telegram-answer"]), answer.json())
            _wait(lambda: len(bot.replies()) == 1)
            [sent] = bot.replies()
            _matches(json.loads(blocks["telegram-reply"]), sent)
            assert "hello from Telegram" in sent["text"]

            _wait(discord.connected)
            discord.dispatch("MESSAGE_CREATE", json.loads(blocks["discord-message"]))
            _wait(lambda: len(discord.bodies) == 1)
            [body] = discord.bodies
            _matches(json.loads(blocks["discord-reply"]), body)
            assert "hello from Discord" in body["content"] and "<@" not in body["content"]
            assert re.fullmatch(r"[0-9a-f]{25}", body["nonce"])
            assert discord.created[0]["channel_id"] == "1200000000000000007"

            command = blocks["discord-interaction"].encode()
            token = json.loads(command)["token"]
            discord.allow_token(token)
            answer = httpx.post(f"{base}/v1/ingress/discord/guild", content=command,
                                headers=discord.sign(command))
            assert answer.status_code == 200, answer.text
            _matches(json.loads(blocks["discord-interaction-answer"]), answer.json())
            _wait(lambda: len(discord.followups_of(token)) == 1)
            _matches(json.loads(blocks["discord-followup"]), discord.bodies[-1])
            assert "hello from a slash command" in discord.followups_of(token)[0]["content"]
