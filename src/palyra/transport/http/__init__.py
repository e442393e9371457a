"""HTTP/JSON + SSE gateway (Litestar), routed by the spec's generated route table."""

from palyra.transport.http.app import create_http_app
from palyra.transport.http.server import HttpGateway

__all__ = ["HttpGateway", "create_http_app"]
