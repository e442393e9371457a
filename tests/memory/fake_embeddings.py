"""A real HTTP server speaking the OpenAI embeddings API, on 127.0.0.1.

uvicorn in a background thread (like ``tests/providers/fake_vendor.py``), so the
embedder under test goes through real sockets and real HTTP/1.1. Vectors are
deterministic and deliberately not unit length (the client must normalise): a
signed hashed bag of words, times 3, of the requested ``dimensions`` (default 24).

What it does is set on the object while it runs: ``fail_next`` answers that many
requests with HTTP 500, ``down`` answers every request with 503, ``dim_override``
answers with vectors of another length.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import uvicorn

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
DEFAULT_DIM = 24


def fake_vector(text: str, dim: int) -> list[float]:
    """The fake's (unnormalised) embedding of ``text``."""
    out = np.zeros(dim)
    for word in re.findall(r"\w+", text.lower()):
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        out[h[0] % dim] += 3.0 if h[1] & 1 else -3.0
    return [float(x) for x in out]


class FakeEmbeddings:
    """The ASGI app and what it saw."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.fail_next = 0
        self.down = False
        self.dim_override = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.loads(b"".join(chunks) or b"{}")
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append((headers, body))
        if scope["path"] != "/v1/embeddings":
            await _reply(send, 404, {"error": "not found"})
        elif self.down:
            await _reply(send, 503, {"error": "down"})
        elif self.fail_next > 0:
            self.fail_next -= 1
            await _reply(send, 500, {"error": "injected"})
        else:
            dim = self.dim_override or int(body.get("dimensions") or DEFAULT_DIM)
            texts = body["input"]
            # Answered in reverse order: the client must sort by ``index``.
            data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, dim)}
                    for i, t in reversed(list(enumerate(texts)))]
            await _reply(send, 200, {"object": "list", "data": data, "model": body["model"]})


async def _reply(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@contextmanager
def serve_fake_embeddings() -> Iterator[tuple[str, FakeEmbeddings]]:
    """Run the fake on 127.0.0.1:<random port>; yield (base_url ending in /v1, app)."""
    app = FakeEmbeddings()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none",
                                           http="h11", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1", app
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()
