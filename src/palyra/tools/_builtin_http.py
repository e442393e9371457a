"""``http.fetch``: a size-capped, time-limited HTTP GET."""

from __future__ import annotations

import httpx
import msgspec

from palyra.core.capabilities import Capability
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec

FETCH_LIMIT_BYTES = 48 * 1024
FETCH_TIMEOUT_S = 15.0


class FetchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``http.fetch``."""

    url: str


async def _fetch(args: FetchArgs, ctx: ToolContext) -> ToolOutput:
    url = httpx.URL(args.url)
    if url.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be fetched, not {url.scheme!r}")
    body = bytearray()
    truncated = False
    # One client per call: the tool is rare and approval-gated, and a fresh
    # client shares no cookies between runs.
    async with (
        httpx.AsyncClient(
            timeout=FETCH_TIMEOUT_S, follow_redirects=True, max_redirects=5
        ) as client,
        client.stream("GET", url) as response,
    ):
        # Stream so a huge body is never held in memory.
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > FETCH_LIMIT_BYTES:
                truncated = True
                break
        status = response.status_code
        content_type = response.headers.get("content-type", "")
        final_url = str(response.url)
    text = bytes(body[:FETCH_LIMIT_BYTES]).decode(response.encoding or "utf-8", "replace")
    return ToolOutput(
        {
            "url": final_url,
            "status": status,
            "content_type": content_type,
            "body": text,
            "truncated": truncated,
        },
        truncated=truncated,
    )


HTTP_FETCH: ToolSpec[FetchArgs] = ToolSpec(
    "http.fetch",
    "HTTP GET a URL; returns status, content type and up to 48 KiB of body text.",
    FetchArgs,
    frozenset({Capability.NETWORK}),
    _fetch,
    timeout_s=20.0,
)
