"""Discord slash commands over HTTP, checked against Discord's own tools.

The oracles are not palyra's code: requests are signed with PyNaCl (the library
Discord's documentation verifies interactions with) under keys generated here, and
discord.py parses every payload the local Discord sends and builds the message
bodies palyra's replies are compared with. End to end, ``palyra serve`` answers
Discord's ``PING``, defers a slash command until its run replies through the
interaction's webhook, answers a redelivery without a second reply, refuses bad
signatures without journaling anything, and tells an unpaired sender how to pair.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import discord
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from discord.http import handle_message_parameters
from nacl.signing import SigningKey

from palyra.channels.adapters import discord as discord_adapter
from palyra.channels.adapters import discord_interactions as di
from palyra.channels.outbox import OutboundReply
from palyra.core.errors import ErrorCode, PalyraError
from palyra.testing.discord import FakeDiscord
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import admin_headers, journal_head

TOKEN = "MTAwMDAw.discord-test-token"


def _state() -> Any:
    """A discord.py connection state that parses payloads (no network)."""
    client = discord.Client(intents=discord.Intents.none())
    state = client._connection
    state.user = discord.ClientUser(state=state, data={
        "id": "900000000000000001", "username": "palyra", "discriminator": "0",
        "avatar": None, "bot": True})
    return state


def test_protocol_numbers_are_discords() -> None:
    assert discord.InteractionType.ping.value == di.PING
    assert discord.InteractionType.application_command.value == di.APPLICATION_COMMAND
    assert discord.InteractionResponseType.pong.value == di.PONG
    assert discord.InteractionResponseType.channel_message.value == di.CHANNEL_MESSAGE
    assert discord.InteractionResponseType.deferred_channel_message.value == \
        di.DEFERRED_CHANNEL_MESSAGE
    assert discord.MessageFlags(ephemeral=True).value == di.EPHEMERAL
    assert discord.AppCommandOptionType.string.value == di.STRING_OPTION
    assert discord.Intents(
        guild_messages=True, dm_messages=True, message_content=True).value == discord_adapter.INTENTS


@pytest.mark.parametrize("guild_id", ["1100000000000000001", ""])
def test_slash_command_envelope_agrees_with_discordpy(guild_id: str) -> None:
    with FakeDiscord(TOKEN) as fake:
        token, body = fake.interaction("ask", {"question": "what time is it?"},
                                       channel_id="1200000000000000007",
                                       user_id="1000000000000000007", guild_id=guild_id)
    parsed = discord.Interaction(data=json.loads(body), state=_state())
    env = di.envelope("discord:dc", di.decode(body))
    assert env is not None and parsed.user is not None
    assert parsed.type is discord.InteractionType.application_command
    assert env.sender == str(parsed.user.id)
    assert env.sender_display == parsed.user.global_name
    assert env.adapter_message_id == str(parsed.id)
    assert env.conversation_id == "1200000000000000007"
    assert env.is_direct_message == (parsed.guild_id is None)
    assert env.mentions_agent == (parsed.guild_id is not None)
    assert env.reply_token == f"{parsed.application_id}/{parsed.token}" and parsed.token == token
    assert parsed.data is not None
    assert env.text == parsed.data["options"][0]["value"] == "what time is it?"  # type: ignore[typeddict-item]


def test_command_text() -> None:
    no_options = di.CommandData(name="status")
    assert di.command_text(no_options) == "/status"  # the router's own command
    nested = di.CommandData(name="ops", options=[di.Option(name="deploy", type=1, options=[
        di.Option(name="target", type=3, value="prod"), di.Option(name="n", type=4, value=3),
        di.Option(name="why", type=3, value="hotfix")])])
    assert di.command_text(nested) == "prod hotfix"


def test_gateway_message_envelope_agrees_with_discordpy() -> None:
    with FakeDiscord(TOKEN) as fake:
        data = fake.message_payload("<@900000000000000001> hello there", channel_id="55",
                                    author_id="77", guild_id="1", mentions_bot=True)
    state = _state()
    parsed = discord.Message(state=state, channel=discord.Object(id=55), data=data)  # type: ignore[arg-type]
    env = discord_adapter.envelope("discord:dc", discord_adapter.MessageCreate(**{
        k: v for k, v in data.items() if k in discord_adapter.MessageCreate.__struct_fields__
        and k not in ("author", "mentions")},
        author=discord_adapter.Author(id=data["author"]["id"]),
        mentions=[discord_adapter.Author(id=m["id"]) for m in data["mentions"]]),
        me="900000000000000001")
    assert env is not None
    assert env.adapter_message_id == str(parsed.id)
    assert env.sender == str(parsed.author.id)
    assert env.mentions_agent == (state.user in parsed.mentions)
    assert env.text == parsed.content.replace("<@900000000000000001>", "").strip()


def test_signatures_made_with_pynacl() -> None:
    key = SigningKey.generate()
    public = di.public_key(key.verify_key.encode().hex())
    body = b'{"type": 1}'
    stamp = str(int(time.time()))

    def headers(signature: bytes, ts: str = stamp) -> dict[str, str]:
        return {"x-signature-ed25519": signature.hex(), "x-signature-timestamp": ts}

    good = key.sign(stamp.encode() + body).signature
    di.verify(public, headers(good), body)
    forged = SigningKey.generate().sign(stamp.encode() + body).signature
    old = str(int(time.time()) - 3600)
    for bad_headers, bad_body, code in [
        (headers(forged), body, ErrorCode.SIGNATURE_INVALID),          # another key
        (headers(good), body + b" ", ErrorCode.SIGNATURE_INVALID),     # body changed
        (headers(good, str(int(stamp) + 1)), body, ErrorCode.SIGNATURE_INVALID),  # time
        ({"x-signature-timestamp": stamp}, body, ErrorCode.SIGNATURE_INVALID),
        ({"x-signature-ed25519": "zz", "x-signature-timestamp": stamp}, body,
         ErrorCode.SIGNATURE_INVALID),
        (headers(good[:63]), body, ErrorCode.SIGNATURE_INVALID),      # too short
        (headers(good + b"\0"), body, ErrorCode.SIGNATURE_INVALID),   # too long
        (headers(key.sign(old.encode() + body).signature, old), body,
         ErrorCode.TIMESTAMP_STALE),
    ]:
        with pytest.raises(PalyraError) as raised:
            di.verify(public, bad_headers, bad_body)
        assert raised.value.code is code
    with pytest.raises(ValueError):
        di.public_key("00" * 31)


def test_signatures_made_with_openssl() -> None:
    """A second signer beside PyNaCl (whose libsodium also verifies here): OpenSSL's."""
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    public = di.public_key(raw.hex())
    body, stamp = b'{"type": 2}', str(int(time.time()))
    signature = key.sign(stamp.encode() + body)
    di.verify(public, {"x-signature-ed25519": signature.hex(),
                       "x-signature-timestamp": stamp}, body)
    with pytest.raises(PalyraError) as raised:
        di.verify(public, {"x-signature-ed25519": signature.hex(),
                           "x-signature-timestamp": stamp}, body + b"\n")
    assert raised.value.code is ErrorCode.SIGNATURE_INVALID


async def test_reply_bodies_are_what_discordpy_sends() -> None:
    with FakeDiscord(TOKEN) as fake:
        async with httpx.AsyncClient() as client:
            sink = discord_adapter.DiscordSink("discord:dc", fake.api_url, TOKEN, client=client)
            await sink.send(OutboundReply(sink="discord:dc", key="reply:r:0", text="hi there",
                                          conversation_id="55", reply_to="1234"))
            token, _body = fake.interaction("ask", {"q": "x"})
            await sink.send(OutboundReply(sink="discord:dc", key="reply:r2:0", text="answer",
                                          conversation_id="55",
                                          reply_token=f"{fake.application_id}/{token}"))
        to_channel, to_webhook = fake.bodies
        assert [m["content"] for m in fake.followups_of(token)] == ["answer"]
    reference = discord.MessageReference(message_id=1234, channel_id=55,
                                         fail_if_not_exists=False)
    expected = handle_message_parameters(
        content="hi there", nonce=discord_adapter.nonce("reply:r:0"),
        allowed_mentions=discord.AllowedMentions.none(), message_reference=reference).payload
    assert expected is not None
    expected["message_reference"] = {
        k: v for k, v in reference.to_message_reference_dict().items()
        if k in ("message_id", "fail_if_not_exists")}
    expected["message_reference"]["message_id"] = str(expected["message_reference"]["message_id"])
    expected.pop("tts")  # false, Discord's default
    assert to_channel == expected
    webhook = handle_message_parameters(
        content="answer", allowed_mentions=discord.AllowedMentions.none()).payload
    assert webhook is not None
    webhook.pop("tts")
    assert to_webhook == webhook


def _config(path: Path, fake: FakeDiscord, policy: str) -> Path:
    path.write_text("\n".join([
        "[channels.discord.app]",
        f'public_key = "{fake.public_key}"',
        f'api_base_url = "{fake.api_url}"',
        '[channels.policy."discord:app"]',
        policy,
    ]) + "\n")
    return path


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


@pytest.mark.slow
def test_slash_commands_end_to_end(tmp_path: Path) -> None:
    with FakeDiscord(TOKEN) as fake:
        config = _config(tmp_path / "p.toml", fake, 'dm_policy = "allow"')
        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))) as daemon:
            url = f"http://127.0.0.1:{daemon.http_port}/v1/ingress/discord/app"
            base = f"http://127.0.0.1:{daemon.http_port}"

            def post(body: bytes, headers: dict[str, str]) -> httpx.Response:
                return httpx.post(url, content=body, headers=headers, timeout=10)

            ping = fake.ping()
            pong = post(ping, fake.sign(ping))
            assert pong.status_code == 200 and pong.json() == {"type": 1}

            token, body = fake.interaction("ask", {"question": "please echo hello, slash"},
                                           channel_id="701", guild_id="1")
            first = post(body, fake.sign(body))
            assert first.status_code == 200 and first.json() == {"type": 5}
            _wait(lambda: len(fake.followups_of(token)) == 1)
            assert "hello, slash" in fake.followups_of(token)[0]["content"]
            # Discord does not retry interactions, but a replayed request (signed again)
            # is still one message: deferred again, answered once.
            again = post(body, fake.sign(body))
            assert again.status_code == 200 and again.json() == {"type": 5}

            head = journal_head(base, daemon.token)
            other = SigningKey.generate()
            for headers, status, code in [
                (fake.sign(body, key=other), 401, "SIGNATURE_INVALID"),
                ({"content-type": "application/json"}, 401, "SIGNATURE_INVALID"),
                (fake.sign(body, timestamp=time.time() - 3600), 401, "TIMESTAMP_STALE"),
            ]:
                refused = post(body, headers)
                assert refused.status_code == status and refused.json()["code"] == code
            bad_shape = b'{"type": 2}'
            assert post(bad_shape, fake.sign(bad_shape)).status_code == 400
            missing = httpx.post(f"{base}/v1/ingress/discord/nobody", content=body,
                                 headers=fake.sign(body), timeout=10)
            assert missing.status_code == 404
            assert journal_head(base, daemon.token) == head  # bad input journals nothing
            time.sleep(0.5)
            assert len(fake.followups_of(token)) == 1
            assert httpx.get(f"{base}/v1/tasks?state=failed",
                             headers=admin_headers(daemon.token)).json().get("tasks", []) == []


@pytest.mark.slow
def test_unpaired_sender_is_told_how_to_pair(tmp_path: Path) -> None:
    with FakeDiscord(TOKEN) as fake:
        config = _config(tmp_path / "p.toml", fake, 'dm_policy = "pairing"')
        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))) as daemon:
            url = f"http://127.0.0.1:{daemon.http_port}/v1/ingress/discord/app"
            token, body = fake.interaction("ask", {"question": "hello?"}, channel_id="9")
            answer = httpx.post(url, content=body, headers=fake.sign(body), timeout=10).json()
            assert answer["type"] == 4
            assert answer["data"]["flags"] == 64  # only the sender sees it
            assert "pair" in answer["data"]["content"]
            time.sleep(1.0)
            assert fake.followups_of(token) == []  # told once, in the answer itself


async def test_rate_buckets_stay_bounded_over_many_conversations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every conversation is a route (and every slash command's token another): what the
    # sink keeps of them must not grow with the number of conversations it ever answered.
    monkeypatch.setattr(discord_adapter, "MAX_ROUTES", 20)
    with FakeDiscord(TOKEN, bucket_size=1, bucket_reset_s=0.05) as fake:
        sink = discord_adapter.DiscordSink("discord:dc", fake.api_url, TOKEN)
        try:
            for n in range(60):  # each answer spends its channel's bucket (one per window)
                await sink.send(OutboundReply(sink="discord:dc", key=f"reply:r{n}:0",
                                              text="hi", conversation_id=str(1000 + n)))
            # A spent bucket still holds its route back until it resets (else a 429).
            await sink.send(OutboundReply(sink="discord:dc", key="reply:again:0", text="hi",
                                          conversation_id="1059"))
            assert fake.limited == 0
            await asyncio.sleep(0.1)  # every window has reset; the next reset time sweeps
            await sink.send(OutboundReply(sink="discord:dc", key="reply:last:0", text="hi",
                                          conversation_id="2000"))
            bucket_ids, resets, locks = sink.buckets.sizes()
            assert bucket_ids == 20 and resets <= 21 and locks == 0
            assert fake.limited == 0  # nothing was sent into a spent bucket
        finally:
            await sink.aclose()


async def test_sends_on_one_route_take_turns_and_leave_no_lock_behind() -> None:
    buckets = discord_adapter.RateBuckets()
    order: list[str] = []

    async def send(name: str) -> None:
        async with buckets.held("POST /channels/1/messages"):
            order.append(f"{name}+")
            await asyncio.sleep(0.01)
            order.append(f"{name}-")

    await asyncio.gather(send("a"), send("b"), send("c"))
    assert order == ["a+", "a-", "b+", "b-", "c+", "c-"]
    assert buckets.sizes() == (0, 0, 0)
