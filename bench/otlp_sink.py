"""A loopback OTLP/HTTP collector for the ``--ops`` bench: answers every POST, keeps nothing.

Run as ``python -m bench.otlp_sink``: prints its port on the first line, and on
SIGTERM one JSON line (``requests``, ``bytes``) before it exits. It is a
process of its own so its CPU is a collector's, not the measured daemon's or
its exporter's.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_seen = {"requests": 0, "bytes": 0}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", "0"))
        self.rfile.read(size)
        _seen["requests"] += 1
        _seen["bytes"] += size
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")  # an empty ExportTraceServiceResponse
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    print(server.server_address[1], flush=True)
    signal.signal(signal.SIGTERM, lambda _s, _f: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    print(json.dumps(_seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
