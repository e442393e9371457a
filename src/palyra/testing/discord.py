"""A local Discord for tests and benchmarks: the Gateway (WebSocket) and the REST API.

The Gateway speaks Discord's protocol (v10, JSON): Hello, Identify → READY,
Resume → the events after the given sequence then RESUMED (or Invalid Session
for an unknown session), heartbeats and their ACKs, Reconnect on demand. One
session's events are kept, so a client that resumes after a crash gets what it
missed, as Discord replays it. The REST API serves ``POST
/channels/{id}/messages`` with the ``nonce``/``enforce_nonce`` rule (a repeated
nonce returns the message already created) and a rate-limit bucket per channel
with Discord's headers and 429 ``retry_after``.

Slash commands come as Discord sends them to an *Interactions Endpoint URL*:
:meth:`FakeDiscord.interaction` builds the request, signed with the application's
Ed25519 key by PyNaCl (the library Discord's own documentation verifies with), and
``POST /webhooks/{application_id}/{token}`` takes the follow-up messages that answer it.
The payloads carry every field Discord sends, so discord.py can parse them (the tests
use it as the oracle of their shape).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import threading
import time
from collections import Counter
from typing import Any

from nacl.signing import SigningKey
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from palyra.testing.platforms import _Server

_MESSAGES = re.compile(r"^/api/v10/channels/(\d+)/messages$")
_FOLLOWUP = re.compile(r"^/api/v10/webhooks/(\d+)/([A-Za-z0-9_.-]+)$")
APPLICATION_ID = "800000000000000001"


class FakeDiscord(_Server):
    """One bot's Discord. Call :meth:`post_message` to have a user write something."""

    def __init__(self, bot_token: str, bot_id: str = "900000000000000001", *,
                 bucket_size: int = 5, bucket_reset_s: float = 0.25,
                 heartbeat_ms: int = 1000) -> None:
        super().__init__()
        self.bot_token, self.bot_id = bot_token, bot_id
        self.bucket_size, self.bucket_reset_s = bucket_size, bucket_reset_s
        self.heartbeat_ms = heartbeat_ms
        self.created: list[dict[str, Any]] = []  # every message the bot created
        self.bodies: list[dict[str, Any]] = []  # every create-message request body
        self.requests = 0
        self.limited = 0  # 429s answered
        self.identifies = 0
        self.resumes = 0
        self.heartbeats = 0
        self._by_nonce: dict[str, dict[str, Any]] = {}
        self._windows: dict[str, tuple[float, int]] = {}  # channel -> (window start, used)
        self._ids = itertools.count(10**17)
        self._session = ""
        self._events: list[dict[str, Any]] = []  # the session's dispatches, in order
        self._ws: ServerConnection | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._gw_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.gateway_port = 0
        # The application behind the bot: its key signs interactions.
        self.application_id = APPLICATION_ID
        self.signing_key = SigningKey.generate()
        self.followups: dict[str, list[dict[str, Any]]] = {}  # interaction token -> messages
        self._tokens: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> Any:
        super().__enter__()
        self._gw_thread.start()
        asyncio.run_coroutine_threadsafe(self._start_gateway(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop_gateway(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._gw_thread.join(5)
        self._loop.close()
        super().__exit__(*exc)

    async def _start_gateway(self) -> None:
        self._emitting = asyncio.Lock()
        self._server = await serve(self._serve, "127.0.0.1", 0)
        self.gateway_port = self._server.sockets[0].getsockname()[1]

    async def _stop_gateway(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def api_url(self) -> str:
        return self.url + "/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.gateway_port}"

    # -- the Gateway -------------------------------------------------------------------
    async def _serve(self, ws: ServerConnection) -> None:
        await ws.send(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}}))
        try:
            async for raw in ws:
                frame = json.loads(raw)
                op, data = frame.get("op"), frame.get("d")
                if op == 1:
                    with self.lock:
                        self.heartbeats += 1
                    await ws.send(json.dumps({"op": 11}))
                elif op == 2:
                    await self._identify(ws, data)
                elif op == 6:
                    await self._resume(ws, data)
        except ConnectionClosed:
            pass
        finally:
            if self._ws is ws:
                self._ws = None

    async def _identify(self, ws: ServerConnection, data: dict[str, Any]) -> None:
        if data.get("token") != self.bot_token:
            await ws.close(4004, "Authentication failed.")
            return
        with self.lock:
            self.identifies += 1
            self._session = f"session-{self.identifies}"
            self._events = []
        self._ws = ws
        await self._emit("READY", {"v": 10, "session_id": self._session,
                                   "resume_gateway_url": self.gateway_url,
                                   "user": {"id": self.bot_id, "username": "palyra",
                                            "bot": True}})

    async def _resume(self, ws: ServerConnection, data: dict[str, Any]) -> None:
        if data.get("token") != self.bot_token or data.get("session_id") != self._session:
            await ws.send(json.dumps({"op": 9, "d": False}))
            return
        # Replayed events go out before any new one, in order, as Discord sends them.
        async with self._emitting:
            with self.lock:
                self.resumes += 1
                missed = [e for e in self._events if e["s"] > int(data.get("seq") or 0)]
            for event in missed:
                await ws.send(json.dumps(event))
            await ws.send(json.dumps({"op": 0, "t": "RESUMED", "s": None, "d": {}}))
            self._ws = ws

    async def _emit(self, kind: str, data: dict[str, Any]) -> None:
        async with self._emitting:
            with self.lock:
                event = {"op": 0, "t": kind, "s": len(self._events) + 1, "d": data}
                self._events.append(event)
            if self._ws is not None:
                with contextlib.suppress(ConnectionClosed):
                    await self._ws.send(json.dumps(event))

    def dispatch(self, kind: str, data: dict[str, Any]) -> None:
        """Emit one dispatch (``op`` 0) on the session as given, e.g. a ``MESSAGE_CREATE``."""
        asyncio.run_coroutine_threadsafe(self._emit(kind, data), self._loop).result(10)

    def message_payload(self, content: str, *, channel_id: str = "700",
                        author_id: str = "42", guild_id: str = "", mentions_bot: bool = False,
                        reply_to_bot: bool = False) -> dict[str, Any]:
        """The ``d`` of a ``MESSAGE_CREATE`` for a user's message (not sent)."""
        message_id = str(next(self._ids))
        data: dict[str, Any] = {
            "id": message_id, "channel_id": channel_id, "content": content, "tts": False,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "author": {"id": author_id, "username": f"user{author_id}", "bot": False,
                       "discriminator": "0", "avatar": None},
            "mentions": [{"id": self.bot_id, "username": "palyra", "bot": True,
                          "discriminator": "0", "avatar": None}]
            if mentions_bot else [], "mention_everyone": False, "attachments": [],
            "embeds": [], "pinned": False, "edited_timestamp": None, "mention_roles": [],
            "type": 19 if reply_to_bot else 0}
        if guild_id:
            data["guild_id"] = guild_id
        if reply_to_bot:
            data["referenced_message"] = {"id": "1", "content": "earlier",
                                          "author": {"id": self.bot_id, "bot": True}}
        return data

    def post_message(self, content: str, *, channel_id: str = "700", author_id: str = "42",
                     guild_id: str = "", mentions_bot: bool = False,
                     reply_to_bot: bool = False) -> str:
        """A user writes a message: a ``MESSAGE_CREATE`` on the session; returns its id."""
        data = self.message_payload(content, channel_id=channel_id, author_id=author_id,
                                    guild_id=guild_id, mentions_bot=mentions_bot,
                                    reply_to_bot=reply_to_bot)
        asyncio.run_coroutine_threadsafe(self._emit("MESSAGE_CREATE", data),
                                         self._loop).result(10)
        return str(data["id"])

    def reconnect(self) -> None:
        """Send Reconnect (op 7): the client should resume."""
        async def send() -> None:
            if self._ws is not None:
                await self._ws.send(json.dumps({"op": 7, "d": None}))
        asyncio.run_coroutine_threadsafe(send(), self._loop).result(10)

    def connected(self) -> bool:
        return self._ws is not None

    # -- interactions ------------------------------------------------------------------
    @property
    def public_key(self) -> str:
        """The application's public key, hex, as the Developer Portal shows it."""
        return self.signing_key.verify_key.encode().hex()

    def sign(self, body: bytes, timestamp: float | None = None,
             key: SigningKey | None = None) -> dict[str, str]:
        """Discord's headers for an interaction request: Ed25519 over timestamp + body."""
        stamp = str(int(time.time() if timestamp is None else timestamp))
        signed = (key or self.signing_key).sign(stamp.encode() + body)
        return {"x-signature-ed25519": signed.signature.hex(),
                "x-signature-timestamp": stamp, "content-type": "application/json"}

    def ping(self) -> bytes:
        """The ``PING`` Discord sends to check an endpoint."""
        return json.dumps({"id": str(next(self._ids)), "application_id": self.application_id,
                           "type": 1, "token": "ping-token", "version": 1}).encode()

    def interaction(self, command: str, options: dict[str, str] | None = None, *,
                    channel_id: str = "700", user_id: str = "42", guild_id: str = ""
                    ) -> tuple[str, bytes]:
        """A user runs ``/command`` with string ``options``: ``(token, body)``."""
        token = f"itoken-{next(self._ids)}"
        with self.lock:
            self._tokens.add(token)
        user = {"id": user_id, "username": f"user{user_id}", "global_name": f"User {user_id}",
                "discriminator": "0", "avatar": None}
        data: dict[str, Any] = {
            "id": str(next(self._ids)), "application_id": self.application_id, "type": 2,
            "token": token, "version": 1, "channel_id": channel_id,
            "channel": {"id": channel_id, "type": 0, "guild_id": guild_id, "name": "general",
                        "position": 0, "permission_overwrites": [], "nsfw": False,
                        "parent_id": None} if guild_id else {"id": channel_id, "type": 1},
            "data": {"id": "1400000000000000001", "name": command, "type": 1,
                     "options": [{"name": k, "type": 3, "value": v}
                                 for k, v in (options or {}).items()]},
            "locale": "en-US", "app_permissions": "0", "entitlements": [],
            "authorizing_integration_owners": {"0": guild_id} if guild_id else {"1": user_id},
            "context": 0 if guild_id else 1, "attachment_size_limit": 10485760}
        if guild_id:
            data["guild_id"] = guild_id
            data["member"] = {"user": user, "roles": [], "joined_at": "2026-01-01T00:00:00+00:00",
                              "deaf": False, "mute": False, "permissions": "0", "flags": 0}
        else:
            data["user"] = user
        return token, json.dumps(data).encode()

    def allow_token(self, token: str) -> None:
        """Take follow-ups for an interaction built elsewhere (a documented example)."""
        with self.lock:
            self._tokens.add(token)

    def followups_of(self, token: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.followups.get(token, []))

    def _followup(self, application_id: str, token: str, body: bytes) -> tuple[int, Any]:
        with self.lock:
            if application_id != self.application_id or token not in self._tokens:
                return 401, {"message": "Invalid Webhook Token", "code": 50027}
            data = json.loads(body)
            self.bodies.append(data)
            message = {"id": str(next(self._ids)), "content": data.get("content", ""),
                       "webhook_id": application_id, "flags": data.get("flags", 0),
                       "author": {"id": self.bot_id, "username": "palyra", "bot": True}}
            self.followups.setdefault(token, []).append(message)
        return 200, message

    # -- the REST API ----------------------------------------------------------------
    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, Any]:
        followup = _FOLLOWUP.match(path)
        if method == "POST" and followup is not None:  # webhooks need no bot token
            return self._followup(followup.group(1), followup.group(2), body)
        if headers.get("authorization") != f"Bot {self.bot_token}":
            return 401, {"message": "401: Unauthorized", "code": 0}
        found = _MESSAGES.match(path)
        if method != "POST" or found is None:
            return 404, {"message": "404: Not Found", "code": 0}
        channel, data = found.group(1), json.loads(body)
        with self.lock:
            self.requests += 1
            self.bodies.append(data)
            now = time.monotonic()
            start, used = self._windows.get(channel, (now, 0))
            if now - start >= self.bucket_reset_s:
                start, used = now, 0
            reset_after = max(0.0, self.bucket_reset_s - (now - start))
            left = max(0, self.bucket_size - used - 1)
            self.headers_out[threading.get_ident()] = {
                "x-ratelimit-limit": str(self.bucket_size),
                "x-ratelimit-remaining": str(left),
                "x-ratelimit-reset-after": f"{reset_after:.3f}",
                "x-ratelimit-bucket": f"bucket-{channel}"}
            if used >= self.bucket_size:
                self.limited += 1
                return 429, {"message": "You are being rate limited.",
                             "retry_after": round(reset_after, 3), "global": False}
            self._windows[channel] = (start, used + 1)
            nonce = data.get("nonce")
            if data.get("enforce_nonce") and nonce and nonce in self._by_nonce:
                return 200, self._by_nonce[nonce]
            message = {"id": str(next(self._ids)), "channel_id": channel,
                       "content": data.get("content", ""), "nonce": nonce,
                       "message_reference": data.get("message_reference"),
                       "author": {"id": self.bot_id, "username": "palyra", "bot": True}}
            self.created.append(message)
            if nonce:
                self._by_nonce[nonce] = message
        return 200, message

    def replies(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.created)

    def duplicate_replies(self) -> int:
        """Messages created twice for one reply (one nonce)."""
        seen = Counter(m["nonce"] for m in self.replies())
        return sum(n - 1 for n in seen.values() if n > 1)

