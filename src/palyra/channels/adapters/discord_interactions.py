"""Discord interactions over HTTP: slash commands POSTed to the daemon, signed with Ed25519.

Discord signs every request to an application's *Interactions Endpoint URL* with
the application's key: ``X-Signature-Ed25519`` is the hex signature of
``X-Signature-Timestamp`` followed by the raw body, checked against the public
key the Developer Portal shows (hex). Discord probes the endpoint with unsigned
and badly signed requests and refuses to save a URL that accepts them, so a bad
signature is always ``401``. A ``PING`` (type 1) is answered with a ``PONG``.

A slash command (type 2, ``APPLICATION_COMMAND``) becomes an envelope that
addresses the agent: the text is its string options' values (``/ask question:
hi`` is ``hi``), or ``/<name>`` for a command without any (so ``/status``,
``/cancel`` and ``/reset`` are the router's own commands). Discord wants an
answer within 3 seconds, which is the admission commit's, and then shows
"thinking..." (``DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE``) until the reply arrives
through the interaction's webhook, ``<application id>/<token>``, valid 15
minutes and kept with the message so a restart still finds it.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from palyra.channels.adapters import _ed25519
from palyra.channels.adapters._body import decode_body
from palyra.channels.adapters._ed25519 import Verifier
from palyra.channels.adapters._timestamps import check_fresh
from palyra.channels.routing import Envelope
from palyra.core.errors import ErrorCode, PalyraError

PING, APPLICATION_COMMAND = 1, 2
"""Interaction types palyra handles (others are acknowledged and ignored)."""
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE = 1, 4, 5
"""Interaction callback types."""
EPHEMERAL = 1 << 6
"""Message flag: only the user who ran the command sees it."""
STRING_OPTION = 3
MAX_OPTION_DEPTH = 3  # sub-command groups hold sub-commands hold options


@dataclass(frozen=True, slots=True)
class PublicKey:
    """An application's Ed25519 public key and the check that verifies under it."""

    raw: bytes
    check: Verifier


def public_key(hex_key: str) -> PublicKey:
    """The application's public key from its hex form (as the Developer Portal shows it).

    Checked by libsodium (PyNaCl's): half of ``cryptography``'s (OpenSSL's) CPU on this
    path, 70-95 against 140-150 us per verify (one sitting, alternating), and every
    interaction is verified; called holding the GIL (:mod:`._ed25519` says why).

    Raises:
        ValueError: not 32 bytes of hex.
    """
    try:
        raw = bytes.fromhex(hex_key)
    except ValueError:
        raise ValueError("public_key must be hex (Developer Portal, General Information)") \
            from None
    if len(raw) != _ed25519.PUBLIC_KEY_BYTES:
        raise ValueError("public_key must be 32 bytes (64 hex digits)")
    # Built here: a daemon without Discord keeps libsodium out of its memory.
    return PublicKey(raw, _ed25519.verifier()[0])


def verify(key: PublicKey, headers: Mapping[str, str], body: bytes, *,
           tolerance_s: int = 300, now_s: float | None = None) -> None:
    """Check an interaction request's Ed25519 signature and its timestamp.

    Raises:
        PalyraError: ``SIGNATURE_INVALID`` (missing headers, not hex, does not
            verify), ``TIMESTAMP_STALE`` (outside ``tolerance_s``).
    """
    signature, stamp = headers.get("x-signature-ed25519", ""), headers.get(
        "x-signature-timestamp", "")
    if not signature or not stamp:
        raise _bad("X-Signature-Ed25519 and X-Signature-Timestamp are required")
    try:
        raw = binascii.unhexlify(signature)
    except (binascii.Error, ValueError):
        raise _bad("X-Signature-Ed25519 is not hex") from None
    if not key.check(key.raw, stamp.encode() + body, raw):
        raise _bad("the signature does not verify under public_key")
    # Checked after the signature: a stale but genuine request is told so.
    check_fresh(stamp, "X-Signature-Timestamp", tolerance_s, now_s, "Discord")


def _bad(why: str) -> PalyraError:
    return PalyraError(f"Discord signature rejected: {why}", code=ErrorCode.SIGNATURE_INVALID)


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    username: str = ""
    global_name: str | None = None
    bot: bool = False


class Member(msgspec.Struct, frozen=True, kw_only=True):
    user: User | None = None


class Option(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    type: int
    value: str | int | float | bool | None = None
    options: list[Option] = []


class CommandData(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""
    name: str
    type: int = 1
    options: list[Option] = []


class Interaction(msgspec.Struct, frozen=True, kw_only=True):
    """An interaction as Discord POSTs it (only what palyra reads of it)."""

    id: str
    application_id: str
    type: int
    token: str = ""
    data: CommandData | None = None
    guild_id: str = ""
    channel_id: str = ""
    member: Member | None = None
    user: User | None = None
    version: int = 1


def decode(body: bytes) -> Interaction:
    """The interaction in ``body``.

    Raises:
        InvalidArgument: not an interaction of this shape.
    """
    return decode_body(body, Interaction, "Discord interaction", {})


def command_text(data: CommandData) -> str:
    """What a slash command says: its string options' values, else ``/<name>``."""
    values: list[str] = []

    def walk(options: list[Option], depth: int) -> None:
        for option in options:
            if option.type == STRING_OPTION and isinstance(option.value, str):
                values.append(option.value)
            elif option.options and depth < MAX_OPTION_DEPTH:
                walk(option.options, depth + 1)

    walk(data.options, 1)
    return " ".join(v for v in values if v.strip()) or f"/{data.name}"


def envelope(channel: str, interaction: Interaction) -> Envelope | None:
    """The envelope of a slash command; None for other interactions and for bots."""
    if interaction.type != APPLICATION_COMMAND or interaction.data is None:
        return None
    user = interaction.member.user if interaction.member is not None else interaction.user
    if user is None or user.bot or not interaction.token:
        return None
    is_dm = not interaction.guild_id
    return Envelope(
        envelope_id="", channel=channel, conversation_id=interaction.channel_id,
        sender=user.id, sender_display=user.global_name or user.username,
        sender_verified=True, text=command_text(interaction.data), is_direct_message=is_dm,
        adapter_message_id=interaction.id, mentions_agent=not is_dm,
        reply_token=f"{interaction.application_id}/{interaction.token}")


def answer(accepted: bool, reason: str, hint: str) -> dict[str, Any]:
    """The interaction's response once admission is durable: "thinking..." until the reply
    comes through the webhook, or, for a message the router refused, a note only its
    sender sees (``hint``: how to pair, for an unpaired sender)."""
    if accepted and reason != "not_mentioned":
        return {"type": DEFERRED_CHANNEL_MESSAGE}
    text = hint if reason == "pairing_required" else f"I do not answer this here ({reason})."
    return {"type": CHANNEL_MESSAGE, "data": {"content": text, "flags": EPHEMERAL,
                                              "allowed_mentions": {"parse": []}}}
