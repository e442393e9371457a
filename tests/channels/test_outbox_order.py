"""A long reply's chunks reach the platform in order, and replies to one conversation in
the order they were queued, with sixteen sends at once; a retry after a failure and a
restart resumes after the chunks already delivered, never sending one twice.

The platform is the local Bot API (``FakeTelegram``), taking concurrent requests in a
random order as a busy platform does; Telegram gives a bot no way to ask whether a
message went out, so only the task's recorded progress keeps a chunk from going twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from palyra.channels.adapters.telegram import BotApi, TelegramSink
from palyra.channels.outbox import SEND_CONCURRENCY, SEND_TASK, OutboundReply, Outbox, queue_send
from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import TaskQueue
from palyra.tasks.worker import TaskWorker
from palyra.testing.telegram import FakeTelegram

TOKEN = "123456:AAE-test-token-of-the-outbox-order-tests"
SINK = "telegram:tg"


def _reply(chat: int, run: str, chunks: int) -> list[OutboundReply]:
    return [OutboundReply(sink=SINK, key=f"reply:{run}:{i}", text=f"{run} part {i:02d}",
                          conversation_id=str(chat)) for i in range(chunks)]


class _Daemon:
    """The journal, the task queue and the outbox's worker, as the daemon wires them."""

    def __init__(self, path: Path, bot: FakeTelegram) -> None:
        self.store = JournalStore.open(path, config=JournalConfig(sync=False))
        self.queue = TaskQueue(self.store)
        self.sink = TelegramSink(SINK, BotApi(bot.api_url, TOKEN), rate_per_s=0)
        self.outbox = Outbox({SINK: self.sink}, self.queue)
        self.worker = TaskWorker(self.queue, {SEND_TASK: self.outbox.handle},
                                 concurrency=SEND_CONCURRENCY, lease_ms=self.outbox.lease_ms)

    async def __aenter__(self) -> _Daemon:
        await self.queue.start()
        self.worker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.close()
        await self.queue.close()
        await self.sink.aclose()
        self.store.close()


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(20):
        while not predicate():  # noqa: ASYNC110 - polls a fake platform in another thread
            await asyncio.sleep(0.02)


def _texts(bot: FakeTelegram, chat: int) -> list[str]:
    return [r["text"] for r in bot.replies() if r["chat_id"] == chat]


async def test_chunks_and_replies_of_a_conversation_arrive_in_order(tmp_path: Path) -> None:
    chats = [101, 102, 103, 104]
    with FakeTelegram(TOKEN, jitter_s=0.02) as bot:
        async with _Daemon(tmp_path / "data", bot) as daemon:
            # Two replies per conversation, queued one after the other (the second
            # run ended later), eight chunks each: 64 chunks, sixteen sends at once.
            wanted: dict[int, list[str]] = {}
            for chat in chats:
                for run in (f"a{chat}", f"b{chat}"):
                    reply = _reply(chat, run, 8)
                    await queue_send(daemon.queue, reply)
                    wanted.setdefault(chat, []).extend(r.text for r in reply)
            await _until(lambda: len(bot.replies()) == 64)
            await _until(lambda: not [t for t in daemon.queue.unfinished()
                                      if t.kind == SEND_TASK])
            assert len(daemon.outbox.lanes) == 0  # no lane outlives its sends
    for chat in chats:
        assert _texts(bot, chat) == wanted[chat]
    assert bot.duplicate_replies() == 0


async def test_a_retry_after_a_restart_resumes_after_the_chunks_delivered(
        tmp_path: Path) -> None:
    reply = _reply(7, "r1", 6)
    # The fourth chunk is refused (429): the attempt fails after three went out.
    with FakeTelegram(TOKEN, refuse=frozenset({4})) as bot:
        async with _Daemon(tmp_path / "data", bot) as daemon:
            await queue_send(daemon.queue, reply)
            await _until(lambda: any(t.attempts == 1 and t.state == "queued"
                                     for t in daemon.queue.unfinished()))
            [task] = daemon.queue.unfinished()
            assert _texts(bot, 7) == [r.text for r in reply[:3]]
        # A new process: the retry, due after its backoff, is what the journal kept.
        async with _Daemon(tmp_path / "data", bot) as daemon:
            await _until(lambda: daemon.queue.require(task.task_id).state == "succeeded")
            assert daemon.queue.require(task.task_id).attempts == 2
    assert _texts(bot, 7) == [r.text for r in reply]
    assert bot.duplicate_replies() == 0
