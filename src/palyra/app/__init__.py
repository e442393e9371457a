"""The application API: ``PalyraApp`` (one async method per RPC) and its call context."""

from palyra.app._facade import PalyraApp
from palyra.app._runs import TapeResponder, TapeStream, tape_stream
from palyra.app._tape_wire import Encoded, encode_tape_event, run_stream_bytes
from palyra.app.context import CallContext, Identity, TokenKind

__all__ = ["CallContext", "Encoded", "Identity", "PalyraApp", "TapeResponder", "TapeStream",
           "TokenKind", "encode_tape_event", "run_stream_bytes", "tape_stream"]
