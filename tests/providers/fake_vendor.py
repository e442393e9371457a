"""A real HTTP server that speaks the OpenAI and Anthropic streaming APIs.

It runs uvicorn on 127.0.0.1 with a random port in a background thread, so the
providers under test go through real sockets, real HTTP/1.1 and real SSE.
The model answers with the scripted tool-loop rule, so the HTTP providers can
be checked against the scripted provider end to end.

Behaviour is chosen by the request's ``model`` field:

* ``ok``: normal streaming answer.
* ``fail500:<tag>:<n>``: HTTP 500 for the first ``n`` requests with that exact
  model string, then a normal answer.
* ``status:<code>``: always that HTTP status.
* ``failafter:<tag>:<n>``: a normal answer for the first ``n`` requests with that
  exact model string, then HTTP 503.
* ``hang``: never answer (until the client disconnects).
* ``slow``: stream a first text delta, then wait for the client to go away.
* ``cut``: send one text delta and close the stream without finishing.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn

from palyra.core.images import sniff
from palyra.providers import ChatMessage, ImagePart, ModelRequest, ToolCall, scripted_reply

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class FakeVendor:
    """The ASGI app plus what it saw (for assertions)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.disconnected = threading.Event()

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
        self.requests.append((scope["path"], headers, body))
        model = str(body.get("model", ""))
        self.counts[model] += 1
        if model.startswith("fail500:") and self.counts[model] <= int(model.rsplit(":", 1)[1]):
            await _plain(send, 500, b'{"error": "injected"}')
            return
        if model.startswith("failafter:") and self.counts[model] > int(model.rsplit(":", 1)[1]):
            await _plain(send, 503, b'{"error": "injected"}')
            return
        if model.startswith("status:"):
            await _plain(send, int(model.split(":")[1]), b'{"error": "injected"}')
            return
        if model == "hang":
            await _wait_disconnect(receive)
            self.disconnected.set()
            return
        if scope["path"] == "/v1/chat/completions":
            events = _openai_events(body)
        elif scope["path"] == "/v1/messages":
            events = _anthropic_events(body)
        else:
            await _plain(send, 404, b"not found")
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        if model in ("slow", "cut"):
            # Everything up to and including the first text delta.
            first = next(i for i, e in enumerate(events) if b"text_delta" in e or b'"content"' in e)
            head = b"".join(events[: first + 1])
            await send({"type": "http.response.body", "body": head, "more_body": True})
            if model == "slow":
                await _wait_disconnect(receive)
                self.disconnected.set()
            await send({"type": "http.response.body", "body": b""})
            return
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _sse(data: Any, event: str | None = None) -> bytes:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {json.dumps(data)}\n\n".encode()


def _image(data: bytes) -> ImagePart:
    """An image the vendor received, as the scripted model describes it."""
    info = sniff(data)
    return ImagePart(info.sha256, info.mime_type, info.width, info.height, data)


def _reply_from_openai(body: dict[str, Any]) -> Any:
    messages = []
    for m in body["messages"]:
        calls = [
            ToolCall(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in m.get("tool_calls") or []
        ]
        content = m.get("content") or ""
        images = []
        if isinstance(content, list):  # content parts: text and data-URL images
            images = [_image(base64.b64decode(p["image_url"]["url"].split(",", 1)[1]))
                      for p in content if p["type"] == "image_url"]
            content = "".join(p["text"] for p in content if p["type"] == "text")
        messages.append(
            ChatMessage(m["role"], content, calls, m.get("tool_call_id", ""), images)
        )
    return scripted_reply(ModelRequest(messages))


def _openai_events(body: dict[str, Any]) -> list[bytes]:
    reply = _reply_from_openai(body)
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model")}
    events = []
    words = reply.text.split(" ") if reply.text else []
    for i, word in enumerate(words):
        piece = word if i == len(words) - 1 else word + " "
        events.append(_sse({**base, "choices": [{"index": 0, "delta": {"content": piece}}]}))
    for index, call in enumerate(reply.tool_calls):
        args = json.dumps(call.arguments)
        half = len(args) // 2
        first = {"index": index, "id": call.id, "type": "function"}
        first["function"] = {"name": call.name, "arguments": args[:half]}
        events.append(_sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [first]}}]}))
        rest = {"index": index, "function": {"arguments": args[half:]}}
        events.append(_sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [rest]}}]}))
    finish = "tool_calls" if reply.tool_calls else "stop"
    events.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
             "prompt_tokens_details": {"cached_tokens": 2}}
    events.append(_sse({**base, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    return events


def _reply_from_anthropic(body: dict[str, Any]) -> Any:
    messages = []
    if body.get("system"):
        messages.append(ChatMessage("system", body["system"]))
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, str):
            messages.append(ChatMessage(m["role"], content))
            continue
        text = "".join(b["text"] for b in content if b["type"] == "text")
        images = [_image(base64.b64decode(b["source"]["data"])) for b in content
                  if b["type"] == "image"]
        calls = [
            ToolCall(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"
        ]
        results = [b for b in content if b["type"] == "tool_result"]
        if results:
            messages.extend(
                ChatMessage("tool", r["content"], tool_call_id=r["tool_use_id"]) for r in results
            )
        else:
            messages.append(ChatMessage(m["role"], text, calls, images=images))
    return scripted_reply(ModelRequest(messages))


def _anthropic_events(body: dict[str, Any]) -> list[bytes]:
    reply = _reply_from_anthropic(body)
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model")}
    message["usage"] = {"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 4}
    events = [_sse({"type": "message_start", "message": message}, "message_start")]
    index = 0
    if reply.text:
        start = {"type": "content_block_start", "index": 0}
        start["content_block"] = {"type": "text", "text": ""}
        events.append(_sse(start, "content_block_start"))
        events.append(_sse({"type": "ping"}, "ping"))
        words = reply.text.split(" ")
        for i, word in enumerate(words):
            delta = {"type": "content_block_delta", "index": 0}
            text = word if i == len(words) - 1 else word + " "
            delta["delta"] = {"type": "text_delta", "text": text}
            events.append(_sse(delta, "content_block_delta"))
        events.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        index = 1
    for call in reply.tool_calls:
        start = {"type": "content_block_start", "index": index}
        start["content_block"] = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append(_sse(start, "content_block_start"))
        args = json.dumps(call.arguments)
        for part in (args[:3], args[3:]):
            delta = {"type": "content_block_delta", "index": index}
            delta["delta"] = {"type": "input_json_delta", "partial_json": part}
            events.append(_sse(delta, "content_block_delta"))
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1
    stop = "tool_use" if reply.tool_calls else "end_turn"
    md = {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}
    events.append(_sse(md, "message_delta"))
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return events


@contextlib.contextmanager
def serve_fake_vendor() -> Iterator[tuple[str, FakeVendor]]:
    """Run the fake vendor on 127.0.0.1:<random port>; yield (base_url, app)."""
    app = FakeVendor()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        ws="none",
        http="h11",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()
