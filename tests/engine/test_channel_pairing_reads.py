"""A direct message reads the channel's pairing grants only when its policy asks.

The grants are a scan of the channels table, an LMDB read on the loop's thread that lets
go of the GIL (the journal writer then commits a smaller group). Under ``dm_policy =
"allow"`` with no ``allow_from`` list a grant cannot change the decision, so none is read;
under ``"pairing"`` the grant still decides.
"""

from __future__ import annotations

import time

import msgspec
import pytest
from engine_harness import Harness

from palyra.channels import ChannelRouter, ChannelsConfig, Envelope, PairingBook
from palyra.channels.config import ChannelPolicy
from palyra.channels.pairing import TABLE, PairingGrantRec
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue

CHANNEL = "telegram:bot"


def _dm(i: int, sender: str) -> Envelope:
    return Envelope(envelope_id="", channel=CHANNEL, conversation_id=f"chat-{i}",
                    sender=sender, text="hello", sender_verified=True,
                    is_direct_message=True, adapter_message_id=f"m{i}")


def _count_grant_scans(store: JournalStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    scans: list[str] = []
    real_scan = store.scan_entities

    def counting(table: str, prefix: str, after: str, limit: int) -> list[tuple[str, bytes]]:
        if table == TABLE and prefix.startswith("pair.grant:"):
            scans.append(prefix)
        return real_scan(table, prefix, after, limit)

    monkeypatch.setattr(store, "scan_entities", counting)
    return scans


async def _grant(store: JournalStore, sender: str) -> None:
    now = time.time_ns() // 1_000_000
    grant = PairingGrantRec(grant_id="01J00000000000000000000001", channel=CHANNEL,
                            sender=sender, granted_ms=now, expires_ms=now + 3_600_000,
                            approval_id="a1", decided_by="admin:test")
    await store.append([EventDraft(
        kind="test.grant", actor="test", payload={},
        entity_writes=(EntityWrite(TABLE, f"pair.grant:{CHANNEL}\x1f{grant.grant_id}",
                                   msgspec.msgpack.encode(grant)),))])


async def test_a_direct_message_reads_grants_only_under_a_pairing_policy(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    await harness.start()
    assert harness.store is not None and harness.engine is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    try:
        def router(dm_policy: str) -> ChannelRouter:
            assert harness.store is not None and harness.engine is not None
            config = ChannelsConfig(default=ChannelPolicy(dm_policy=dm_policy,  # type: ignore[arg-type]
                                                          mentions=("*",)))
            return ChannelRouter(harness.store, harness.engine, tasks,
                                 PairingBook(harness.store), PolicyGate.load(), config)

        await _grant(harness.store, "alice")
        scans = _count_grant_scans(harness.store, monkeypatch)
        open_dms = router("allow")
        answered = [await open_dms.admit(_dm(i, "bob")) for i in range(5)]
        assert all(a.accepted and a.action == "respond" for a in answered)
        assert scans == []
        # Under "pairing" the grant is read, and it still decides.
        pairing = router("pairing")
        refused = await pairing.admit(_dm(10, "bob"))
        paired = await pairing.admit(_dm(11, "alice"))
        assert (refused.accepted, refused.reason) == (False, "pairing_required")
        assert paired.accepted and paired.action == "respond"
        assert len(scans) == 2
    finally:
        await tasks.close()
