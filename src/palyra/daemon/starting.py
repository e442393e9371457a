"""The HTTP port while the daemon starts: alive, not ready, and saying why.

The listeners are bound before anything else (a port in use fails start-up at
once), but the HTTP gateway needs the application, which exists only once the
journal is open and runs and tasks are recovered. Until then a probe would
hang in the listen backlog, so :class:`StartupResponder` answers on the same
socket from a thread of its own (opening the journal and recovering may hold
the event loop): ``/healthz`` 200 (the process is alive, ``ready`` false),
``/readyz`` 503 naming the start-up phase, anything else 503 ``UNAVAILABLE``
(retryable, ``Retry-After: 1``). Each connection gets one answer and is
closed; its request head is parsed by h11, bounded in size and in time.
"""

from __future__ import annotations

import select
import socket
import threading

import h11
import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import to_wire

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
HEAD_TIMEOUT_S = 1.0  # a client slower than this with its request head is dropped
MAX_HEAD_BYTES = 8192
_POLL_S = 0.05
_json = msgspec.json.Encoder()

Answer = tuple[int, list[tuple[str, str]], bytes]


def starting_answer(path: str, phase: str, service: str, version: str) -> Answer:
    """What a request for ``path`` gets while the daemon is in start-up ``phase``."""
    detail = f"the daemon is starting: {phase}"
    checks = [{"name": "recovery", "ok": False, "detail": detail}]
    if path == HEALTH_PATH:
        body = {"service": service, "version": version, "ready": False, "checks": checks}
        return 200, [("content-type", "application/json")], _json.encode(body)
    if path == READY_PATH:
        body = {"ready": False, "reason": f"recovery: {detail}", "checks": checks}
        return 503, [("content-type", "application/json")], _json.encode(body)
    wire = to_wire(PalyraError(f"{detail}; retry shortly", code=ErrorCode.UNAVAILABLE,
                               details={"phase": phase}))
    return (wire.http_status, [("content-type", "application/json"), ("retry-after", "1")],
            _json.encode(wire.http_body()))


class StartupResponder:
    """Answers on ``sock`` from a thread until :meth:`stop`; :attr:`phase` says where
    start-up is (set from the daemon's thread, read by the responder's)."""

    def __init__(self, sock: socket.socket, service: str, version: str) -> None:
        self.phase = "opening the journal"
        self._sock = sock
        self._service = service
        self._version = version
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="palyra-starting", daemon=True)

    def set_phase(self, phase: str) -> None:
        """Where start-up is now (named in every answer)."""
        self.phase = phase

    def start(self) -> None:
        """Begin answering."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting (a connection being answered is finished first); again is harmless.
        Connections arriving after this wait in the backlog for the real gateway."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                readable, _, _ = select.select([self._sock], [], [], _POLL_S)
                if not readable or self._stopping.is_set():
                    continue
                conn, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ValueError):
                return  # the listener was closed: start-up failed
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(HEAD_TIMEOUT_S)
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                event = parser.next_event()
                if event is h11.NEED_DATA:
                    parser.receive_data(conn.recv(4096))
                    continue
                if isinstance(event, h11.Request):
                    break
                return  # the client closed before a whole head
            path = event.target.decode("ascii", "replace").partition("?")[0]
            status, headers, body = starting_answer(path, self.phase, self._service,
                                                    self._version)
            conn.sendall(parser.send(h11.Response(status_code=status, headers=[
                *headers, ("content-length", str(len(body))), ("connection", "close")]))
                         + parser.send(h11.Data(data=body)) + parser.send(h11.EndOfMessage()))
        except (OSError, h11.ProtocolError):
            return  # too slow, too large or malformed: the connection is dropped
