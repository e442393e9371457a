"""Three daemons on one PostgreSQL journal, SIGKILLed and restarted at random while a client
drives the tool-loop workload, with and without approvals, through randomly chosen daemons
(the turns without approvals share one session, so new runs are handed over to the daemon
that owns their session).

At the end: every turn ends ``result=K``; every run's tape, tailed over SSE and re-attached
on another daemon whenever one dies, arrived dense from 0 with no gap and no duplicate; no
run is left unfinished; no write of a fenced-out owner landed (each run's tape has exactly
one terminal status, every ``run.recovered`` follows a lease takeover, and the journal's
chain verifies).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from palyra_gen.palyra import v1 as pb

from palyra.core.ids import new_ulid
from palyra.engine import member_from, run_next
from palyra.journal import JournalConfig, JournalStore, verify_store
from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow

K = 3
TURNS = 24
CONCURRENT = 4
KILLS = 4
LEASE_TTL_S = 2.0
TOKEN = "many-daemons-test-token-0123456789abcdef"
HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-device-id": "01J00000000000000000000000",
           "x-palyra-principal": "admin:ops"}
TERMINAL = ("RUN_STATE_DONE", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED")
RUN_TAG = new_ulid()
TASK = (f"Start from 0 and add 1 to the running total {K} times, one add tool call per step, "
        "then reply with the final result.")


class Cluster:
    """The daemons, and which of them are up right now."""

    def __init__(self, daemons: list[DaemonProcess]) -> None:
        self.daemons = daemons
        self.down: set[int] = set()
        self.kills = 0

    def base(self) -> str:
        up = [i for i in range(len(self.daemons)) if i not in self.down]
        daemon = self.daemons[random.choice(up) if up else 0]
        return f"http://127.0.0.1:{daemon.http_port}"

    async def call(self, client: httpx.AsyncClient, method: str, path: str,
                   body: dict[str, Any] | None = None, ok: tuple[str, ...] = ()) -> Any:
        """Call a random live daemon; retry another on a dead one or a retryable answer."""
        deadline = time.monotonic() + 60
        while True:
            try:
                response = await client.request(method, self.base() + path, json=body,
                                                 headers=HEADERS, timeout=10)
                if response.status_code < 300:
                    return response.json()
                code = response.json().get("code", "")
                if code in ok:
                    return None
                if response.status_code < 500 and code not in ("UNAVAILABLE", "LEASE_STALE"):
                    raise AssertionError(f"{method} {path}: {response.status_code} "
                                         f"{response.text}")
            except (httpx.TransportError, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{method} {path}: no daemon answered for 60 s")
            await asyncio.sleep(0.1)


async def _tail(cluster: Cluster, client: httpx.AsyncClient, run_id: str,
                ended: asyncio.Event, tape_len: list[int]) -> list[int]:
    """Every tape_seq of the run, re-attaching from the last one seen on any daemon."""
    seqs: list[int] = []
    while not (ended.is_set() and len(seqs) >= tape_len[0]):
        after = seqs[-1] if seqs else -1
        try:
            async with client.stream("GET", f"{cluster.base()}/v1/runs/{run_id}/events",
                                     params={"after_seq": after}, headers=HEADERS,
                                     timeout=httpx.Timeout(10, read=2)) as response:
                if response.status_code != 200:
                    await asyncio.sleep(0.1)
                    continue
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        seqs.append(int(line[4:]))
        except (httpx.TransportError, httpx.StreamError):
            await asyncio.sleep(0.05)
    return seqs


async def _turn(cluster: Cluster, client: httpx.AsyncClient, i: int) -> dict[str, Any]:
    approvals = i % 2 == 1
    # Turns without approvals share one session: a run started on a daemon that does not
    # own the session (another turn's run is live there) is handed over to its owner.
    session_key = f"turn-{i}-{new_ulid()}" if approvals else f"shared-{RUN_TAG}"
    if approvals:
        session = (await cluster.call(client, "POST", "/v1/sessions:resolve",
                                      {"sessionKey": session_key}))["session"]
        await cluster.call(client, "POST", f"/v1/sessions/{session['sessionId']}/tool-postures",
                           {"toolName": "add", "posture": "TOOL_POSTURE_ASK_EACH_TIME"})
    run_id = new_ulid()  # the client names the run, so a retried create cannot make two
    await cluster.call(client, "POST", "/v1/runs", {
        "v": 1, "runId": run_id, "sessionKey": session_key, "input": {"text": TASK},
        "complete": True}, ok=("ALREADY_EXISTS",))
    ended, tape_len = asyncio.Event(), [0]
    tail = asyncio.create_task(_tail(cluster, client, run_id, ended, tape_len))
    deadline = time.monotonic() + 90
    while True:
        run = (await cluster.call(client, "GET", f"/v1/runs/{run_id}"))["run"]
        if run["state"] in TERMINAL:
            break
        assert time.monotonic() < deadline, f"run {run_id} stuck: {run}"
        approval_id = run.get("pendingApprovalId", "")
        if run["state"] == "RUN_STATE_WAITING_FOR_APPROVAL" and approval_id:
            await cluster.call(client, "POST", f"/v1/approvals/{approval_id}:decide", {
                "decision": "APPROVAL_DECISION_APPROVE", "scope": "APPROVAL_SCOPE_ONCE",
                "reason": "ok"}, ok=("APPROVAL_ALREADY_DECIDED",))
        await asyncio.sleep(0.05)
    tape_len[0] = int(run.get("tapeLen", 0))
    ended.set()
    async with asyncio.timeout(60):
        seqs = await tail
    return {"run": run, "seqs": seqs, "approvals": approvals}


async def _killer(cluster: Cluster, stop: asyncio.Event) -> None:
    """SIGKILL a random live daemon every 0.5-1.5 s (``KILLS`` times), keeping one up;
    each comes back after a pause, while the others may be killed meanwhile."""
    rng = random.Random()

    async def restart(victim: int) -> None:
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        await asyncio.to_thread(cluster.daemons[victim].start, 60.0)
        cluster.down.discard(victim)

    restarts: list[asyncio.Task[None]] = []
    try:
        while cluster.kills < KILLS and not stop.is_set():
            await asyncio.sleep(rng.uniform(0.5, 1.5))
            up = [i for i in range(len(cluster.daemons)) if i not in cluster.down]
            if len(up) < 2:
                continue
            victim = rng.choice(up)
            cluster.down.add(victim)
            cluster.daemons[victim].kill()
            cluster.kills += 1
            restarts.append(asyncio.create_task(restart(victim)))
    finally:
        await asyncio.gather(*restarts)


async def _drive(cluster: Cluster) -> list[dict[str, Any]]:
    stop = asyncio.Event()
    limit = asyncio.Semaphore(CONCURRENT)
    async with httpx.AsyncClient() as client:

        async def one(i: int) -> dict[str, Any]:
            async with limit:
                return await _turn(cluster, client, i)

        killer = asyncio.create_task(_killer(cluster, stop))
        try:
            return list(await asyncio.gather(*(one(i) for i in range(TURNS))))
        finally:
            stop.set()
            await killer


def _one_history(run_id: str, members: list[Any]) -> None:
    """The tape is one run's history, not two owners' interleaved: every status follows the
    run machine from ``pending`` to one ``done``, and exactly K tool results were recorded."""
    state = "pending"
    for member in members:
        if isinstance(member, pb.RunStatus):
            assert state not in ("done", "failed", "cancelled"), (run_id, "status after end")
            state = run_next(state, member.event)
            assert member.state.name.lower() == state, (run_id, state, member)
    assert state == "done", run_id
    results = sum(isinstance(m, pb.ToolResult) for m in members)
    assert results == K, (run_id, results)


@pytest.fixture
def cluster(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[tuple[Cluster, str]]:
    dsn = postgres_server.create_database()
    env = clean_env(PALYRA_JOURNAL_BACKEND="postgres", PALYRA_JOURNAL_DSN=dsn,
                    PALYRA_JOURNAL_LEASE_TTL_S=str(LEASE_TTL_S), PALYRA_ADMIN_TOKEN=TOKEN,
                    PALYRA_PROVIDER_SCRIPTED_DELAY_S="0.2")
    daemons = [DaemonProcess(tmp_path / f"d{i}", env=env) for i in range(3)]
    try:
        for daemon in daemons:
            daemon.start(60.0)
        yield Cluster(daemons), dsn
    finally:
        for daemon in daemons:
            daemon.kill()


def test_three_daemons_killed_at_random_lose_nothing(
    cluster: tuple[Cluster, str], tmp_path: Path
) -> None:
    group, dsn = cluster
    started = time.monotonic()
    turns = asyncio.run(_drive(group))
    assert group.kills == KILLS
    for turn in turns:
        run, seqs = turn["run"], turn["seqs"]
        assert run["state"] == "RUN_STATE_DONE", run
        assert f"result={K}" in run["finalText"], run
        # Re-attached on whichever daemon was up: dense from 0, no gap, no duplicate.
        assert seqs == list(range(int(run["tapeLen"]))), (run["runId"], seqs)
    for daemon in group.daemons:
        daemon.kill()
    with psycopg.connect(dsn) as conn:
        runs = conn.execute("SELECT count(*) FROM journal_kv WHERE db = 'runs'").fetchone()
    assert runs is not None and runs[0] == TURNS  # no run made twice by a retry
    store = JournalStore.open(tmp_path / "verify", config=JournalConfig(
        backend="postgres", dsn=dsn, readonly=True))
    try:
        assert verify_store(store).ok
        kinds: list[str] = []
        after = 0
        while page := store.read_range(after, 1000):
            kinds += [e.kind for e in page]
            after = page[-1].position
        # Each SIGKILL left runs to resume: some daemon took them over (the test's premise).
        print(f"kills={group.kills} resumed={kinds.count('run.recovered')} "
              f"handed_over={kinds.count('session.run_relayed')} "
              f"relayed_decisions={kinds.count('approval.relayed')}")
        for turn in turns:
            tape = store.read_tape(turn["run"]["runId"], -1, 10_000).events
            # One end only: a fenced-out owner's write would add a second, or break the order.
            _one_history(turn["run"]["runId"], [member_from(e.kind, e.payload) for e in tape])
    finally:
        store.close()
    assert time.monotonic() - started < 150
