"""RunStream over gRPC: the generated servicer, with each commit's tape sent as encoded bytes.

The bytes come from ``palyra.app.run_stream_bytes`` (the app's tape wire
encoder, property-tested equal to ``bytes(RunStreamResponse(...))``); the
codec (``_codec.py``) sends an ``Encoded`` message as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from palyra_gen.palyra import v1 as pb
from palyra_gen.services import GatewayServiceServer

from palyra.app import Encoded, TapeStream, run_stream_bytes


class TapeGatewayServer(GatewayServiceServer[Any]):
    """The generated GatewayService servicer, with RunStream encoding its tape directly."""

    def __init__(self, app: Any, ctx: Callable[[], Any], stream: TapeStream[Encoded]) -> None:
        super().__init__(app, ctx)
        self._stream = stream

    def run_stream(  # type: ignore[override]
        self, messages: AsyncIterator[pb.RunStreamRequest]
    ) -> AsyncIterator[Encoded]:
        """RunStream: the app's run loop, each batch answered by :func:`run_stream_bytes`."""
        return self._stream(self._ctx(), messages, run_stream_bytes)
