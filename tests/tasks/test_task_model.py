"""The pure task model: fencing epochs, attempts and backoff, cancel, expiry, recovery."""

from __future__ import annotations

import gc

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.core.errors import ErrorCode, IllegalTransition, PalyraError
from palyra.tasks import model
from palyra.tasks.model import Outcome, State

T0 = 1_700_000_000_000


def _task(**kw: object) -> model.TaskRecord:
    return model.new_task("01J00000000000000000000000", "k", T0, **kw)  # type: ignore[arg-type]


def test_claim_bumps_the_epoch_and_counts_the_attempt() -> None:
    first = model.claim(_task(), "w1", T0, 1000)
    assert (first.state, first.lease_epoch, first.attempts, first.lease_expires_ms) == (
        State.RUNNING, 1, 1, T0 + 1000)
    again = model.claim(model.release(first, T0 + 5, "boom", Outcome.FAILED), "w2",
                        T0 + 10_000, 1000)
    assert (again.lease_epoch, again.attempts, again.lease_owner) == (2, 2, "w2")


@given(epoch=st.integers(0, 10), op=st.sampled_from(["heartbeat", "succeed", "fail"]))
def test_only_the_current_epoch_may_write(epoch: int, op: str) -> None:
    rec = model.claim(_task(), "w1", T0, 1000)
    rec = model.release(rec, T0 + 1, "lost", Outcome.LOST)  # attempt 1 lapsed
    rec = model.claim(rec, "w2", T0 + 10_000, 1000)  # epoch 2 now
    calls = {"heartbeat": lambda e: model.heartbeat(rec, e, T0 + 10_001, 1000),
             "succeed": lambda e: model.succeed(rec, e, T0 + 10_001),
             "fail": lambda e: model.fail(rec, e, T0 + 10_001, "x")}
    if epoch == rec.lease_epoch:
        calls[op](epoch)
    else:
        with pytest.raises(PalyraError) as info:
            calls[op](epoch)
        assert info.value.code is ErrorCode.LEASE_STALE


def test_a_finished_task_refuses_every_worker_write() -> None:
    done = model.succeed(model.claim(_task(), "w", T0, 1000), 1, T0 + 1)
    assert done.state == State.SUCCEEDED and done.final
    for write in (lambda: model.succeed(done, 1, T0 + 2), lambda: model.heartbeat(done, 1, T0, 9)):
        with pytest.raises(PalyraError) as info:
            write()
        assert info.value.code is ErrorCode.LEASE_STALE


@given(max_attempts=st.integers(1, 5))
def test_failures_retry_with_backoff_until_the_last_attempt(max_attempts: int) -> None:
    rec, now = _task(max_attempts=max_attempts), T0
    for attempt in range(1, max_attempts + 1):
        assert model.is_ready(rec, now)
        rec = model.claim(rec, "w", now, 1000)
        rec = model.fail(rec, rec.lease_epoch, now + 1, f"boom {attempt}")
        if attempt < max_attempts:
            assert rec.state == State.QUEUED
            assert rec.not_before_ms == now + 1 + model.backoff_ms(attempt)
            assert not model.is_ready(rec, rec.not_before_ms - 1)
            now = rec.not_before_ms
    assert rec.state == State.FAILED and rec.attempts == max_attempts
    assert f"boom {max_attempts}" in rec.last_error


def test_backoff_doubles_and_is_capped() -> None:
    assert [model.backoff_ms(a) for a in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]
    assert model.backoff_ms(40) == model.BACKOFF_CAP_MS


def test_cancel_ends_a_queued_task_at_once_and_a_running_one_through_its_worker() -> None:
    queued = model.request_cancel(_task(), T0, "no")
    assert queued.state == State.CANCELLED and queued.cancel_reason == "no"
    running = model.claim(_task(), "w", T0, 1000)
    asked = model.request_cancel(running, T0 + 1, "stop")
    assert asked.state == State.CANCEL_REQUESTED
    assert model.heartbeat(asked, 1, T0 + 2, 1000).state == State.CANCEL_REQUESTED
    assert model.fail(asked, 1, T0 + 3, "cancelled").state == State.CANCELLED
    assert model.request_cancel(asked, T0 + 4, "again") is asked  # idempotent


@given(owner_alive=st.booleans(), lapse=st.integers(-5000, 5000),
       state=st.sampled_from(["queued", "running", "cancel_requested", "succeeded"]),
       ttl=st.sampled_from([0, 1, 10_000]))
def test_recovery_is_idempotent(owner_alive: bool, lapse: int, state: str, ttl: int) -> None:
    rec = _task(expires_at_ms=T0 + ttl if ttl else 0)
    if state != "queued":
        rec = model.claim(rec, "w", T0, 1000)
    if state == "cancel_requested":
        rec = model.request_cancel(rec, T0, "x")
    if state == "succeeded":
        rec = model.succeed(rec, 1, T0)
    now = T0 + 1000 + lapse
    once = model.recover(rec, now, owner_alive=owner_alive)
    assert model.recover(once, now, owner_alive=owner_alive) == once
    if rec.leased and not owner_alive:
        assert not once.leased  # a dead owner's lease never survives recovery


def test_illegal_moves_are_lifecycle_errors() -> None:
    with pytest.raises(IllegalTransition):
        model.claim(model.claim(_task(), "w", T0, 1000), "w2", T0, 1000)


def test_records_round_trip() -> None:
    rec = model.claim(_task(payload_json='{"a":1}', priority=3), "w", T0, 5)
    assert model.decode(model.encode(rec)) == rec


def test_progress_recorded_by_a_heartbeat_outlives_the_attempt() -> None:
    rec = model.claim(model.new_task("T1", "k", 0, max_attempts=3), "w", 1, 1000)
    noted = model.heartbeat(rec, rec.lease_epoch, 2, 1000, '{"sent":2}')
    assert model.heartbeat(noted, rec.lease_epoch, 3, 1000).progress_json == '{"sent":2}'
    retried = model.release(noted, 4, "boom", Outcome.FAILED)
    again = model.claim(msgspec.structs.replace(retried, not_before_ms=0), "w2", 5, 1000)
    assert (again.attempts, again.progress_json) == (2, '{"sent":2}')
    with pytest.raises(PalyraError):  # a stale lease records nothing
        model.heartbeat(again, rec.lease_epoch, 6, 1000, '{"sent":3}')


def test_records_are_not_tracked_by_the_garbage_collector() -> None:
    # Strings and ints only: no cycle can run through a record, and every change makes
    # one (a tracked one was a young object each collection walked).
    rec = model.new_task("t1", "k", 1, payload_json='{"a":[1]}')
    assert not gc.is_tracked(rec)
    assert not gc.is_tracked(model.claim(rec, "w", 2, 1000))
    assert not gc.is_tracked(model.decode(model.encode(rec)))
