"""Run RPCs: RunStream, CreateRun, inputs, completion, abort, reads, tape, watch.

Everything a client sees about a run comes from the journal's tape followers
(``follow_tape_batches``: the store from a cursor, then what each commit hands
them), so a stream, a watcher that attached late and a watcher after a restart
all see the same events in the same order, each once. A client that asks for
``batch`` gets one commit's events per message.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator

import betterproto2
from palyra_gen.palyra import v1 as pb

from palyra.app._base import AppBase
from palyra.app._convert import (
    check_version,
    identity_of,
    run_proto,
    session_proto,
    tape_event_proto,
    tape_event_with,
    tape_member,
)
from palyra.app._tape import TapeBatch, run_stream_responses
from palyra.app.context import CallContext
from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine import (
    IdentityRec,
    RunQuery,
    Selectors,
    StartRun,
    covered_digest,
    is_run_terminal,
    is_terminal_status,
    may_access,
    member_from,
    run_state_of_proto,
    runs_page,
)
from palyra.journal import StoredEvent, Subscription

log = logging.getLogger("palyra.app")
Member = betterproto2.Message | None
MAX_TAPE_PAGE = 1000
DEFAULT_RUNS_PAGE = 50
MAX_RUNS_PAGE = 500
MAX_TAPE_BYTES = 2 * 1024 * 1024
MAX_ATTACHMENTS = 32


def _input_of(message: pb.MessageInput | None) -> tuple[str | None, list[pb.Attachment]]:
    if message is None:
        return None, []
    if len(message.attachments) > MAX_ATTACHMENTS:
        raise InvalidArgument(f"at most {MAX_ATTACHMENTS} attachments per input")
    return message.text, list(message.attachments)


class RunsApi(AppBase):
    """The run half of GatewayService."""

    async def run_stream(
        self, ctx: CallContext, requests: AsyncIterator[pb.RunStreamRequest]
    ) -> AsyncIterator[pb.RunStreamResponse]:
        """Bidi run loop: first message starts, later ones are inputs or approvals.

        Each commit's (or replay page's) events are answered as :class:`TapeResponse`
        messages, which keep the stored batch they hold (``app/_tape.py``): a transport
        that writes bytes encodes them from it.
        """
        identity = identity_of(ctx)
        try:
            first = await anext(aiter(requests))
        except StopAsyncIteration:
            raise InvalidArgument("RunStream needs a first message") from None
        check_version(first.v)
        text, raw = _input_of(first.input)
        run_id = first.run_id.strip() or new_ulid()
        attachments = await self._store_attachments(identity, raw, run_id)
        agent = self._serving_agent(identity, first.agent_id, first.session_key, first.model)
        self._check_budgets(identity, agent.agent_id)
        # The stream follows its run from its first commit, from memory: subscribed
        # before the run starts, it never reads the tape back from the store.
        since_start = self.store.subscribe_tape(run_id)
        try:
            started = await self.engine.start_run(identity, StartRun(
                Selectors(first.session_id, first.session_key, first.session_label,
                          first.reset_session, first.require_existing),
                text=text, attachments=attachments, run_id=run_id, driver="stream",
                complete=first.complete, agent_id=agent.agent_id,
                agent_postures=agent.postures, model_route=agent.model_route,
                response_cache=agent.response_cache,
                minted=not first.run_id.strip()))
        except BaseException:
            self.store.unsubscribe(since_start)
            raise
        session_id = started.session.session_id
        failures: list[PalyraError] = []
        pump = self.engine.spawn(
            self._pump(identity, requests, run_id, session_id, failures, first.complete))
        final: pb.RunStatus | None = None
        error: pb.RunError | None = None
        try:
            # The run was started just now: no read of its row to see if it ended.
            async for stored, members in self._follow_members(run_id, -1, started=True,
                                                              since_start=since_start):
                # Judge the outcome from the tape itself: the in-memory record
                # may lag the journal by a few microseconds.
                for member in members:
                    # (No ``member or final``: a message's truth test walks its fields.)
                    if type(member) is pb.RunStatus:
                        final = member
                    elif type(member) is pb.RunError:
                        error = member
                for response in run_stream_responses(TapeBatch(stored, members, first.batch)):
                    yield response
        finally:
            self.store.unsubscribe(since_start)  # if the follower never began
            pump.cancel()
            # The tape's final status says the run ended; only a stream left
            # before it reads the row (an active run's row is written every commit,
            # so that read waits for LMDB to commit what the writer applied).
            if not is_terminal_status(final) and not is_run_terminal(
                    self.engine.get_run(identity, run_id).state):
                # The client went away mid-run: the run lives on (any client
                # may watch it or decide its approvals) and completes when idle.
                self.engine.spawn(self._detach(identity, run_id))
        # A handed-over run (owned by another daemon) is cancelled, not failed, by its
        # stream's error: the caller hears the error either way.
        if failures and final is not None and final.state != pb.RunState.DONE:
            raise failures[0]
        if final is not None and final.state == pb.RunState.FAILED:
            code = ErrorCode.__members__.get(error.code.name if error else "", ErrorCode.INTERNAL)
            raise PalyraError(error.message if error else final.message, code=code,
                              details={"run_id": run_id, "reason": final.reason})

    async def _pump(self, identity: IdentityRec, requests: AsyncIterator[pb.RunStreamRequest],
                    run_id: str, session_id: str, failures: list[PalyraError],
                    completing: bool) -> None:
        # ``completing``: the first message asked for the run to end with its loop, and its
        # first commit says so. A half-close that brought nothing more asks nothing more: no
        # complete_run, whose read of the run's row would wait, on the event loop, for LMDB
        # to apply that first commit (every turn of a client that sends one message).
        more = False
        try:
            async for req in requests:
                more = True
                check_version(req.v)
                if (req.session_id and req.session_id != session_id) or (
                        req.run_id and req.run_id != run_id):
                    raise InvalidArgument("a RunStream is bound to one session and run; "
                                          "open a new stream for another")
                if req.approval is not None and req.approval.approval_id:
                    await self._inline_decision(identity, req.approval)
                text, raw = _input_of(req.input)
                attachments = await self._store_attachments(identity, raw, run_id)
                if text:
                    await self.engine.send_input(identity, run_id, text, attachments)
            if more or not completing:
                await self.engine.complete_run(identity, run_id)
        except PalyraError as exc:
            if exc.code is ErrorCode.RUN_TERMINAL:
                return
            failures.append(exc)
            self.engine.fail_run(run_id, exc, "stream_protocol_error")
        except Exception as exc:  # the transport's request stream broke
            failures.append(PalyraError(f"request stream failed: {exc}",
                                        code=ErrorCode.UNAVAILABLE))
            self.engine.fail_run(run_id, exc, "stream_error")

    async def _inline_decision(self, identity: IdentityRec,
                               decision: pb.InlineApprovalDecision) -> None:
        try:
            await self._decide(identity, decision.approval_id, decision.decision,
                              decision.scope, decision.ttl_seconds, decision.reason)
        except PalyraError as exc:
            # Another client may have decided first; that is not a protocol error.
            if exc.code is not ErrorCode.APPROVAL_ALREADY_DECIDED:
                raise
            log.info("inline decision for %s ignored: already decided", decision.approval_id)

    async def _detach(self, identity: IdentityRec, run_id: str) -> None:
        with contextlib.suppress(PalyraError):
            await self.engine.complete_run(identity, run_id)

    async def _follow_members(self, run_id: str, after_seq: int, *, started: bool = False,
                              since_start: Subscription | None = None,
                              ) -> AsyncGenerator[tuple[list[StoredEvent], list[Member]], None]:
        """:meth:`_follow`'s batches as the stored events and their typed members.

        ``started``: the caller started the run itself, so it has not ended
        before its first event (no need to read its row first). ``since_start``:
        its tape subscription, taken before the run started (see
        ``JournalStore.subscribe_tape``).
        """
        if not started:
            record = self.engine.get_run(IdentityRec("system:app"), run_id)
            if is_run_terminal(record.state) and after_seq >= record.tape_len - 1:
                return
        batches = self.store.follow_tape_batches(run_id, after_seq, since_start=since_start)
        try:
            async for stored in batches:
                members = [tape_member(e) for e in stored]
                # Only a batch holding a RunStatus can hold the terminal one (by exact
                # class, as is_terminal_status asks): one scan in C, not a call per event.
                if pb.RunStatus in map(type, members):
                    for index, member in enumerate(members):
                        # Only a status can end the run: one test per other member.
                        if member.__class__ is pb.RunStatus and is_terminal_status(member):
                            yield stored[: index + 1], members[: index + 1]
                            return
                yield stored, members
        finally:
            # An async generator: close it now, not at GC time.
            await batches.aclose()

    async def _follow(self, run_id: str, after_seq: int) -> AsyncIterator[list[pb.TapeEvent]]:
        """Tape events after ``after_seq`` in batches (one commit or one replay page each):
        replay, then live, until the terminal status, which ends the last batch."""
        members = self._follow_members(run_id, after_seq)
        try:
            async for stored, typed in members:
                yield [tape_event_with(e, m) for e, m in zip(stored, typed, strict=True)]
        finally:
            await members.aclose()

    async def create_run(self, ctx: CallContext,
                         request: pb.CreateRunRequest) -> pb.CreateRunResponse:
        """Start a run with one input; ``complete`` ends it when the loop ends."""
        check_version(request.v)
        identity = identity_of(ctx)
        text, raw = _input_of(request.input)
        # The run's id names its attachments' references, so it is known before it starts.
        run_id = request.run_id.strip() or (new_ulid() if raw else "")
        attachments = await self._store_attachments(identity, raw, run_id)
        agent = self._serving_agent(identity, request.agent_id, request.session_key,
                                    request.model)
        self._check_budgets(identity, agent.agent_id)
        started = await self.engine.start_run(identity, StartRun(
            Selectors(request.session_id, request.session_key, request.session_label),
            text=text, attachments=attachments, run_id=run_id, driver="api",
            complete=request.complete, agent_id=agent.agent_id, agent_postures=agent.postures,
            model_route=agent.model_route, response_cache=agent.response_cache,
            minted=bool(run_id) and not request.run_id.strip()))
        record = started.run
        if request.wait:
            record = await self.engine.wait_run(identity, record.run_id)
        return pb.CreateRunResponse(run=run_proto(record), session=session_proto(started.session),
                                    session_created=started.session_created)

    async def send_run_input(self, ctx: CallContext,
                             request: pb.SendRunInputRequest) -> pb.SendRunInputResponse:
        """Queue one more input on an open run."""
        identity = identity_of(ctx)
        text, raw = _input_of(request.input)
        if not text:
            raise InvalidArgument("input.text is required")
        # The run is the caller's (or an operator's) before its attachments are stored.
        self._check_budgets(identity, self.engine.get_run(identity, request.run_id).agent_id)
        attachments = await self._store_attachments(identity, raw, request.run_id)
        record = await self.engine.send_input(identity, request.run_id, text, attachments,
                                              complete=request.complete)
        if request.wait:
            record = await self.engine.wait_run(identity, request.run_id)
        return pb.SendRunInputResponse(run=run_proto(record))

    async def complete_run(self, ctx: CallContext,
                           request: pb.CompleteRunRequest) -> pb.CompleteRunResponse:
        """Half-close over HTTP: done once idle; ``wait`` waits for the end."""
        identity = identity_of(ctx)
        record = await self.engine.complete_run(identity, request.run_id)
        if request.wait:
            record = await self.engine.wait_run(identity, request.run_id, until_terminal=True)
        return pb.CompleteRunResponse(run=run_proto(record))

    async def abort_run(self, ctx: CallContext,
                        request: pb.AbortRunRequest) -> pb.AbortRunResponse:
        """Cancel a run; its in-flight step stops within 100 ms."""
        requested, record = await self.engine.abort_run(identity_of(ctx), request.run_id,
                                                        request.reason)
        return pb.AbortRunResponse(run_id=record.run_id, cancel_requested=requested,
                                   state=run_proto(record).state)

    async def get_run(self, ctx: CallContext, request: pb.GetRunRequest) -> pb.GetRunResponse:
        """The run's current record, with the runs it delegated to."""
        run = run_proto(self.engine.get_run(identity_of(ctx), request.run_id))
        run.child_run_ids = self.engine.child_runs(run.run_id)
        return pb.GetRunResponse(run=run)

    async def list_runs(self, ctx: CallContext,
                        request: pb.ListRunsRequest) -> pb.ListRunsResponse:
        """The caller's runs (an operator's: everyone's), newest first, filtered, paged."""
        identity = identity_of(ctx)
        size = DEFAULT_RUNS_PAGE if request.page_size == 0 else min(request.page_size,
                                                                    MAX_RUNS_PAGE)
        state = (run_state_of_proto(request.state, "")
                 if request.state != pb.RunState.UNSPECIFIED else "")
        query = RunQuery(state=state, session_id=request.session_id.strip(), page_size=size,
                         page_token=request.page_token.strip())
        page, token = runs_page(self.store, query,
                                lambda r: may_access(identity, r.identity))
        return pb.ListRunsResponse(runs=[run_proto(r) for r in page], next_page_token=token)

    async def list_run_tape(self, ctx: CallContext,
                            request: pb.ListRunTapeRequest) -> pb.ListRunTapeResponse:
        """One page: ``after_seq`` exclusive, limit 1..1000 (0 → 1000), ≤ 2 MiB."""
        record = self.engine.get_run(identity_of(ctx), request.run_id)
        limit = MAX_TAPE_PAGE if request.limit == 0 else max(1, min(request.limit,
                                                                    MAX_TAPE_PAGE))
        page = self.store.read_tape(request.run_id, max(-1, request.after_seq), limit,
                                    MAX_TAPE_BYTES)
        return pb.ListRunTapeResponse(events=[tape_event_proto(e) for e in page.events],
                                      next_after_seq=page.next_after_seq,
                                      state=run_proto(record).state)

    async def expand_compaction(
            self, ctx: CallContext,
            request: pb.ExpandCompactionRequest) -> pb.ExpandCompactionResponse:
        """The events a compaction covers, as stored, paged like the tape; and its digest
        recomputed over all of them."""
        self.engine.get_run(identity_of(ctx), request.run_id)
        run_id, seq = request.run_id, request.compaction_seq
        found = self.store.read_tape(run_id, seq - 1, 1).events
        if not found or found[0].tape_seq != seq or found[0].kind != "tape.session_compaction":
            raise NotFound(f"run {run_id} has no compaction at tape seq {seq}")
        stored = found[0]
        event = member_from(stored.kind, stored.payload)
        assert isinstance(event, pb.SessionCompaction)
        first, last = event.first_seq, event.last_seq
        after = max(first - 1, request.after_seq)
        limit = MAX_TAPE_PAGE if request.limit == 0 else max(1, min(request.limit,
                                                                    MAX_TAPE_PAGE))
        events: list[pb.TapeEvent] = []
        next_after: int | None = None
        if after < last:
            page = self.store.read_tape(run_id, after, min(limit, last - after), MAX_TAPE_BYTES)
            events = [tape_event_proto(e) for e in page.events if e.tape_seq <= last]
            if events and events[-1].tape_seq < last:
                next_after = events[-1].tape_seq
        digest = covered_digest(self.store, run_id, first, last)
        return pb.ExpandCompactionResponse(
            compaction=tape_event_proto(stored), events=events, next_after_seq=next_after,
            digest_sha256=digest, digest_matches=digest == event.digest_sha256)

    async def watch_run(self, ctx: CallContext,
                        request: pb.WatchRunRequest) -> AsyncIterator[pb.WatchRunResponse]:
        """Replay from the cursor, then follow live until the run ends."""
        self.engine.get_run(identity_of(ctx), request.run_id)
        after = max(-1, request.after_seq)
        if request.no_follow:
            while True:
                page = self.store.read_tape(request.run_id, after, MAX_TAPE_PAGE)
                events = [tape_event_proto(stored) for stored in page.events]
                if request.batch and events:
                    yield pb.WatchRunResponse(events=events)
                elif not request.batch:
                    for event in events:
                        yield pb.WatchRunResponse(event=event)
                if page.next_after_seq is None:
                    return
                after = page.next_after_seq
        async for events in self._follow(request.run_id, after):
            if request.batch:
                yield pb.WatchRunResponse(events=events)
            else:
                for event in events:
                    yield pb.WatchRunResponse(event=event)

