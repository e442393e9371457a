"""Background tasks as data: the record, its lease, and every change as a pure function.

Each function takes a :class:`TaskRecord` (and the time) and returns the next
one, moving the state only through the machine generated from
``spec/lifecycle/background_task.yaml``. Nothing here does I/O; the queue
(``palyra.tasks.queue``) journals what these return, one commit per change.

Leases are fencing tokens. A claim bumps ``epoch``; every later write of that
worker (heartbeat, success, failure) names the epoch it holds and is refused
with ``LEASE_STALE`` once the task has moved on (recovered, re-claimed,
cancelled). Two owners can therefore never both complete a task: the second
one's epoch is stale.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import msgspec
from palyra_gen.lifecycle import IllegalTransitionError
from palyra_gen.lifecycle.background_task import (
    FINAL_STATES,
    BackgroundTaskEvent,
    BackgroundTaskStateId,
    allowed_events,
    next_state,
)

from palyra.core.errors import ErrorCode, IllegalTransition, PalyraError

Event = BackgroundTaskEvent
State = BackgroundTaskStateId

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_LEASE_MS = 30_000
BACKOFF_BASE_MS = 1_000
BACKOFF_CAP_MS = 5 * 60_000
HEARTBEAT_FRACTION = 0.8
"""A worker heartbeats at most every ``0.8 x`` its lease (Temporal's throttle), so a
live worker's lease never runs out between two heartbeats."""


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One task as stored in the journal's ``tasks`` table.

    Not tracked by the garbage collector (``gc=False``): it holds only strings and
    ints, so it can never be part of a reference cycle, and the queue makes two or
    three of them per task (each one a young object every collection walked).
    """

    task_id: str
    kind: str
    state: str = State.QUEUED
    payload_json: str = "{}"
    priority: int = 0
    not_before_ms: int = 0
    expires_at_ms: int = 0
    attempts: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    parent_run_id: str = ""
    idempotency_key: str = ""
    lease_owner: str = ""
    lease_epoch: int = 0
    lease_expires_ms: int = 0
    heartbeat_ms: int = 0
    last_error: str = ""
    result_json: str = ""
    cancel_reason: str = ""
    created_ms: int = 0
    updated_ms: int = 0
    # Debounce/batching (see :func:`coalesce`): tasks enqueued under one key join the
    # queued task of that key; its payload is then ``{"items": [...]}``.
    debounce_key: str = ""
    batch_count: int = 0
    # What a worker recorded of its progress (a heartbeat's details, as Temporal's):
    # kept across attempts, so a retry resumes after the work already done.
    progress_json: str = ""

    @property
    def final(self) -> bool:
        """No event is allowed any more."""
        return self.state in FINAL_STATES

    @property
    def leased(self) -> bool:
        """A worker holds it (running, or running with a cancel requested)."""
        return self.state in (State.RUNNING, State.CANCEL_REQUESTED)


class Outcome(enum.StrEnum):
    """Why a lease ended without success: what ``release`` does next."""

    FAILED = "failed"  # the worker reported a failure: retry with backoff, or fail
    LOST = "lost"  # the lease ran out or its process died: same, counted as an attempt


def _move(rec: TaskRecord, event: Event, now_ms: int, **changes: object) -> TaskRecord:
    try:
        state = next_state(rec.state, event)
    except IllegalTransitionError as exc:
        raise IllegalTransition(
            f"task {rec.task_id}: {event} is not allowed in {rec.state}",
            details={"lifecycle": exc.lifecycle, "state": exc.state, "event": exc.event},
        ) from exc
    return msgspec.structs.replace(rec, state=state, updated_ms=now_ms, **changes)


def new_task(task_id: str, kind: str, now_ms: int, *, payload_json: str = "{}",
             priority: int = 0, not_before_ms: int = 0, expires_at_ms: int = 0,
             max_attempts: int = DEFAULT_MAX_ATTEMPTS, parent_run_id: str = "",
             idempotency_key: str = "") -> TaskRecord:
    """A queued task."""
    return TaskRecord(task_id=task_id, kind=kind, payload_json=payload_json,
                      priority=priority, not_before_ms=not_before_ms,
                      expires_at_ms=expires_at_ms, max_attempts=max(1, max_attempts),
                      parent_run_id=parent_run_id, idempotency_key=idempotency_key,
                      created_ms=now_ms, updated_ms=now_ms)


@dataclass(frozen=True, slots=True)
class Debounce:
    """Join enqueues under ``key``: wait ``quiet_ms`` after the latest, never more than
    ``max_wait_ms`` after the first, and at most ``cap`` items per task (0: no cap)."""

    key: str
    quiet_ms: int
    max_wait_ms: int
    cap: int = 0


def debounced_task(task_id: str, kind: str, now_ms: int, item: Any, rule: Debounce,
                   **fields: Any) -> TaskRecord:
    """The first task of a debounce key: one item, due after the quiet window."""
    rec = new_task(task_id, kind, now_ms,
                   payload_json=msgspec.json.encode({"items": [item]}).decode(), **fields)
    return msgspec.structs.replace(rec, debounce_key=rule.key, batch_count=1,
                                   not_before_ms=now_ms + min(rule.quiet_ms, rule.max_wait_ms))


def coalesce(rec: TaskRecord, item: Any, now_ms: int, rule: Debounce) -> TaskRecord | None:
    """``rec`` with one more item, due ``quiet_ms`` from now but no later than
    ``max_wait_ms`` after its first item; None when it cannot take it (claimed, final,
    full, or another key): the caller starts a new task."""
    # A task that has already run once (and is queued for a retry) takes no new
    # items: its first attempt may have acted on the batch it had.
    if (rec.state != State.QUEUED or rec.debounce_key != rule.key or rec.attempts
            or (rule.cap and rec.batch_count >= rule.cap)):
        return None
    payload = msgspec.json.decode(rec.payload_json)
    payload["items"].append(item)
    due = min(now_ms + rule.quiet_ms, rec.created_ms + rule.max_wait_ms)
    return msgspec.structs.replace(
        rec, payload_json=msgspec.json.encode(payload).decode(),
        batch_count=rec.batch_count + 1, not_before_ms=max(rec.not_before_ms, due),
        updated_ms=now_ms)


def is_ready(rec: TaskRecord, now_ms: int) -> bool:
    """Queued, due, and not expired."""
    return (rec.state == State.QUEUED and rec.not_before_ms <= now_ms
            and not is_expired(rec, now_ms))


def is_expired(rec: TaskRecord, now_ms: int) -> bool:
    """Past ``expires_at`` and not yet final."""
    return not rec.final and rec.expires_at_ms != 0 and now_ms >= rec.expires_at_ms


def claim(rec: TaskRecord, owner: str, now_ms: int, lease_ms: int) -> TaskRecord:
    """Start a ready task under a new lease (epoch + 1)."""
    return _move(rec, Event.START, now_ms, lease_owner=owner, lease_epoch=rec.lease_epoch + 1,
                 lease_expires_ms=now_ms + lease_ms, heartbeat_ms=now_ms,
                 attempts=rec.attempts + 1, last_error="")


def check_lease(rec: TaskRecord, epoch: int) -> None:
    """Refuse a worker write whose epoch is not the task's current lease.

    Raises:
        PalyraError: ``LEASE_STALE``.
    """
    if not rec.leased or rec.lease_epoch != epoch:
        raise PalyraError(
            f"task {rec.task_id}: lease epoch {epoch} is stale (task is {rec.state}, "
            f"epoch {rec.lease_epoch})", code=ErrorCode.LEASE_STALE,
            details={"task_id": rec.task_id, "epoch": str(epoch),
                     "current_epoch": str(rec.lease_epoch), "state": str(rec.state)})


def heartbeat(rec: TaskRecord, epoch: int, now_ms: int, lease_ms: int,
              progress_json: str | None = None) -> TaskRecord:
    """Renew the lease, recording ``progress_json`` when given. The caller reads
    ``state``: ``cancel_requested`` means stop."""
    check_lease(rec, epoch)
    return msgspec.structs.replace(
        rec, heartbeat_ms=now_ms, lease_expires_ms=now_ms + lease_ms, updated_ms=now_ms,
        progress_json=rec.progress_json if progress_json is None else progress_json)


def succeed(rec: TaskRecord, epoch: int, now_ms: int, result_json: str = "") -> TaskRecord:
    """The worker finished (also allowed after a cancel request: the work is done)."""
    check_lease(rec, epoch)
    return _move(rec, Event.SUCCEED, now_ms, result_json=result_json, lease_expires_ms=0)


def backoff_ms(attempts: int) -> int:
    """Delay before attempt ``attempts + 1``: 1 s, 2 s, 4 s … capped at 5 min."""
    return int(min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** max(0, attempts - 1)))


def release(rec: TaskRecord, now_ms: int, error: str, outcome: Outcome) -> TaskRecord:
    """End a lease without success: cancel if asked, retry with backoff, or fail for good.

    Used both for a worker's reported failure (after :func:`check_lease`) and by
    recovery for a lease whose owner is gone (no epoch to check: the queue owns it).
    """
    if rec.state == State.CANCEL_REQUESTED:
        return _move(rec, Event.CANCEL, now_ms, lease_expires_ms=0,
                     last_error=error or rec.last_error)
    if rec.attempts < rec.max_attempts and not is_expired(rec, now_ms):
        return _move(rec, Event.RETRY, now_ms, lease_expires_ms=0, last_error=error,
                     not_before_ms=now_ms + backoff_ms(rec.attempts))
    note = f"{error} (attempt {rec.attempts} of {rec.max_attempts}, {outcome})"
    return _move(rec, Event.FAIL, now_ms, lease_expires_ms=0, last_error=note)


def fail(rec: TaskRecord, epoch: int, now_ms: int, error: str) -> TaskRecord:
    """The worker reports a failure: :func:`release` under its lease."""
    check_lease(rec, epoch)
    return release(rec, now_ms, error, Outcome.FAILED)


def request_cancel(rec: TaskRecord, now_ms: int, reason: str) -> TaskRecord:
    """Cancel: a task nobody runs ends at once; a running one when its worker hears it."""
    if rec.final or rec.state == State.CANCEL_REQUESTED:
        return rec
    asked = _move(rec, Event.REQUEST_CANCEL, now_ms, cancel_reason=reason)
    if rec.leased:
        return asked
    return _move(asked, Event.CANCEL, now_ms)


def expire(rec: TaskRecord, now_ms: int) -> TaskRecord:
    """An expired task that nobody holds ends ``expired``."""
    return _move(rec, Event.EXPIRE, now_ms, lease_expires_ms=0)


def recover(rec: TaskRecord, now_ms: int, *, owner_alive: bool) -> TaskRecord:
    """What recovery does with one task (the same answer however often it runs).

    A lease whose owner is gone (a previous process, or a lapsed lease) ends as
    :func:`release` says; an expired task nobody holds expires; anything else
    is left as it is.
    """
    if rec.leased and (not owner_alive or rec.lease_expires_ms <= now_ms):
        return release(rec, now_ms, rec.last_error or "the worker's lease lapsed", Outcome.LOST)
    if not rec.leased and is_expired(rec, now_ms) and Event.EXPIRE in allowed_events(rec.state):
        return expire(rec, now_ms)
    return rec


_ENCODE = msgspec.msgpack.Encoder().encode  # ``msgspec.msgpack.encode``'s bytes, one call less


def encode(rec: TaskRecord) -> bytes:
    """The stored form (msgpack)."""
    return _ENCODE(rec)


def decode(data: bytes) -> TaskRecord:
    """The record from its stored form (fields it does not know are left out)."""
    return msgspec.msgpack.decode(data, type=TaskRecord)


# Rows written by another version of the daemon: the fields this one does not know are
# carried through its changes untouched, so daemons of two versions can share a queue.
_KNOWN = frozenset(TaskRecord.__struct_fields__)
_FIELDS = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])


def unknown_fields(data: bytes) -> dict[str, msgspec.Raw]:
    """The fields of the stored row ``data`` that :class:`TaskRecord` does not have,
    each as its encoded value (empty for a row of this version)."""
    return {k: v for k, v in _FIELDS.decode(data).items() if k not in _KNOWN}


def encode_carrying(rec: TaskRecord, carried: dict[str, msgspec.Raw]) -> bytes:
    """The stored form of ``rec`` with the unknown fields ``carried`` (from
    :func:`unknown_fields` of the row it came from) kept as they were."""
    if not carried:
        return encode(rec)
    fields: dict[str, Any] = {f: getattr(rec, f) for f in TaskRecord.__struct_fields__}
    return msgspec.msgpack.encode({**fields, **carried})
