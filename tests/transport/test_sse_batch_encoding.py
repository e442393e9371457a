"""SSE frames of a batched tape message: each event encoded once, as its unbatched frame."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from palyra_gen import proto_json
from palyra_gen.palyra import v1

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
