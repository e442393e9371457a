"""A skill call's wall-clock deadline, by Wasmtime's epoch interruption.

Fuel bounds the instructions a module runs, but a host call (``palyra.http_get``,
a WASI call such as ``poll_oneoff`` sleeping) uses no fuel: a module that loops
over host calls could keep its worker thread for as long as its fuel lasts,
long after the tool's timeout answered the model. So every store also gets an
epoch deadline: the engine's epoch advances every ``tick_s`` while a call runs,
and wasm code past its deadline traps at its next loop head or function entry
(``TrapCode.INTERRUPT``). A host call itself is not interrupted; the host
function bounds its own time by the same deadline.

The clock's thread runs only while calls are running, and ends after a second
without any, so an engine left behind by a rescan keeps no thread.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator

import wasmtime

TICK_S = 0.01
_IDLE_EXIT_S = 1.0


class EpochClock:
    """Advances one engine's epoch every ``tick_s`` while a call is running."""

    def __init__(self, engine: wasmtime.Engine, tick_s: float = TICK_S) -> None:
        self._engine = engine
        self.tick_s = tick_s
        self._cond = threading.Condition()
        self._running = 0
        self._thread: threading.Thread | None = None

    def deadline_ticks(self, seconds: float) -> int:
        """Epoch ticks to wait for ``seconds`` (one more: the first may come at once)."""
        return max(1, math.ceil(seconds / self.tick_s)) + 1

    @contextlib.contextmanager
    def ticking(self) -> Iterator[None]:
        """Keep the epoch advancing for as long as the block runs."""
        with self._cond:
            self._running += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._tick, name="palyra-skill-epochs",
                                                daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1

    def _tick(self) -> None:
        while True:
            with self._cond:
                if self._running == 0:
                    self._cond.wait(_IDLE_EXIT_S)
                    if self._running == 0:
                        self._thread = None
                        return
            time.sleep(self.tick_s)
            self._engine.increment_epoch()
