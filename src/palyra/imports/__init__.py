"""How palyra imports its third-party libraries: without the optional extras they would
pick up only because something else installed them (see ``_lean``)."""

from palyra.imports._lean import LITESTAR_APP_WITHOUT, WITHOUT_EXTRAS, absent, import_lean

__all__ = ["LITESTAR_APP_WITHOUT", "WITHOUT_EXTRAS", "absent", "import_lean"]
