"""Server streams open right now, per transport (read by ``/metrics``).

An increment when a stream starts and a decrement when it ends, on the event
loop's thread: no lock, nothing else on the path.
"""

from __future__ import annotations

import re

from palyra_gen.services import STREAMING

_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def is_streaming_rpc(rpc: str) -> bool:
    """True for an RPC (``RunStream``) the spec declares server-streaming."""
    return _SNAKE.sub("_", rpc).lower() in STREAMING


class OpenStreams:
    """Counts of open streams: ``grpc`` (server-streaming calls) and ``sse``."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[str, int] = {"grpc": 0, "sse": 0}

    def snapshot(self) -> dict[str, int]:
        """A copy of the counts."""
        return dict(self.counts)
