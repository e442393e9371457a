"""The writer's memory of the chain heads and tape seqs it plans on.

Session chain heads and next tape seqs are remembered across commits (one
thread writes), so a lone appender's commit reads neither back from LMDB. The
memory moves when a frame is reserved, before it is written: the next frame is
planned on it while this one is in flight (``write.writer``). A frame whose
write fails drops both memories; whatever is missing is read again from LMDB.
"""

from __future__ import annotations

from palyra.journal.write.plan import CommitPlan


def remember(
    plan: CommitPlan, sessions: dict[str, bytes], tape_next: dict[str, int], limit: int
) -> None:
    """Remember the chain heads and tape seqs ``plan`` moves to, once it is framed.

    The next batch is planned on them while this frame is still being written; a
    frame whose write fails is taken back and both memories are dropped with it
    (``FramesInFlight._rollback``), and ``_heads`` fills them only with what LMDB holds. It
    runs with no other frame in flight, so what it drops is in LMDB. A memory that has
    reached ``limit`` entries is dropped before the commit's values go in, so it
    holds fewer than the limit plus one batch's sessions or runs. Straight-line:
    it runs once per commit, a lone append's too.
    """
    if len(sessions) >= limit:
        sessions.clear()
    sessions.update(plan.sessions)
    if len(tape_next) >= limit:
        tape_next.clear()
    tape_next.update(plan.tape_next)
