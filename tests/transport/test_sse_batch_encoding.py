"""SSE frames of a batched tape message: each event encoded once, as its unbatched frame."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from palyra_gen.palyra import v1

from palyra.core import protojson
from palyra.transport.http._sse import sse_frame


def test_a_batch_encodes_each_event_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counts: Counter[type[Any]] = Counter()
    real = protojson._encoder

    def counting(cls: type[Any]) -> Any:
        encode = real(cls)

        def counted(message: Any) -> Any:
            counts[cls] += 1
            return encode(message)

        return counted

    events = [v1.TapeEvent(run_id="r", tape_seq=i, position=i + 1) for i in range(3)]
    alone = b"".join(sse_frame(v1.WatchRunResponse(event=e)) for e in events)
    monkeypatch.setattr(protojson, "_encoder", counting)
    batched = sse_frame(v1.WatchRunResponse(events=events))
    assert batched == alone
    assert counts[v1.TapeEvent] == len(events)  # not once more into a copy thrown away
