"""The usage ledger on a real journal: its memory does not grow with the sessions it has
seen, and every sum it answers (principal, agent, session) stays equal to the rows'."""

from __future__ import annotations

import gc
import random
import sys
from collections import defaultdict
from pathlib import Path

import msgspec

from palyra.journal import EntityWrite, EventDraft, JournalConfig, JournalStore
from palyra.usage import Tally, UsageLedger, UsageRow, month_of
from palyra.usage.ledger import PREFIX, TABLE

DAYS = ("2026-11-26", "2026-11-27", "2026-12-01")


def _row(rng: random.Random, session: str) -> UsageRow:
    return UsageRow(day=rng.choice(DAYS), principal=rng.choice(("user:a", "user:b")),
                    agent_id=rng.choice(("", "helper")), session_id=session,
                    run_id=f"R{rng.randrange(10**6)}", provider="p", model="m",
                    tally=Tally(calls=1, input_tokens=rng.randrange(1000),
                                output_tokens=rng.randrange(1000),
                                cost_micros=rng.randrange(10**6)))


async def _commit(store: JournalStore, writes: list[EntityWrite]) -> None:
    await store.append([EventDraft("test.usage", "test", entity_writes=writes)])


def _oracle(rows: list[UsageRow]) -> dict[tuple[str, str, str], Tally]:
    """The sums, computed the plain way from every row."""
    out: defaultdict[tuple[str, str, str], Tally] = defaultdict(Tally)
    for row in rows:
        out["session", row.session_id, "all"] = \
            out["session", row.session_id, "all"].plus(row.tally)
        for scope, subject in (("principal", row.principal), ("agent", row.agent_id)):
            if subject:
                for period in (f"day:{row.day}", f"month:{month_of(row.day)}", "all"):
                    out[scope, subject, period] = out[scope, subject, period].plus(row.tally)
    return out


def _answers(ledger: UsageLedger, keys: list[tuple[str, str, str]]) -> dict[
        tuple[str, str, str], Tally]:
    return {key: ledger.session_totals(key[1]) if key[0] == "session" else ledger.totals(*key)
            for key in keys}


async def test_every_sum_equals_the_rows_before_and_after_a_restart(tmp_path: Path) -> None:
    rng = random.Random(35)
    data = tmp_path / "data"
    rows: list[UsageRow] = []
    with JournalStore.open(data, config=JournalConfig(sync=False)) as store:
        ledger = UsageLedger(store)
        # A row of the old day-keyed layout, as a journal written before the change holds.
        old = _row(rng, "S-old")
        await _commit(store, [EntityWrite(TABLE, f"{PREFIX}{old.day}:01J0000000000000000000000",
                                          msgspec.msgpack.encode(old))])
        rows.append(old)
        ledger.load()
        for i in range(60):
            batch = [_row(rng, rng.choice(("S-old", "S1", "S2", "S2:x", f"S{i}")))
                     for _ in range(rng.randrange(1, 4))]
            await _commit(store, [ledger.record(row) for row in batch])
            rows.extend(batch)
        expected = _oracle(rows)
        keys = [*expected, ("session", "S-none", "all"), ("principal", "user:z", "all")]
        assert _answers(ledger, keys) == {key: expected.get(key, Tally()) for key in keys}
    with JournalStore.open(data, config=JournalConfig(sync=False)) as store:
        assert _answers(UsageLedger(store), keys) == {key: expected.get(key, Tally())
                                                       for key in keys}


def _held_bytes(ledger: UsageLedger, store: JournalStore) -> int:
    """Bytes of every object reachable from ``ledger``, but through the store it was given."""
    seen, todo, total = {id(store)}, [ledger], 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


async def test_the_ledger_holds_nothing_per_session(tmp_path: Path) -> None:
    """Sessions never stop being made: what the ledger keeps must not grow with them."""
    rng = random.Random(8)
    with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        ledger = UsageLedger(store)

        async def calls(first: int, sessions: int) -> None:
            for i in range(first, first + sessions, 50):
                await _commit(store, [ledger.record(_row(rng, f"S{n}"))
                                      for n in range(i, i + 50)])

        await calls(0, 200)  # every principal, agent and day is known from here on
        before = _held_bytes(ledger, store)
        await calls(200, 2000)
        grown = _held_bytes(ledger, store) - before
        # A sum held per session was ~170 B each: 340 kB over these 2,000 sessions.
        assert grown < 2000 * 8, f"the ledger grew {grown} B over 2,000 new sessions"
        assert ledger.session_totals("S1999").calls == 1
