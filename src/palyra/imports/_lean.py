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

And modules Litestar imports at its import but uses only for features palyra leaves
off: PyYAML, for its ``/openapi.yaml`` rendering (palyra's app has no OpenAPI config:
it serves its own JSON schema) and ``pdb``, the default debugger of
``pdb_on_exception`` (off). They are :data:`DEFERRED`: ``import yaml`` binds a stand-in
that imports the module at its first attribute access, about 1.5 MiB less at start.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

# library -> the optional packages it must not pick up
WITHOUT_EXTRAS: dict[str, tuple[str, ...]] = {
    "structlog": ("rich", "better_exceptions"),
    "betterproto2": ("pydantic", "pydantic_core"),
    "httpx": ("rich", "pygments", "click"),
    "uvicorn": ("watchfiles",),
}

DEFERRED: tuple[str, ...] = ("yaml", "pdb")
"""Imported by a dependency, used only by a feature palyra does not turn on: loaded at
the first attribute access (see :func:`defer`)."""

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


class _Deferred(types.ModuleType):
    """Stands in ``sys.modules`` for a module not imported yet, and imports it at the
    first attribute an importer reads from it."""

    def __getattr__(self, attr: str) -> Any:  # only for what the stand-in lacks
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        real = importlib.import_module(self.__name__)
        self.__dict__.update(real.__dict__)  # later reads find it here directly
        return getattr(real, attr)


def defer(name: str) -> None:
    """Make ``import name`` bind a stand-in that imports the module at its first
    attribute access (a no-op for one already imported, or not installed).

    Not ``importlib.util.LazyLoader``: on Python 3.11 a second ``import name`` reads
    the lazy module's ``__spec__``, which loads it. Use it only for a module whose
    importers touch none of its attributes at import, else it loads right away (no
    harm, no gain).
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in


def import_lean() -> None:
    """Import each library of :data:`WITHOUT_EXTRAS` without its extras, and defer each
    of :data:`DEFERRED` (a no-op for one already imported, or not installed:
    ``palyra.testing`` helpers run under a bare interpreter, ``python -S``, where none
    of them is)."""
    for library, extras in WITHOUT_EXTRAS.items():
        if library not in sys.modules and importlib.util.find_spec(library) is not None:
            with absent(*extras):
                importlib.import_module(library)
    for name in DEFERRED:
        defer(name)
