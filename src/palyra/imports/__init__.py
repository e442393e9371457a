"""How palyra imports its third-party libraries: without the optional extras they would
pick up only because something else installed them (see ``_lean``)."""

from palyra.imports._lean import (
    DEFERRED,
    LITESTAR_APP_WITHOUT,
    WITHOUT_EXTRAS,
    absent,
    defer,
    import_lean,
)

__all__ = ["DEFERRED", "LITESTAR_APP_WITHOUT", "WITHOUT_EXTRAS", "absent", "defer", "import_lean"]
