"""Lookup of the console's files by name: a fixed set read once from package data."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources

_MEDIA_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
}
INDEX = "index.html"


@dataclass(frozen=True, slots=True)
class ConsoleAsset:
    """One file of the console: its bytes, media type and a strong ETag."""

    body: bytes
    media_type: str
    etag: str


@functools.cache
def _assets() -> dict[str, ConsoleAsset]:
    folder = resources.files("palyra.console") / "assets"
    found: dict[str, ConsoleAsset] = {}
    if not folder.is_dir():
        return found
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _MEDIA_TYPES:
            body = entry.read_bytes()
            found[entry.name] = ConsoleAsset(
                body, _MEDIA_TYPES[suffix], '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return found


def console_asset(name: str) -> ConsoleAsset | None:
    """The asset called ``name`` (``""`` is the page itself), or ``None``.

    Names are looked up in the fixed set of built files, so no request path can
    reach anything else on disk.
    """
    return _assets().get(name or INDEX)
