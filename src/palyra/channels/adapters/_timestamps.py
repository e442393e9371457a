"""The replay window both signing schemes share (pure but for the default clock)."""

from __future__ import annotations

import time

from palyra.core.errors import ErrorCode, PalyraError


def check_fresh(stamp: str, header: str, tolerance_s: int, now_s: float | None,
                scheme: str) -> int:
    """The signed timestamp (seconds) if it is within ``tolerance_s`` of now.

    Raises:
        PalyraError: ``SIGNATURE_INVALID`` when it is not an integer,
            ``TIMESTAMP_STALE`` when it is outside the window (a replay, or a clock
            far off).
    """
    try:
        ts = int(stamp)
    except ValueError:
        raise PalyraError(f"{scheme} signature rejected: {header} is not an integer",
                          code=ErrorCode.SIGNATURE_INVALID) from None
    now = time.time() if now_s is None else now_s
    if abs(now - ts) > tolerance_s:
        raise PalyraError(f"{header} is more than {tolerance_s} s from now",
                          code=ErrorCode.TIMESTAMP_STALE,
                          details={"tolerance_s": str(tolerance_s)})
    return ts
