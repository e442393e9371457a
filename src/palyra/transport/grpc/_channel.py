"""The client side's channel: grpclib's ``Channel`` writing through the same cork as the listener.

grpclib's client writes each frame group as h2 builds it: a streaming call
opens with HEADERS, then the message, then the end of the stream, three
``send()`` calls, each of which wakes the daemon's loop on its own.
:class:`CorkedChannel` joins the writes of a burst of work into one
``send()`` (see ``_cork``); the frames and their order are unchanged, so any
HTTP/2 server sees the same byte stream.
"""

from __future__ import annotations

from grpclib.client import Channel, Handler
from grpclib.protocol import H2Protocol

from palyra.transport.grpc._cork import CorkedH2Protocol


class CorkedChannel(Channel):
    """A grpclib ``Channel`` whose connection writes through a ``CorkedTransport``."""

    def _protocol_factory(self) -> H2Protocol:
        return CorkedH2Protocol(Handler(), self._config, self._h2_config)
