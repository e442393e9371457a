"""The engine's errors: caller-facing constructors and why a run ends badly.

``RunFailed`` is raised inside a run's work; the actor turns it (or any other
error) into the one ``fail`` transition, using :func:`as_palyra_error` for what the
client sees and :func:`reason_of` for the run's ``end_reason``.
"""

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


class RunFailed(Exception):
    """Raised inside a run's work to fail the run with a machine-readable reason.

    Attributes:
        reason: ``end_reason`` of the run, e.g. ``daemon_restarted``.
        error: the error reported on the tape (``RunError``) and to a stream client.
    """

    def __init__(self, reason: str, error: PalyraError) -> None:
        super().__init__(f"{reason}: {error.message}")
        self.reason = reason
        self.error = error


def as_palyra_error(exc: BaseException) -> PalyraError:
    """The caller-facing form of any error that ended a run."""
    if isinstance(exc, RunFailed):
        return exc.error
    if isinstance(exc, PalyraError):
        return exc
    return PalyraError(f"internal error: {type(exc).__name__}: {exc}", code=ErrorCode.INTERNAL)


def reason_of(exc: BaseException) -> str:
    """``end_reason`` for an error that ended a run."""
    if isinstance(exc, RunFailed):
        return exc.reason
    if isinstance(exc, PalyraError):
        if exc.code in (ErrorCode.PROVIDER_UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED,
                        ErrorCode.RESOURCE_EXHAUSTED, ErrorCode.CONFIG_INVALID):
            return "provider_error"
        return exc.code.value.lower()
    return "internal_error"
