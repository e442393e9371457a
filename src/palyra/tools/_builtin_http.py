"""``http.fetch``: a size-capped, time-limited HTTP GET of public addresses only.

Every hop (the URL and each redirect) is resolved here, every resolved address
is checked (``_netguard``), and the connection goes to the checked address with
the original Host header and TLS server name, so DNS cannot point the request
at the daemon itself, a private network or a metadata service.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

import httpx
import msgspec

from palyra.core.capabilities import Capability
from palyra.core.errors import ErrorCode, PalyraError
from palyra.tools._netguard import Network, parse_networks, refusal, via_address
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec

FETCH_LIMIT_BYTES = 48 * 1024
FETCH_TIMEOUT_S = 15.0


class FetchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``http.fetch``."""

    url: str


MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


async def _pinned_address(url: httpx.URL, allow: tuple[Network, ...]) -> str:
    """Resolve ``url``'s host, refuse it unless every address is allowed; one address."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                              type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ToolError(f"cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        if reason := refusal(address, allow):
            raise ToolError(f"refused to fetch {url}: {host} resolves to {reason}; an "
                            "operator may allow it with tools.fetch_allow") from None
    if not addresses:
        raise ToolError(f"cannot resolve {host}")
    return addresses[0]


def http_fetch_tool(allow: Sequence[str] = ()) -> ToolSpec[FetchArgs]:
    """``http.fetch`` that may also reach the networks in ``allow`` (CIDR strings).

    Raises:
        PalyraError: ``CONFIG_INVALID`` when an entry of ``allow`` is not a network.
    """
    try:
        networks = parse_networks(allow)
    except ValueError as exc:
        raise PalyraError(f"tools.fetch_allow: {exc}", code=ErrorCode.CONFIG_INVALID) from None

    async def fetch(args: FetchArgs, ctx: ToolContext) -> ToolOutput:
        url = httpx.URL(args.url)
        body = bytearray()
        truncated = False
        # One client per call: the tool is rare and approval-gated, and a fresh
        # client shares no cookies between runs. Redirects are followed here,
        # each hop resolved and checked again.
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client:
            for _hop in range(MAX_REDIRECTS + 1):
                if url.scheme not in ("http", "https"):
                    raise ToolError(f"only http and https URLs can be fetched, not "
                                    f"{url.scheme!r}")
                target, headers, extensions = via_address(url, await _pinned_address(url, networks))
                request = client.build_request("GET", target, headers=headers,
                                               extensions=extensions)
                response = await client.send(request, stream=True)
                try:
                    location = response.headers.get("location")
                    if response.status_code in _REDIRECTS and location:
                        url = url.join(location)
                        continue
                    # Stream so a huge body is never held in memory.
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > FETCH_LIMIT_BYTES:
                            truncated = True
                            break
                    status = response.status_code
                    content_type = response.headers.get("content-type", "")
                    encoding = response.encoding or "utf-8"
                    break
                finally:
                    await response.aclose()
            else:
                raise ToolError(f"more than {MAX_REDIRECTS} redirects")
        text = bytes(body[:FETCH_LIMIT_BYTES]).decode(encoding, "replace")
        return ToolOutput(
            {
                "url": str(url),
                "status": status,
                "content_type": content_type,
                "body": text,
                "truncated": truncated,
            },
            truncated=truncated,
        )

    return ToolSpec(
        "http.fetch",
        "HTTP GET a URL; returns status, content type and up to 48 KiB of body text. "
        "Only public addresses, unless the operator allows more.",
        FetchArgs,
        frozenset({Capability.NETWORK}),
        fetch,
        timeout_s=20.0,
    )


#: ``http.fetch`` with the default address rules (public addresses only).
HTTP_FETCH: ToolSpec[FetchArgs] = http_fetch_tool()
