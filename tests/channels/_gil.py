"""How often a thread woken before each call runs during it: whether a C call keeps the GIL.

On the daemon's loop, a C call that lets go of the GIL lets the journal writer's thread
(woken by the append just queued) take it and commit a smaller group. A call that keeps
the GIL leaves the woken thread waiting for the switch interval, so it runs during
hardly any of the calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def runs_of_a_woken_thread(call: Callable[[], object], times: int) -> int:
    """Call ``call`` ``times`` times, waking a waiting thread before each; how many times
    that thread ran meanwhile."""
    woken, stop = threading.Event(), threading.Event()
    ran = 0

    def writer() -> None:
        nonlocal ran
        while not stop.is_set():
            if woken.wait(1.0):
                woken.clear()
                ran += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(times):
            woken.set()
            call()
    finally:
        stop.set()
        woken.set()
        thread.join()
    return ran
