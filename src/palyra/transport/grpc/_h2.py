"""h2's connection without its per-frame debug text.

``H2Connection._receive_frame`` (h2 4.x) starts with
``logger.trace("Received frame: %s", repr(frame))``: the frame's ``repr`` (its
flags and a hex dump of its body) is built for every frame received, whatever
the logger does with it. That was ~10 % of the listener's receive path and ~3 %
of the client's CPU per streamed message. :class:`QuietH2Connection` handles
each frame exactly as h2 does (same dispatch, same answers to frames on closed
streams, same errors) without building that text; tests compare its events,
its output and its errors with h2's own on the same bytes.
"""

from __future__ import annotations

from typing import Any

import h2
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import Event
from h2.exceptions import StreamClosedError, StreamIDTooLowError
from hyperframe.frame import Frame, RstStreamFrame

QUIET_H2 = h2.__version__.split(".")[0] == "4"
"""Whether this h2 is the one :meth:`QuietH2Connection._receive_frame` follows (4.x)."""


class QuietH2Connection(H2Connection):
    """``H2Connection`` whose frame handling skips the per-frame ``repr``."""

    def _receive_frame(self, frame: Frame) -> list[Event]:
        """h2 4.x's ``_receive_frame``, without the trace line's ``repr(frame)``."""
        events: list[Event]
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except StreamClosedError as e:
            # Closed by RST_STREAM: answer with RST_STREAM; otherwise a connection error.
            if self._stream_is_closed_by_reset(e.stream_id):
                f = RstStreamFrame(e.stream_id)
                f.error_code = e.error_code
                self._prepare_for_sending([f])
                events = e._events
            else:
                raise
        except StreamIDTooLowError as e:
            # A cleaned-up stream: a stream error if it was reset, else a connection error.
            if self._stream_is_closed_by_reset(e.stream_id):
                f = RstStreamFrame(e.stream_id)
                f.error_code = ErrorCodes.STREAM_CLOSED
                self._prepare_for_sending([f])
                events = []
            elif self._stream_is_closed_by_end(e.stream_id):
                raise StreamClosedError(e.stream_id) from e
            else:
                raise
        else:
            self._prepare_for_sending(frames)
        return events


def quieten(connection: Any) -> None:
    """Make a plain ``H2Connection`` a :class:`QuietH2Connection` (same state, same object)."""
    if QUIET_H2 and type(connection) is H2Connection:
        connection.__class__ = QuietH2Connection
