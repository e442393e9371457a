"""How both gateways call the application facade (``palyra.app.PalyraApp``)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from palyra.core.errors import ErrorCode, PalyraError


def app_method(app: object, name: str) -> Callable[..., Any]:
    """The facade's method for RPC ``name``; UNIMPLEMENTED if the app lacks it."""
    method = getattr(app, name, None)
    if method is None:
        raise PalyraError(f"{name} is not implemented by this daemon", code=ErrorCode.UNIMPLEMENTED)
    return method  # type: ignore[no-any-return]


async def open_stream(result: Any) -> AsyncIterator[Any]:
    """Iterate a streaming facade result: an async iterator, or a coroutine returning one."""
    if inspect.isawaitable(result):
        result = await result
    try:
        async for item in result:
            yield item
    finally:
        aclose = getattr(result, "aclose", None)
        if aclose is not None:
            await aclose()
