"""SSE frames of a batched tape message: each event encoded once, as its unbatched frame."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from palyra_gen import proto_json
from palyra_gen.palyra import v1

from palyra.app import TapeBatch, TapeResponse
from palyra.app._tape import run_stream_responses
from palyra.journal import StoredEvent
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
