"""Listening sockets, bound before the servers start so port 0 is known at once."""

from __future__ import annotations

import socket


def bind_listener(host: str, port: int, *, backlog: int = 512) -> socket.socket:
    """A non-blocking TCP listener on ``(host, port)``; port 0 picks a free port.

    TCP_NODELAY is set on the listener (Linux copies it to accepted sockets):
    uvicorn writes the response head and body separately, and with Nagle on,
    the body waits for the client's delayed ACK (~40 ms per keep-alive request).
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port a listener actually got."""
    return int(sock.getsockname()[1])
