"""The one exception family of palyra.

Every error a caller can see carries a stable ``ErrorCode`` from the spec
(``spec/proto/palyra/v1/errors.proto``). The code is mapped once, in the spec,
to a gRPC status and an HTTP status; transports translate with that table and
nowhere else.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    """Stable error codes. Mirrors ``palyra.v1.ErrorCode`` (checked by a test)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    SESSION_IDENTITY_MISMATCH = "SESSION_IDENTITY_MISMATCH"
    RUN_TERMINAL = "RUN_TERMINAL"
    APPROVAL_ALREADY_DECIDED = "APPROVAL_ALREADY_DECIDED"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    CURSOR_TRUNCATED = "CURSOR_TRUNCATED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    DATA_DIR_LOCKED = "DATA_DIR_LOCKED"
    JOURNAL_CORRUPT = "JOURNAL_CORRUPT"
    POLICY_INVALID = "POLICY_INVALID"
    CONFIG_INVALID = "CONFIG_INVALID"
    PROVIDER_UNAVAILABLE = "PROVIDER_UNAVAILABLE"
    TOOL_FAILED = "TOOL_FAILED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    LEASE_STALE = "LEASE_STALE"
    SIGNATURE_INVALID = "SIGNATURE_INVALID"
    TIMESTAMP_STALE = "TIMESTAMP_STALE"
    STATE_CONFLICT = "STATE_CONFLICT"
    CANDIDATE_ALREADY_DECIDED = "CANDIDATE_ALREADY_DECIDED"


# Codes a caller may retry unchanged. Kept beside the enum so a new code
# forces a decision here.
_RETRYABLE = frozenset(
    {
        ErrorCode.PROVIDER_UNAVAILABLE,
        ErrorCode.UNAVAILABLE,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.RESOURCE_EXHAUSTED,
    }
)


class PalyraError(Exception):
    """Base of every error palyra raises on purpose.

    Raised with a stable ``code`` and a message that tells the user what to do.
    ``details`` carries machine-readable context (ids, limits) for clients.
    """

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        details: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details = dict(details or {})

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed if simply retried later."""
        return self.code in _RETRYABLE

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}: {self.message!r})"


class InvalidArgument(PalyraError, ValueError):
    """Raised when a request field is missing, malformed or out of range."""

    code = ErrorCode.INVALID_ARGUMENT


class NotFound(PalyraError, LookupError):
    """Raised when a referenced session, run, approval or event does not exist."""

    code = ErrorCode.NOT_FOUND


class AlreadyExists(PalyraError):
    """Raised when creating something whose id is already taken."""

    code = ErrorCode.ALREADY_EXISTS


class PermissionDenied(PalyraError):
    """Raised when an authenticated caller may not do what it asked."""

    code = ErrorCode.PERMISSION_DENIED


class Unauthenticated(PalyraError):
    """Raised when credentials are missing or wrong."""

    code = ErrorCode.UNAUTHENTICATED


class IllegalTransition(PalyraError):
    """Raised when a lifecycle event is not allowed in the current state.

    Inside the daemon this is a broken invariant; callers see a stable code.
    """

    code = ErrorCode.ILLEGAL_TRANSITION


class PalyraInternalError(PalyraError):
    """Raised when an internal invariant is broken. Always a bug."""

    code = ErrorCode.INTERNAL
