"""Local stand-ins for the chat platforms, for tests and benchmarks.

Real HTTP servers on loopback (``ThreadingHTTPServer`` in a thread):

* :class:`WebhookReceiver` receives palyra's Standard Webhooks replies and checks
  each signature with the ``standardwebhooks`` package (an independent oracle).
* :class:`FakeSlack` serves the Slack Web API methods palyra calls
  (``chat.postMessage``, ``conversations.history``, ``conversations.replies``).

Both count what a user would see: a *duplicate reply* is the same reply (same
idempotency key) shown twice. The webhook receiver dedupes on ``webhook-id`` as
the standard asks of receivers, and counts raw redeliveries separately.

Requests *to* palyra are signed with the platforms' own libraries
(:func:`webhook_headers`, :func:`slack_headers`), never with palyra's code.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def webhook_headers(secret: str, msg_id: str, body: bytes, timestamp: float | None = None
                    ) -> dict[str, str]:
    """Standard Webhooks headers for ``body``, signed by the ``standardwebhooks`` package."""
    from standardwebhooks import Webhook

    ts = int(time.time() if timestamp is None else timestamp)
    sig = Webhook(secret).sign(msg_id, datetime.datetime.fromtimestamp(ts, datetime.UTC),
                               body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig,
            "content-type": "application/json"}


def slack_headers(signing_secret: str, body: bytes, timestamp: float | None = None,
                  retry_num: int | None = None) -> dict[str, str]:
    """Slack request headers for ``body``, signed by ``slack_sdk``'s signature code."""
    from slack_sdk.signature import SignatureVerifier

    ts = str(int(time.time() if timestamp is None else timestamp))
    sig = SignatureVerifier(signing_secret).generate_signature(timestamp=ts, body=body)
    headers = {"x-slack-request-timestamp": ts, "x-slack-signature": sig or "",
               "content-type": "application/json"}
    if retry_num is not None:
        headers["x-slack-retry-num"] = str(retry_num)
        headers["x-slack-retry-reason"] = "http_timeout"
    return headers


class _Server:
    """A threaded loopback HTTP server around one handler function."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as the platforms' own endpoints answer (HTTP/1.0 would make
            # the daemon connect anew for every reply and measure that instead).
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                return

            def _answer(self, status: int, payload: Any,
                        headers: dict[str, str] | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                # The client may be gone (killed); it reconciles or retries.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def do_GET(self) -> None:
                status, payload = owner.handle("GET", self.path, dict(self.headers), b"")
                self._answer(status, payload)

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(size)
                if len(body) < size:
                    # The sender died mid-request (the kill test's SIGKILL): the request
                    # never arrived whole, so it is not a delivery, forged or otherwise.
                    with owner.lock:
                        owner.broken += 1
                    self.close_connection = True
                    return
                status, payload = owner.handle("POST", self.path,
                                               {k.lower(): v for k, v in self.headers.items()},
                                               body)
                if status == 0:  # swallow: the client times out (an unknown outcome)
                    time.sleep(owner.stall_s)
                    self.close_connection = True
                    return
                self._answer(status, payload, owner.headers_out.pop(threading.get_ident(), None))

        self.stall_s = 0.1
        # Extra response headers a handler sets for its answer (keyed by handler thread).
        self.headers_out: dict[int, dict[str, str]] = {}
        self.broken = 0  # requests cut off before their body was whole
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, Any]:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class WebhookReceiver(_Server):
    """Receives signed replies; ``swallow`` first deliveries to make outcomes unknown."""

    def __init__(self, secret: str, *, swallow: int = 0) -> None:
        super().__init__()
        from standardwebhooks import Webhook

        self._verify = Webhook(secret)
        self.swallow = swallow
        self.raw: list[dict[str, Any]] = []        # every delivery that verified
        self.rejected = 0                           # deliveries whose signature failed
        self.by_id: dict[str, dict[str, Any]] = {}  # after the receiver's webhook-id dedupe

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, Any]:
        try:
            payload = self._verify.verify(body, headers)
        except Exception:
            with self.lock:
                self.rejected += 1
            return 401, {"error": "bad signature"}
        with self.lock:
            self.raw.append(payload)
            self.by_id.setdefault(headers["webhook-id"], payload)
            if self.swallow > 0:
                self.swallow -= 1
                return 0, None
        return 200, {"ok": True}

    def replies(self) -> list[dict[str, Any]]:
        """What the receiving application shows (deduped on ``webhook-id``)."""
        with self.lock:
            return [p["data"] for p in self.by_id.values()]

    def duplicate_replies(self) -> int:
        """Replies shown more than once (same idempotency key under different ids)."""
        keys = Counter(r["idempotency_key"] for r in self.replies())
        return sum(n - 1 for n in keys.values() if n > 1)


class FakeSlack(_Server):
    """The Slack Web API methods palyra uses, keeping posted messages per channel."""

    def __init__(self, bot_token: str, *, swallow: int = 0) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.swallow = swallow
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.posts = 0
        self._ts = itertools.count(1)

    @property
    def api_url(self) -> str:
        return self.url + "/api"

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, Any]:
        auth = headers.get("authorization") or headers.get("Authorization") or ""
        if auth != f"Bearer {self.bot_token}":
            return 200, {"ok": False, "error": "invalid_auth"}
        url = urlparse(path)
        if method == "POST" and url.path == "/api/chat.postMessage":
            data = json.loads(body)
            with self.lock:
                self.posts += 1
                message = {"type": "message", "text": data["text"], "ts": f"{next(self._ts)}.0",
                           "thread_ts": data.get("thread_ts", ""),
                           "metadata": data.get("metadata")}
                self.messages.setdefault(data["channel"], []).append(message)
                if self.swallow > 0:  # posted, but the answer never comes back
                    self.swallow -= 1
                    return 0, None
            return 200, {"ok": True, "channel": data["channel"], "ts": message["ts"]}
        if method == "GET" and url.path in ("/api/conversations.history",
                                            "/api/conversations.replies"):
            query = parse_qs(url.query)
            channel = query.get("channel", [""])[0]
            with self.lock:
                found = list(self.messages.get(channel, []))
            if url.path.endswith("replies"):
                ts = query.get("ts", [""])[0]
                found = [m for m in found if m["thread_ts"] == ts]
            return 200, {"ok": True, "messages": found[::-1]}
        return 404, {"ok": False, "error": "unknown_method"}

    def replies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [m for msgs in self.messages.values() for m in msgs]

    def duplicate_replies(self) -> int:
        """Messages posted more than once under the same idempotency key."""
        keys = Counter(((m.get("metadata") or {}).get("event_payload") or {}).get("key")
                       for m in self.replies())
        return sum(n - 1 for k, n in keys.items() if k and n > 1)


@contextlib.contextmanager
def running(server: _Server) -> Iterator[Any]:
    """``with running(FakeSlack(...)) as slack:`` — start and stop a fake."""
    with server as started:
        yield started
