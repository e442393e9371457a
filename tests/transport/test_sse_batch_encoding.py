"""SSE frames of a batched tape message: each event encoded once, as its unbatched frame."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen import proto_json
from palyra_gen.palyra import v1

from palyra.app import CallContext, TapeBatch, TapeResponse
from palyra.app._tape import run_stream_responses
from palyra.journal import StoredEvent
from palyra.testing.apps import scripted_app
from palyra.transport.http._sse import sse_frame


def test_a_batch_encodes_each_event_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counts: Counter[type[Any]] = Counter()
    real = proto_json._json_TapeEvent

    def counted(message: Any) -> Any:
        counts[type(message)] += 1
        return real(message)

    events = [v1.TapeEvent(run_id="r", tape_seq=i, position=i + 1) for i in range(3)]
    alone = b"".join(sse_frame(v1.WatchRunResponse(event=e)) for e in events)
    # Both ways in: the dispatcher's table, and the enclosing messages' direct calls.
    monkeypatch.setitem(proto_json.JSON_ENCODERS, v1.TapeEvent, counted)
    monkeypatch.setattr(proto_json, "_json_TapeEvent", counted)
    batched = sse_frame(v1.WatchRunResponse(events=events))
    assert batched == alone
    assert counts[v1.TapeEvent] == len(events)  # not once more into a copy thrown away


def _stored(seq: int) -> StoredEvent:
    return StoredEvent(position=seq + 10, tape_seq=seq, ts_ms=1_700_000_000_000, run_id="r",
                       session_id="s", kind="tape.user_input", payload={}, event_id="e",
                       actor="a", principal="", device_id="", channel="", redactions=[],
                       hash="", prev_hash="", global_hash="")


@pytest.mark.parametrize("batched", [True, False])
def test_runstream_tape_frames_as_the_plain_message(batched: bool) -> None:
    """RunStream's responses (which keep their stored batch) frame exactly as the plain
    ``RunStreamResponse`` with the same fields would."""
    members: list[Any] = [v1.UserInput(text="hi"), v1.RunStatus(state=v1.RunState.DONE)]
    responses = run_stream_responses(TapeBatch([_stored(0), _stored(1)], members, batched))
    assert all(type(r) is TapeResponse for r in responses)
    framed = b"".join(sse_frame(r) for r in responses)
    plain = b"".join(sse_frame(v1.RunStreamResponse(v=r.v, event=r.event, events=r.events))
                     for r in responses)
    assert framed == plain
    assert framed.count(b"\n\n") == 2 and b"event: status" in framed


def test_each_frame_names_the_events_kind_as_its_oneof_member() -> None:
    """``event:`` is the set member of ``TapeEvent.event`` (``tape`` when none is), also
    for a member set to its empty message, which proto3 JSON still writes."""
    members = v1.TapeEvent._betterproto.oneof_field_by_group["event"]
    assert len(members) > 10
    for field in members:
        kind = v1.TapeEvent._betterproto.cls_by_field[field.name]
        for event in (v1.TapeEvent(tape_seq=7, **{field.name: kind()}),
                      v1.TapeEvent(tape_seq=7, run_id="r", **{field.name: kind()})):
            frame = sse_frame(v1.WatchRunResponse(event=event))
            assert frame.startswith(f"id: 7\nevent: {field.name}\ndata: ".encode()), frame
    assert sse_frame(v1.WatchRunResponse(event=v1.TapeEvent(tape_seq=2))).startswith(
        b"id: 2\nevent: tape\n")


_text = st.text(max_size=200)
_MEMBERS = sorted(f.name for f in v1.TapeEvent._betterproto.oneof_field_by_group["event"])


@settings(max_examples=300)
@given(run_id=_text, session_id=_text, tape_seq=st.integers(-1, 2**63 - 1),
       position=st.integers(0, 2**63 - 1), ts_ms=st.integers(-(2**63), 2**63 - 1),
       text=_text, member=st.sampled_from([*_MEMBERS, "none"]),
       batched=st.booleans())
def test_runstream_frames_from_the_stored_batch_as_the_plain_message(
        run_id: str, session_id: str, tape_seq: int, position: int, ts_ms: int, text: str,
        member: str, batched: bool) -> None:
    """The frames RunStream's responses write straight from the stored events equal the
    frames of the plain message holding the ``TapeEvent`` objects, for every member (empty,
    or with a free-text field set) and edge values of the wrapper's fields."""
    value: Any = None
    if member != "none":
        value = v1.TapeEvent._betterproto.cls_by_field[member]()
        text_fields = [f.name for f in dataclasses.fields(value) if f.type == "str"]
        if text_fields:
            setattr(value, text_fields[0], text)
    stored = msgspec.structs.replace(_stored(0), run_id=run_id, session_id=session_id,
                                     tape_seq=tape_seq, position=position, ts_ms=ts_ms)
    responses = run_stream_responses(TapeBatch([stored, stored], [value, value], batched))
    framed = b"".join(sse_frame(r) for r in responses)
    plain = b"".join(sse_frame(v1.RunStreamResponse(v=r.v, event=r.event, events=r.events))
                     for r in responses)
    assert framed == plain


async def test_a_live_run_frames_as_the_plain_message(tmp_path: Path) -> None:
    """Over a real run (engine on LMDB): every response's frames, from the stored batch,
    equal the plain message's."""
    text = ("Start from 0 and add 1 to the running total 3 times, one `add` tool call per "
            "step, then reply with the final result.")

    async def one() -> AsyncIterator[v1.RunStreamRequest]:
        yield v1.RunStreamRequest(v=1, session_key="sse", input=v1.MessageInput(text=text),
                                  batch=True, complete=True)

    async with scripted_app(tmp_path / "data") as (app, _store):
        frames = 0
        async for response in app.run_stream(CallContext.for_principal(
                "user:sse", "01J00000000000000000000000"), one()):
            assert type(response) is TapeResponse
            framed = sse_frame(response)
            assert framed == sse_frame(v1.RunStreamResponse(v=response.v,
                                                            events=response.tape.events()))
            frames += framed.count(b"\n\n")
        assert frames > 10


async def test_a_live_event_is_framed_from_its_stored_payload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live event that redaction left alone carries the member it was written from,
    and its stored payload is that member's proto3 JSON: the SSE writer frames the
    payload rather than encoding the member again (once per event on every stream)."""
    import palyra.app._tape as tape_module

    tape_module._member_json()  # its one-time table encodes empty members
    encoded: list[type[Any]] = []
    real = tape_module.encode_message

    def counted(message: Any) -> Any:
        encoded.append(type(message))
        return real(message)

    monkeypatch.setattr(tape_module, "encode_message", counted)
    text = ("Start from 0 and add 1 to the running total 2 times, one `add` tool call per "
            "step, then reply with the final result.")

    async def one() -> AsyncIterator[v1.RunStreamRequest]:
        yield v1.RunStreamRequest(v=1, session_key="live", input=v1.MessageInput(text=text),
                                  batch=True, complete=True)

    live = 0
    async with scripted_app(tmp_path / "data") as (app, _store):
        async for response in app.run_stream(CallContext.for_principal(
                "user:sse", "01J00000000000000000000000"), one()):
            assert type(response) is TapeResponse
            live += sum(m is not None and m is e.origin
                        for e, m in zip(response.tape.stored, response.tape.members, strict=True))
            sse_frame(response)
    assert live > 10
    assert encoded == []
