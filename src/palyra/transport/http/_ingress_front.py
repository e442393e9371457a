"""The chat platforms' ingress, answered from the ASGI scope.

A platform's delivery (``POST <prefix>/<name>``) needs no bearer token, no route
table and no proto decoding: the front (:class:`~palyra.transport.http._front.HttpFront`)
hands it here, where the platform's handler checks its signature and answers its JSON.
It is held to what every request is: the header count (431), the body cap (413 as soon
as the declared length says so) and deadline (408), and every error is the spec's
``ErrorDetail`` body with the code's mapped status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote

import msgspec
from litestar.types import Receive, Scope, Send

from palyra.config import HttpConfig
from palyra.transport.errors import to_wire
from palyra.transport.http._asgi import (
    Answer,
    Disconnected,
    answer,
    body_within_deadline,
    error_answer,
    request_headers,
)

IngressHandler = Callable[[str, Mapping[str, str], bytes], Awaitable[dict[str, Any]]]
"""``(name, lower-cased headers, body) -> JSON answer``; raises ``PalyraError``."""

_json = msgspec.json.Encoder()


def ingress_target(ingress: Mapping[str, IngressHandler], path: str
                   ) -> tuple[IngressHandler, str] | None:
    """``(handler, name)`` when ``path`` is ``<prefix>/<name>`` of a platform ingress."""
    for prefix, handle in ingress.items():
        name = path.removeprefix(prefix + "/")
        if name != path and name and "/" not in name:
            return handle, unquote(name)
    return None


async def serve_ingress(scope: Scope, receive: Receive, send: Send, handle: IngressHandler,
                        name: str, config: HttpConfig) -> None:
    """Answer one platform delivery to the ingress called ``name``."""
    try:
        headers = request_headers(scope, config.max_headers)
        body = await body_within_deadline(receive, headers, config, scope)
        reply = Answer(200, b"application/json", _json.encode(await handle(name, headers, body)))
    except Disconnected:
        return
    except Exception as exc:  # every refusal is the spec's error body and status
        reply = error_answer(to_wire(exc))
    await answer(send, reply)
