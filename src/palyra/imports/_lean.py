"""Import a few libraries without the optional extras they pick up when installed.

structlog, betterproto2, httpx, uvicorn and Litestar each try an optional package at
import (or, for Litestar, when an app is built) and use it if it happens to be
installed. Other dependencies install them (rich and pygments through Litestar and
rich-click, pydantic through the MCP SDK and wordllama, watchfiles through
``uvicorn[standard]``), so every daemon paid for them at start although none of them
serves a request:

* rich (with pygments and attrs) only renders structlog's dev console tracebacks and
  httpx's command line; the daemon's renderers are key=value, JSON and a colourless
  console, which fall back to the standard traceback;
* pydantic (with pydantic-core's 2 MB extension) only validates betterproto2's
  pydantic dataclasses (palyra's generated messages are plain dataclasses) and feeds
  Litestar's pydantic plugin (no route takes a pydantic model: requests are decoded
  with msgspec);
* watchfiles only serves uvicorn's ``--reload``, which ``palyra serve`` never uses.

Together about 12 MB of the idle daemon's resident memory. Blocking them is Python's
documented way to make an import fail (``sys.modules[name] = None`` raises
``ImportError``), which each of these libraries handles as "not installed". The
block lasts only while the library is imported, so a feature that does use one of
them later (the MCP SDK imports pydantic when an MCP server is configured) still
gets the real package.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator

# library -> the optional packages it must not pick up
WITHOUT_EXTRAS: dict[str, tuple[str, ...]] = {
    "structlog": ("rich", "better_exceptions"),
    "betterproto2": ("pydantic", "pydantic_core"),
    "httpx": ("rich", "pygments", "click"),
    "uvicorn": ("watchfiles",),
}

LITESTAR_APP_WITHOUT: tuple[str, ...] = ("pydantic", "pydantic_core", "attrs", "attr")
"""What building a Litestar app must not load: its default plugins for pydantic
models and attrs classes (no route takes either)."""


@contextlib.contextmanager
def absent(*names: str) -> Iterator[None]:
    """Inside, importing any of ``names`` that is not imported yet fails as if it were
    not installed; afterwards it imports normally again.

    The block is process-wide: use it only where no other thread imports these names
    meanwhile (palyra's import, and the daemon's start-up before it serves).
    """
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def import_lean() -> None:
    """Import each library of :data:`WITHOUT_EXTRAS` without its extras (a no-op for
    one already imported, or not installed: ``palyra.testing`` helpers run under a bare
    interpreter, ``python -S``, where none of them is)."""
    for library, extras in WITHOUT_EXTRAS.items():
        if library not in sys.modules and importlib.util.find_spec(library) is not None:
            with absent(*extras):
                importlib.import_module(library)
