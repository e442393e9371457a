"""What admission hands to dispatch in memory: bounded, never forgets a context row."""

from __future__ import annotations

from pathlib import Path

from palyra.channels import records
from palyra.channels.recent import Recent, context_sessions
from palyra.channels.records import InboundRec
from palyra.channels.routing import Decision, Envelope
from palyra.journal import EntityWrite, EventDraft, JournalConfig, JournalStore


def _rec(envelope_id: str) -> InboundRec:
    return InboundRec(envelope=Envelope(envelope_id=envelope_id, channel="webhook:h"),
                      decision=Decision(action="respond", reason="routed"), admitted_ms=1)


def test_messages_are_bounded_and_dropped_once_dispatched() -> None:
    recent = Recent(messages=3)
    for i in range(5):
        recent.admitted(_rec(f"e{i}"))
    assert [recent.message(f"e{i}") is not None for i in range(5)] == [
        False, False, True, True, True]  # the oldest went first
    recent.dispatched(["e3"])
    assert recent.message("e3") is None and recent.message("e4") is not None


def test_a_context_row_kept_after_the_scan_is_not_forgotten() -> None:
    recent = Recent()
    assert recent.context_mark("room") is None  # nothing kept: no scan at all
    recent.context_kept("room")
    mark = recent.context_mark("room")
    assert mark is not None
    recent.context_kept("room")  # kept while the run read and consumed the others
    recent.context_consumed("room", mark)
    later = recent.context_mark("room")
    assert later is not None  # still looked for by the next run
    recent.context_consumed("room", later)
    assert recent.context_mark("room") is None


def test_past_the_limit_every_run_looks() -> None:
    recent = Recent(context_sessions=2)
    for key in ("a", "b", "c"):
        recent.context_kept(key)
    assert recent.context_mark("never-seen") == -1
    recent.context_consumed("a", -1)
    assert recent.context_mark("a") == -1


async def test_context_rows_from_before_a_restart_are_found(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        await store.append([EventDraft(kind="channel.message_admitted", actor="channel:x",
                                       entity_writes=(
            EntityWrite(records.TABLE, records.ctx_key("webhook:h/room-1", "e1"), b""),
            EntityWrite(records.TABLE, records.ctx_key("webhook:h/room-1", "e2"), b""),
            EntityWrite(records.TABLE, records.ctx_key("webhook:h/room-2", "e3"), b""),
            EntityWrite(records.TABLE, records.MSG + "e9", b"x")))])
    with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        found = context_sessions(store)
    assert sorted(found) == ["webhook:h/room-1", "webhook:h/room-2"]
    recent = Recent()
    recent.context_known(found)
    assert recent.context_mark("webhook:h/room-2") is not None
    assert recent.context_mark("webhook:h/room-3") is None
