"""``http.fetch`` reaches public addresses only, unless the operator allows more (issue 12, item 6).

Real HTTP servers on loopback stand for the daemon itself: fetched by address,
by a name that resolves to them, or through a redirect from an allowed server,
they are refused by default; listed in ``fetch_allow`` they are reachable.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.tools import ToolContext, ToolsConfig, default_registry
from palyra.tools._netguard import parse_networks, refusal


def _server(host: str, handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.headers['host']}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def inner() -> Iterator[str]:
    """The "internal" server, on another loopback address."""
    yield from _server("127.0.0.2", _Hello)


@pytest.fixture
def outer(inner: str) -> Iterator[str]:
    """An allowed server that redirects to the internal one."""

    class _Redirect(_Hello):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("location", f"{inner}/secret")
            self.send_header("content-length", "0")
            self.end_headers()

    yield from _server("127.0.0.1", _Redirect)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace_dir=tmp_path, session_id="s", run_id="r")


async def test_loopback_is_refused_by_default(ctx: ToolContext, inner: str) -> None:
    registry = default_registry()
    for url in (f"{inner}/", inner.replace("127.0.0.2", "localhost") + "/",
                "http://169.254.169.254/latest/meta-data/", "http://[::1]:9/", "http://10.1.2.3/"):
        result = await registry.execute("http.fetch", {"url": url}, ctx)
        assert not result.success and "refused to fetch" in result.error, (url, result.error)


async def test_allowed_networks_are_reachable(ctx: ToolContext, inner: str) -> None:
    registry = default_registry(ToolsConfig(fetch_allow=("127.0.0.2/32",)))
    result = await registry.execute("http.fetch", {"url": f"{inner}/x"}, ctx)
    assert result.success, result.error
    assert "hello from 127.0.0.2" in result.output_json


async def test_a_redirect_is_checked_again(ctx: ToolContext, outer: str) -> None:
    registry = default_registry(ToolsConfig(fetch_allow=("127.0.0.1/32",)))
    result = await registry.execute("http.fetch", {"url": f"{outer}/start"}, ctx)
    assert not result.success and "127.0.0.2 is a loopback address" in result.error


def test_the_address_rules() -> None:
    allow = parse_networks(["192.168.7.0/24"])
    assert refusal("93.184.216.34") == ""
    assert refusal("192.168.7.9", allow) == "" and refusal("192.168.8.9", allow)
    for address in ("127.0.0.1", "::1", "10.0.0.1", "172.16.0.1", "169.254.169.254", "fe80::1",
                    "::ffff:127.0.0.1", "0.0.0.0", "224.0.0.1", "100.64.0.1", "fd00:ec2::254",
                    "100.100.100.200"):
        assert refusal(address), address


def test_a_bad_allow_entry_is_a_config_error() -> None:
    with pytest.raises(PalyraError) as err:
        default_registry(ToolsConfig(fetch_allow=("not-a-network",)))
    assert err.value.code is ErrorCode.CONFIG_INVALID
