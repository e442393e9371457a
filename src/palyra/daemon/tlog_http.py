"""``/tlog/``: the journal's transparency log for ``tlog-tiles`` clients.

``/tlog/checkpoint`` is the last signed checkpoint (with witness cosignatures),
``/tlog/tile/<L>/<N>[.p/<W>]`` a tile of tree hashes and
``/tlog/tile/entries/<N>[.p/<W>]`` an entry bundle (each entry a record's
``record_hash``). All of it is hashes and sizes, never a record's content, so
it is served without a token, as public logs serve it; the same data is in the
spec's ``JournalService`` RPCs for authenticated clients.
"""

from __future__ import annotations

from palyra.core.errors import NotFound
from palyra.journal import JournalStore, parse_tile_path
from palyra.transport.http.app import StaticHandler

TLOG_PREFIX = "/tlog/"
_TEXT = "text/plain; charset=utf-8"
_BYTES = "application/octet-stream"


def tlog_routes(store: JournalStore) -> dict[str, StaticHandler]:
    """The ``/tlog/`` resources of ``store``'s tree."""

    async def serve(path: str) -> tuple[int, str, bytes]:
        if path == "checkpoint":
            note = store.tree_checkpoint()
            if note is None:
                return 404, _TEXT, b"no checkpoint signed yet\n"
            return 200, _TEXT, note
        try:
            tile = parse_tile_path(path)
            return 200, _BYTES, store.tile(tile.level, tile.index, tile.width)
        except (ValueError, NotFound) as exc:
            return 404, _TEXT, f"{exc}\n".encode()

    return {TLOG_PREFIX: serve}
