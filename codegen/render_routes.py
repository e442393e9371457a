"""Source text of ``palyra_gen/http_routes.py``: the HTTP route table.

Derived from the ``google.api.http`` option of every RPC (additional bindings
included) and sorted by (path, HTTP method) so the order never depends on proto
file layout.
"""

from __future__ import annotations

from collections.abc import Sequence

from betterproto2_compiler.casing import snake_case

from codegen.descriptors import Rpc

GENERATOR = "codegen/render_routes.py"

_HEADER = '''\
"""HTTP routes of every RPC, from the ``google.api.http`` options of the spec's protos."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ("ROUTES", "HttpRoute")


@dataclass(frozen=True, slots=True)
class HttpRoute:
    """One HTTP binding of one RPC."""

    service: str
    """Proto full name of the service, e.g. ``palyra.v1.GatewayService``."""
    method: str
    """Proto RPC name, e.g. ``GetRun``."""
    python_method: str
    """snake_case name used by the grpclib stubs and ``PalyraApp``, e.g. ``get_run``."""
    http_method: str
    """Upper-case HTTP verb."""
    path: str
    """Path template with ``{field}`` variables, e.g. ``/v1/runs/{run_id}``."""
    body: str
    """``"*"`` (whole request in the body) or ``""`` (no body)."""
    client_streaming: bool
    server_streaming: bool
    request_type: str
    """Proto full name of the request message."""
    response_type: str
    """Proto full name of the response message."""

'''


def render(rpcs: Sequence[Rpc]) -> str:
    """The module text."""
    rows = sorted(
        ((b.path, b.http_method, rpc.service, rpc.name), rpc, b)
        for rpc in rpcs
        for b in rpc.bindings
    )
    lines = [
        _HEADER,
        "#: Every route, sorted by (path, http_method).\n",
        "ROUTES: Final[tuple[HttpRoute, ...]] = (\n",
    ]
    for _, rpc, b in rows:
        lines.append(
            "    HttpRoute("
            f"service={rpc.service!r}, method={rpc.name!r}, python_method={snake_case(rpc.name)!r}, "
            f"http_method={b.http_method!r}, path={b.path!r}, body={b.body!r}, "
            f"client_streaming={rpc.client_streaming!r}, server_streaming={rpc.server_streaming!r}, "
            f"request_type={rpc.request_type!r}, response_type={rpc.response_type!r}),\n"
        )
    lines.append(")\n")
    return "".join(lines)
