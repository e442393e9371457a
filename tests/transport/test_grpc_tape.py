"""RunStream over gRPC encodes each batch straight from the stored events: the same bytes.

The app answers RunStream with ``TapeResponse`` messages that keep their stored batch;
the gRPC listener sends that batch's ``wire()``, bytes built from the stored events and
their members, not from the ``TapeEvent`` objects; these tests compare them with
``bytes()`` of the responses the app builds in process, over real runs (a real engine
on LMDB) and over edge values, and then run a whole turn through a real listener on
loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpclib.events
import grpclib.server
import pytest
from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.const import Status
from grpclib.events import SendMessage, listen
from grpclib.exceptions import GRPCError
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.app import CallContext, PalyraApp, TapeBatch, TapeResponse
from palyra.app._convert import tape_member
from palyra.app._tape import run_stream_responses
from palyra.config import GrpcConfig
from palyra.journal import StoredEvent
from palyra.testing.apps import scripted_app
from palyra.transport.grpc import _tape
from palyra.transport.grpc._codec import Encoded
from tests.transport._served import grpc_listening

USER = CallContext.for_principal("user:tape", "01J00000000000000000000000")
TEXT = ("Start from 0 and add 1 to the running total 3 times, one `add` tool call per step, "
        "then reply with the final result.")


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[PalyraApp]:
    async with scripted_app(tmp_path / "data") as (made, _store):
        yield made


async def _one(request: pb.RunStreamRequest) -> AsyncIterator[pb.RunStreamRequest]:
    yield request


def _same_bytes(batch: bool, stored: list[StoredEvent],
                members: list[object]) -> list[bytes]:
    """Both encodings of one batch; asserts they agree and returns the wire bytes."""
    responses = run_stream_responses(TapeBatch(stored, members, batch))  # type: ignore[arg-type]
    expected = [bytes(pb.RunStreamResponse(v=r.v, event=r.event, events=r.events))
                for r in responses]
    got = [r.tape.wire() for r in responses]
    assert got == expected
    return got


@pytest.mark.parametrize("batch", [True, False])
async def test_live_batches_encode_as_the_app_builds_them(app: PalyraApp, batch: bool) -> None:
    seen: list[bytes] = []
    request = pb.RunStreamRequest(v=1, session_key=f"k{batch}", input=pb.MessageInput(text=TEXT),
                                  batch=batch, complete=True)
    async for response in app.run_stream(USER, _one(request)):
        assert isinstance(response, TapeResponse)
        # Equal to the plain message, both ways round, and encoded alike.
        plain = pb.RunStreamResponse(v=response.v, event=response.event, events=response.events)
        assert response == plain and plain == response
        assert response.tape.wire() == bytes(plain) == bytes(response)
        seen.append(_same_bytes(batch, response.tape.stored, response.tape.members)[0])
    events = [e for data in seen for e in (pb.RunStreamResponse.parse(data).events
                                           or [pb.RunStreamResponse.parse(data).event])]
    assert [e.tape_seq for e in events] == list(range(len(events)))
    assert [e.message_replied.reply_text for e in events if e.message_replied] == ["result=3"]
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE


@pytest.mark.parametrize("batch", [True, False])
async def test_responses_build_their_events_only_when_read(app: PalyraApp, batch: bool) -> None:
    """A transport that sends the batch's bytes never makes ``TapeEvent`` objects: a response
    builds them on first read of its ``events`` (``event``), and then keeps them."""
    request = pb.RunStreamRequest(v=1, session_key=f"lazy{batch}", batch=batch,
                                  input=pb.MessageInput(text=TEXT), complete=True)
    responses = [r async for r in app.run_stream(USER, _one(request))]
    assert responses and all(isinstance(r, TapeResponse) for r in responses)
    def built(response: TapeResponse) -> bool:
        return response.tape._events is not None

    for response in responses:
        assert isinstance(response, TapeResponse)
        response.tape.wire()
        assert not built(response)  # the bytes did not need them
        read = response.events if batch else [response.event]
        assert read == response.tape.events() and built(response)
        if batch:
            assert response.events is read  # kept, not built again
        assert (response.event is None) if batch else (response.events == [])
    with pytest.raises(AttributeError):
        responses[0].no_such_field  # type: ignore[attr-defined]  # noqa: B018


async def test_replayed_events_without_origin_encode_alike(app: PalyraApp) -> None:
    """Events read back from the store (no in-memory origin: members decoded from payloads)."""
    request = pb.RunStreamRequest(v=1, session_key="r", input=pb.MessageInput(text=TEXT),
                                  batch=True, complete=True)
    run_id = ""
    async for response in app.run_stream(USER, _one(request)):
        run_id = run_id or response.events[0].run_id
    page = app.store.read_tape(run_id, -1, 1000)
    assert page.events and all(e.origin is None for e in page.events)
    _same_bytes(True, page.events, [tape_member(e) for e in page.events])
    _same_bytes(False, page.events, [tape_member(e) for e in page.events])


def _event(run_id: str, session_id: str, tape_seq: int, position: int, ts_ms: int) -> StoredEvent:
    return StoredEvent(position=position, tape_seq=tape_seq, ts_ms=ts_ms, run_id=run_id,
                       session_id=session_id, kind="tape.user_input", payload={},
                       event_id="e", actor="a", principal="", device_id="", channel="",
                       redactions=[], hash="", prev_hash="", global_hash="")


_text = st.text(max_size=300)
_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=200)
@given(run_id=_text, session_id=_text, tape_seq=st.integers(-1, 2**63 - 1),
       position=st.integers(0, 2**63 - 1), ts_ms=_int64, text=_text,
       member=st.sampled_from(["user_input", "status", "none", "empty_status"]))
def test_edge_values_encode_alike(run_id: str, session_id: str, tape_seq: int, position: int,
                                  ts_ms: int, text: str, member: str) -> None:
    stored = _event(run_id, session_id, tape_seq, position, ts_ms)
    value = {"user_input": pb.UserInput(text=text), "none": None, "empty_status": pb.RunStatus(),
             "status": pb.RunStatus(state=pb.RunState.FAILED, message=text)}[member]
    _same_bytes(True, [stored, stored], [value, value])
    _same_bytes(False, [stored], [value])
    wrapper = pb.TapeEvent(run_id=run_id, tape_seq=max(tape_seq, 0), position=position,
                           ts_unix_ms=ts_ms, session_id=session_id)
    if value is not None:
        setattr(wrapper, member.removeprefix("empty_"), value)
    assert TapeBatch([stored], [value], False).wire() == bytes(
        pb.RunStreamResponse(v=1, event=wrapper))


async def test_a_whole_turn_over_a_real_listener(app: PalyraApp) -> None:
    """RunStream through grpclib on loopback: the client parses what the listener encoded."""
    gateway, port = await grpc_listening(app)
    channel = Channel("127.0.0.1", port)
    try:
        stub = pb.GatewayServiceStub(channel)
        for batch in (True, False):
            request = pb.RunStreamRequest(v=1, session_key=f"w{batch}", batch=batch,
                                          input=pb.MessageInput(text=TEXT), complete=True)
            events: list[pb.TapeEvent] = []
            responses = 0
            async for response in stub.run_stream([request]):
                responses += 1
                events += response.events if batch else [response.event]  # type: ignore[list-item]
            # Batched: one message per commit (fewer than events); else one per event.
            assert (responses < len(events)) if batch else (responses == len(events))
            assert [e.tape_seq for e in events] == list(range(len(events)))
            replies = [e.message_replied.reply_text for e in events if e.message_replied]
            assert replies == ["result=3"]
            assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    finally:
        channel.close()
        await asyncio.wait_for(gateway.close(), 10)


async def test_responses_past_a_frame_or_a_window_take_the_generic_path(app: PalyraApp) -> None:
    """A commit's message bigger than the client's largest frame (16 KiB) or than what is
    left of its flow-control windows (64 KiB, the least HTTP/2 allows) is sent the generic
    way (chunked, waiting for WINDOW_UPDATEs), whole and in order; one past the message
    cap ends the call with RESOURCE_EXHAUSTED instead of being sent."""
    gateway, port = await grpc_listening(app, GrpcConfig(max_message_bytes=200_000))
    config = Configuration(http2_connection_window_size=65_535, http2_stream_window_size=65_535)
    channel = Channel("127.0.0.1", port, config=config)
    try:
        stub = pb.GatewayServiceStub(channel)

        async def turn(key: str, padding: int) -> list[pb.TapeEvent]:
            text = TEXT + " " + "x" * padding
            request = pb.RunStreamRequest(v=1, session_key=key, batch=True,
                                          input=pb.MessageInput(text=text), complete=True)
            events: list[pb.TapeEvent] = []
            async for response in stub.run_stream([request]):
                events += response.events
            received = [e.user_input for e in events if e.user_input]
            assert received and received[0].text == text
            return events

        # Several turns at once share the connection's 64 KiB window.
        for events in await asyncio.gather(*(turn(f"big{i}", 20_000 * (i + 1))
                                             for i in range(4))):
            assert [e.tape_seq for e in events] == list(range(len(events)))
            assert events[-1].status is not None
            assert events[-1].status.state == pb.RunState.DONE
        with pytest.raises(GRPCError) as err:
            await turn("over", 250_000)
        assert err.value.status == Status.RESOURCE_EXHAUSTED
    finally:
        channel.close()
        await asyncio.wait_for(gateway.close(), 10)


async def test_the_c_core_client_runs_a_whole_turn(app: PalyraApp) -> None:
    """grpcio (the official C-core client) reads the hand-encoded RunStream responses."""
    grpc = pytest.importorskip("grpc")
    gateway, port = await grpc_listening(app)

    def turn() -> list[pb.RunStreamResponse]:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(
                "/palyra.v1.GatewayService/RunStream", request_serializer=bytes,
                response_deserializer=pb.RunStreamResponse.FromString)
            request = pb.RunStreamRequest(v=1, session_key="c-core", batch=True,
                                          input=pb.MessageInput(text=TEXT), complete=True)
            return list(call(iter([request]), timeout=30))

    try:
        responses = await asyncio.to_thread(turn)
    finally:
        await asyncio.wait_for(gateway.close(), 10)
    events = [e for r in responses for e in r.events]
    assert [e.tape_seq for e in events] == list(range(len(events)))
    assert [e.message_replied.reply_text for e in events if e.message_replied] == ["result=3"]
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE


@pytest.mark.parametrize("batch", [True, False])
@pytest.mark.parametrize("state", list(pb.RunState))
def test_only_a_run_that_ended_without_failing_ends_the_call_early(
        batch: bool, state: pb.RunState) -> None:
    """The last response of a batch ending with DONE or CANCELLED says ``ends_call`` (the
    listener sends the OK trailers with it); FAILED, a status that is not terminal, and
    every response before the last do not."""
    stored = _event("r", "s", 3, 9, 1)
    members: list[object] = [pb.UserInput(text="x"), pb.RunStatus(state=state)]
    responses = run_stream_responses(TapeBatch([stored, stored], members, batch))  # type: ignore[arg-type]
    assert [r.tape.ends_call for r in responses[:-1]] == [False] * (len(responses) - 1)
    assert responses[-1].tape.ends_call is (state in (pb.RunState.DONE, pb.RunState.CANCELLED))
    alone = run_stream_responses(TapeBatch([stored], [pb.UserInput(text="x")], batch))
    assert not alone[-1].tape.ends_call
    assert not TapeBatch([], [], batch).ends_call


async def test_a_failed_run_ends_its_call_with_the_error_a_done_one_with_ok(
        app: PalyraApp) -> None:
    """Over the listener: a run that fails (a second message for another run is a protocol
    error) ends its call with the error's status and code after its FAILED status event;
    a run that ends DONE ends it OK, with every event (grpclib and C-core clients)."""
    gateway, port = await grpc_listening(app)
    channel = Channel("127.0.0.1", port)
    try:
        stub = pb.GatewayServiceStub(channel)
        first = pb.RunStreamRequest(v=1, session_key="fails", batch=True,
                                    input=pb.MessageInput(text=TEXT))
        events: list[pb.TapeEvent] = []
        with pytest.raises(GRPCError) as err:
            async for response in stub.run_stream([first, pb.RunStreamRequest(v=1, run_id="x")]):
                events += response.events
        assert err.value.status == Status.INVALID_ARGUMENT
        assert events[-1].status is not None and events[-1].status.state == pb.RunState.FAILED
        done = [e async for r in stub.run_stream([pb.RunStreamRequest(
            v=1, session_key="ok", batch=True, input=pb.MessageInput(text=TEXT), complete=True)])
            for e in r.events]
        assert done[-1].status is not None and done[-1].status.state == pb.RunState.DONE
        assert [e.tape_seq for e in done] == list(range(len(done)))
    finally:
        channel.close()
        await asyncio.wait_for(gateway.close(), 10)


class _GenericSends:
    """Counts the calls of grpclib's generic ``Stream.send_message`` (it still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        generic = grpclib.server.Stream.send_message

        async def counted(stream: grpclib.server.Stream[object, object], message: object) -> None:
            self.calls += 1
            await generic(stream, message)

        monkeypatch.setattr(grpclib.server.Stream, "send_message", counted)


async def _unary_and_stream(port: int) -> list[pb.TapeEvent]:
    channel = Channel("127.0.0.1", port)
    try:
        stub = pb.GatewayServiceStub(channel)
        resolved = await stub.resolve_session(pb.ResolveSessionRequest(session_key="direct"))
        assert resolved.session is not None and resolved.session.session_id
        events: list[pb.TapeEvent] = []
        async for response in stub.run_stream([pb.RunStreamRequest(
                v=1, session_id=resolved.session.session_id, batch=True,
                input=pb.MessageInput(text=TEXT), complete=True)]):
            events += response.events
        got = await stub.get_run(pb.GetRunRequest(run_id=events[0].run_id))
        assert got.run is not None and got.run.state == pb.RunState.DONE
        assert {e.session_id for e in events} == {resolved.session.session_id}
        assert [e.tape_seq for e in events] == list(range(len(events)))
        return events
    finally:
        channel.close()


async def test_unary_answers_go_as_frames_written_directly(
        app: PalyraApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every RPC's answers, not only RunStream's tape, are written as DATA frames by the
    listener (``DirectSendStream``): grpclib's generic send is not called once in a turn
    of a unary call, a RunStream and another unary call, and the client reads each."""
    generic = _GenericSends(monkeypatch)
    gateway, port = await grpc_listening(app)
    try:
        await _unary_and_stream(port)
    finally:
        await asyncio.wait_for(gateway.close(), 10)
    assert generic.calls == 0


async def test_a_send_message_listener_still_hears_every_answer(
        app: PalyraApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a ``SendMessage`` listener on the server, unary answers go grpclib's whole way
    and the listener is handed each of them (the direct path skips the event only when
    nobody listens)."""
    generic = _GenericSends(monkeypatch)
    gateway, port = await grpc_listening(app)
    heard: list[object] = []

    async def on_send(event: SendMessage) -> None:
        heard.append(event.message)

    listen(gateway._server, SendMessage, on_send)
    try:
        await _unary_and_stream(port)
    finally:
        await asyncio.wait_for(gateway.close(), 10)
    assert [type(m) for m in heard if not isinstance(m, Encoded)] == [
        pb.ResolveSessionResponse, pb.GetRunResponse]
    assert generic.calls >= 2


def test_grpclib_holds_its_no_op_for_an_event_nobody_listens_to() -> None:
    """Twin of the check ``DirectSendStream`` makes (grpclib 0.4.9's dispatcher): a server's
    dispatcher holds ``grpclib.events._ident`` for ``send_message`` until a listener is
    added, then its dispatching method."""
    dispatch = grpclib.events._DispatchServerEvents()
    assert dispatch.send_message is grpclib.events._ident
    assert _tape._NO_LISTENER is grpclib.events._ident

    async def on_send(event: SendMessage) -> None:
        pass

    dispatch.add_listener(SendMessage, on_send)
    assert dispatch.send_message is not grpclib.events._ident
