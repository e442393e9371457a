"""Line input that never blocks the event loop or process exit.

A daemon thread reads stdin and hands lines to the loop; awaiting a line can
be cancelled (e.g. when another client decided the approval we asked about),
and a pending read does not keep the process alive.
"""

from __future__ import annotations

import asyncio
import sys
import threading


class StdinLines:
    """``await lines.get(prompt)`` → the next line, or ``None`` at end of input."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._thread: threading.Thread | None = None

    def _reader(self) -> None:
        for line in sys.stdin:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, line.rstrip("\n"))
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    async def get(self, prompt: str) -> str | None:
        """Print ``prompt`` and wait for one line."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._reader, name="stdin", daemon=True)
            self._thread.start()
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = await self._queue.get()
        if line is None:
            # Keep answering None after EOF.
            self._queue.put_nowait(None)
        return line
