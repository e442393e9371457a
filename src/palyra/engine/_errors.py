"""Small constructors for the engine's caller-facing errors."""

from __future__ import annotations

from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError


def not_found(what: str, ident: str) -> NotFound:
    """NOT_FOUND for ``what`` (``run``, ``session``, ``approval``) ``ident``."""
    return NotFound(f"{what} {ident!r} not found", details={what + "_id": ident})


def invalid(message: str, **details: str) -> InvalidArgument:
    """INVALID_ARGUMENT with details."""
    return InvalidArgument(message, details=details)


def coded(code: ErrorCode, message: str, **details: str) -> PalyraError:
    """A ``PalyraError`` with an explicit code."""
    return PalyraError(message, code=code, details=details)
