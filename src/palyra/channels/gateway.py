"""Discord Gateway client: a WebSocket that heartbeats, identifies, resumes and reconnects.

Each ``MESSAGE_CREATE`` is admitted with the Gateway session (id, sequence number,
resume URL) written in its admission commit. After a crash the client resumes
from the last *durable* sequence, and Discord replays every event after it, so
a message the platform sent is never lost; a replayed message already admitted
is found by its key. Heartbeats carry the sequence of the last event handled.
Events are handled one at a time, so that sequence is never ahead of what is
admitted. Connection loss reconnects with jittered exponential backoff and
resumes; Reconnect (op 7) resumes at once; Invalid Session (op 9) re-identifies
unless Discord says the session can be resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from typing import Any

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from palyra.channels import records
from palyra.channels.adapters.discord import INTENTS
from palyra.channels.config import DiscordAdapterConfig
from palyra.channels.ingress import DISCORD_PREFIX, Ingress
from palyra.journal import EntityWrite, JournalStore

log = logging.getLogger("palyra.channels")
MAX_BACKOFF_S = 60.0
FATAL_CLOSE = {4004, 4010, 4011, 4012, 4013, 4014}
"""Authentication failed, invalid shard, sharding required, bad API version or intents:
retrying cannot help; the adapter stops and says why."""
FRESH_CLOSE = {4007, 4009}
"""Invalid sequence, session timed out: identify anew instead of resuming."""


class GatewaySession(msgspec.Struct, kw_only=True):
    session_id: str = ""
    seq: int = 0
    resume_url: str = ""
    me: str = ""


def session_key(channel: str) -> str:
    """The row of a Gateway adapter's session (``channels`` table)."""
    return f"gateway.session:{channel}"


def stored_session(store: JournalStore, channel: str) -> GatewaySession:
    raw = store.get_entity(records.TABLE, session_key(channel))
    return msgspec.json.decode(raw, type=GatewaySession) if raw else GatewaySession()


class _Fatal(Exception):
    pass


class _Resume(Exception):
    pass


class Gateway:
    """One bot's Gateway connection (run as a daemon background task)."""

    def __init__(self, name: str, cfg: DiscordAdapterConfig, ingress: Ingress,
                 store: JournalStore) -> None:
        self._name = name
        self._cfg = cfg
        self._ingress = ingress
        self._channel = DISCORD_PREFIX + name
        self.session = stored_session(store, self._channel)
        self._acked = True

    async def run(self) -> None:
        """Connect, and reconnect forever (until a fatal close or cancellation)."""
        backoff = 1.0
        while True:
            try:
                await self._connect_once()
                backoff = 1.0  # a clean Reconnect: resume at once
                continue
            except asyncio.CancelledError:
                raise
            except _Fatal as exc:
                log.error("discord gateway for %s stopped: %s", self._channel, exc)
                return
            except (ConnectionClosed, OSError, TimeoutError, _Resume, ValueError) as exc:
                log.warning("discord gateway for %s lost (%s); reconnecting in %.1f s",
                            self._channel, exc, backoff)
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _connect_once(self) -> None:
        base = self.session.resume_url if self.session.session_id and \
            self.session.resume_url else self._cfg.gateway_url
        async with connect(f"{base.rstrip('/')}/?v=10&encoding=json",
                           max_size=2 ** 22, open_timeout=10) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if hello.get("op") != 10:
                raise ValueError(f"expected Hello (op 10), got op {hello.get('op')}")
            interval = hello["d"]["heartbeat_interval"] / 1000
            await self._login(ws)
            beats = asyncio.ensure_future(self._heartbeat(ws, interval))
            try:
                async for raw in ws:
                    await self._handle(ws, json.loads(raw))
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else 1006
                if code in FATAL_CLOSE:
                    raise _Fatal(f"close code {code}: {closed.rcvd.reason if closed.rcvd else ''}"
                                 ) from None
                if code in FRESH_CLOSE:
                    self.session = GatewaySession(me=self.session.me)
                raise
            finally:
                beats.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beats

    async def _login(self, ws: ClientConnection) -> None:
        if self.session.session_id:
            await ws.send(json.dumps({"op": 6, "d": {
                "token": self._cfg.bot_token, "session_id": self.session.session_id,
                "seq": self.session.seq}}))
            return
        await ws.send(json.dumps({"op": 2, "d": {
            "token": self._cfg.bot_token, "intents": INTENTS,
            "properties": {"os": "linux", "browser": "palyra", "device": "palyra"}}}))

    async def _heartbeat(self, ws: ClientConnection, interval: float) -> None:
        await asyncio.sleep(interval * random.random())  # Discord asks for jitter first
        while True:
            if not self._acked:  # a zombied connection: drop it and resume
                await ws.close(4000, "no heartbeat ACK")
                return
            self._acked = False
            await ws.send(json.dumps({"op": 1, "d": self.session.seq or None}))
            await asyncio.sleep(interval)

    async def _handle(self, ws: ClientConnection, event: dict[str, Any]) -> None:
        op = event.get("op")
        if op == 11:
            self._acked = True
        elif op == 1:
            await ws.send(json.dumps({"op": 1, "d": self.session.seq or None}))
        elif op == 7:
            raise _Resume("Discord asked to reconnect")
        elif op == 9:
            if not event.get("d"):
                self.session = GatewaySession(me=self.session.me)
            raise _Resume("invalid session")
        elif op == 0:
            await self._dispatch(event)

    def _write(self, session: GatewaySession) -> EntityWrite:
        return EntityWrite(records.TABLE, session_key(self._channel),
                           msgspec.json.encode(session))

    async def _dispatch(self, event: dict[str, Any]) -> None:
        kind, data, seq = event.get("t"), event.get("d") or {}, int(event.get("s") or 0)
        if kind == "READY":
            self.session = GatewaySession(
                session_id=data["session_id"], seq=seq,
                resume_url=data.get("resume_gateway_url", ""),
                me=str(data.get("user", {}).get("id", "")))
            # Durable before any message of the session: a crash before the first
            # admission resumes this session (Discord replays) instead of starting one.
            await self._ingress.record([self._write(self.session)], "channel.gateway_session")
        elif kind == "MESSAGE_CREATE":
            nxt = msgspec.structs.replace(self.session, seq=max(seq, self.session.seq))
            await self._ingress.discord_message(
                self._name, data, me=self.session.me,
                also=[self._write(nxt)])
            self.session = nxt
        else:
            self.session.seq = max(seq, self.session.seq)
