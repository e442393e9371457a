"""The bulk of a sync point's LMDB flush, written back off the writer's thread.

A sync point flushes LMDB's file on the writer's thread, and must: the point
is recorded by a sync frame that stands right after the frame it names
(``write.commitlog``), so no frame may be logged between the flush and that
record. But most of what the flush waits for is writing back the pages the
commits since the last point dirtied, and any earlier flush makes those
durable as well. So when a sync point falls due, the writer first starts a
:class:`Flush` on a thread of its own and goes on committing; once it returned,
the sync point's own flush on the writer's thread has only the pages dirtied
meanwhile to write. That flush alone still makes the point durable: the one
before it only moved work off the commit path, and nothing relies on it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import lmdb


class Flush:
    """One LMDB flush on its own thread (its outcome is not needed: see the module)."""

    def __init__(self, env: Any, force: bool) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(env, force), name="palyra-lmdb-flush", daemon=True
        )
        self._thread.start()

    @staticmethod
    def _run(env: Any, force: bool) -> None:
        # py-lmdb drops the GIL for the flush itself. A failure is left to the sync
        # point's own flush, which meets it again on the writer's thread.
        with contextlib.suppress(lmdb.Error):
            env.sync(force)

    def done(self) -> bool:
        """Whether the flush has returned."""
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Until the flush has returned."""
        self._thread.join()
