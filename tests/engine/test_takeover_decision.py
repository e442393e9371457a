"""The pure decision a session claim makes: which unfinished runs it inherits and resumes."""

from __future__ import annotations

from palyra.engine.run.takeover import inherits, runs_to_resume
from palyra.engine.sessions.ownership import Claim
from palyra.journal import Lease


def _claim(session_id: str, *, new_term: bool = True, previous_owner: str = "") -> Claim:
    return Claim(session_id, Lease("session:" + session_id, "me", 2, previous_owner), new_term)


UNFINISHED = {"s1": ["r1", "r2"], "s2": ["r3"]}


def test_a_new_term_after_an_unsettled_one_resumes_what_its_owner_left() -> None:
    claim = _claim("s1", previous_owner="dead-daemon")
    assert inherits(claim, recovering=False)
    assert runs_to_resume([claim], UNFINISHED, False, lambda _: False) == [
        ("r1", claim.lease), ("r2", claim.lease)]


def test_a_run_this_daemon_runs_or_resumes_already_is_not_resumed_again() -> None:
    claim = _claim("s1", previous_owner="dead-daemon")
    assert runs_to_resume([claim], UNFINISHED, False, lambda run: run == "r1") == [
        ("r2", claim.lease)]


def test_a_term_held_here_or_after_a_settled_one_inherits_nothing() -> None:
    held = _claim("s1", new_term=False, previous_owner="dead-daemon")
    settled = _claim("s2")
    for claim in (held, settled):
        assert not inherits(claim, recovering=False)
    assert runs_to_resume([held, settled], UNFINISHED, False, lambda _: False) == []


def test_start_up_recovery_resumes_what_it_finds_whatever_the_previous_term() -> None:
    settled = _claim("s2")
    assert inherits(settled, recovering=True)
    assert runs_to_resume([settled], UNFINISHED, True, lambda _: False) == [
        ("r3", settled.lease)]
    assert runs_to_resume([_claim("s2", new_term=False)], UNFINISHED, True,
                          lambda _: False) == []
