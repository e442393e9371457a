"""HTTP/JSON + SSE gateway (Litestar), routed by the spec's generated route table."""

from palyra.transport.http.app import IngressHandler, create_http_app
from palyra.transport.http.server import HttpGateway

__all__ = ["HttpGateway", "IngressHandler", "create_http_app"]
