"""The application API: ``PalyraApp`` (one async method per RPC) and its call context."""

from palyra.app._facade import PalyraApp
from palyra.app._tape import TapeBatch, TapeResponse
from palyra.app.context import CallContext, Identity, TokenKind

__all__ = ["CallContext", "Identity", "PalyraApp", "TapeBatch", "TapeResponse", "TokenKind"]
