"""Listening sockets, bound before the servers start so port 0 is known at once."""

from __future__ import annotations

import errno
import socket

from palyra.core.errors import ErrorCode, PalyraError


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


def bind_setting(host: str, port: int, setting: str) -> socket.socket:
    """``bind_listener`` for the listener configured by ``setting`` (``grpc`` or ``http``).

    A port that is taken or not allowed is the user's to change, so it is one
    ``CONFIG_INVALID`` line naming the address, the flag and the setting, not a
    traceback.
    """
    try:
        return bind_listener(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            problem = f"{host}:{port} is already in use (another palyra serve?)"
        elif exc.errno in (errno.EACCES, errno.EADDRNOTAVAIL):
            problem = f"cannot listen on {host}:{port} ({exc.strerror})"
        else:
            raise
        raise PalyraError(f"{problem}; choose another with --{setting}-port or [{setting}] "
                          f"port (or --{setting}-host)", code=ErrorCode.CONFIG_INVALID,
                          details={"setting": f"{setting}.port", "port": str(port)}) from None
