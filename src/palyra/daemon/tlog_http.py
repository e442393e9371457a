"""``/tlog/``: the journal's transparency log for ``tlog-tiles`` clients.

``/tlog/checkpoint`` is the last signed checkpoint (with witness cosignatures),
``/tlog/tile/<L>/<N>[.p/<W>]`` a tile of tree hashes and
``/tlog/tile/entries/<N>[.p/<W>]`` an entry bundle (each entry a record's
``record_hash``). All of it is hashes and sizes, never a record's content, so
it is served without a token, as public logs serve it; the same data is in the
spec's ``JournalService`` RPCs for authenticated clients.

Caching follows ``tlog-tiles``: the checkpoint is mutable, so caches keep it a
second at most; a tile or entry bundle, full or partial (``.p/<W>`` names a fixed
width), never changes once it exists, since the log never signs a tree that does
not extend the last one, so caches keep it for a year without asking again. A
404 is not cached: the tile it names appears once the tree grows.
"""

from __future__ import annotations

from collections.abc import Mapping

from palyra.core.errors import NotFound
from palyra.journal import JournalStore, parse_tile_path
from palyra.transport.http.app import StaticHandler

TLOG_PREFIX = "/tlog/"
_TEXT = "text/plain; charset=utf-8"
_BYTES = "application/octet-stream"
CHECKPOINT_CACHE = {"cache-control": "public, max-age=1"}
"""``tlog-tiles``: the checkpoint's headers "SHOULD prevent caching beyond a few seconds"."""
TILE_CACHE = {"cache-control": "public, max-age=31536000, immutable"}
"""``tlog-tiles``: tiles and entry bundles are immutable, "caching headers SHOULD be long-lived"."""
NOT_FOUND_CACHE = {"cache-control": "no-store"}
"""A tile past the tree, or no checkpoint yet: it may exist a second later."""


def tlog_routes(store: JournalStore) -> dict[str, StaticHandler]:
    """The ``/tlog/`` resources of ``store``'s tree."""

    async def serve(path: str) -> tuple[int, str, bytes, Mapping[str, str]]:
        if path == "checkpoint":
            note = store.tree_checkpoint()
            if note is None:
                return 404, _TEXT, b"no checkpoint signed yet\n", NOT_FOUND_CACHE
            return 200, _TEXT, note, CHECKPOINT_CACHE
        try:
            tile = parse_tile_path(path)
            return 200, _BYTES, store.tile(tile.level, tile.index, tile.width), TILE_CACHE
        except (ValueError, NotFound) as exc:
            return 404, _TEXT, f"{exc}\n".encode(), NOT_FOUND_CACHE

    return {TLOG_PREFIX: serve}
