"""A reply that cannot be delivered is logged with its channel, conversation, attempt and
error (not only visible in ``GET /v1/tasks``), and still raised so the task retries it."""

from __future__ import annotations

import socket

import httpx
import msgspec
import pytest
from structlog.testing import capture_logs

from palyra.channels.adapters.standard_webhooks import WebhookSink
from palyra.channels.outbox import SEND_TASK, OutboundReply, Outbox
from palyra.tasks.model import new_task
from palyra.tasks.worker import TaskContext
from tests.channels.conftest import REPLY_SECRET


def _closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("attempt", "last"), [(1, False), (8, True)])
async def test_an_undelivered_reply_is_logged_and_retried(attempt: int, last: bool) -> None:
    sink = WebhookSink("webhook:hooks", f"http://127.0.0.1:{_closed_port()}/r", REPLY_SECRET,
                       rate_per_s=0, client=httpx.AsyncClient(timeout=2))
    reply = OutboundReply(sink="webhook:hooks", key="reply:run1:0", text="hi",
                          conversation_id="room-1", thread_id="t-9")
    task = msgspec.structs.replace(
        new_task("T1", SEND_TASK, 0, max_attempts=8), attempts=attempt)
    try:
        with capture_logs() as logs, pytest.raises(httpx.ConnectError):
            await Outbox({"webhook:hooks": sink}).handle(
                TaskContext(task, msgspec.to_builtins(reply)))
    finally:
        await sink.aclose()
    [entry] = [e for e in logs if e["event"].startswith("channel reply not delivered")]
    assert entry["log_level"] == "warning"
    assert (entry["channel"], entry["conversation_id"], entry["thread_id"]) == (
        "webhook:hooks", "room-1", "t-9")
    assert (entry["attempt"], entry["max_attempts"], entry["task_id"]) == (attempt, 8, "T1")
    assert entry["error"].startswith("ConnectError")
    assert entry["event"].endswith("giving up") is last
