"""The physical floors, measured in the same run as the workload (tool-loop rule 6).

* Disk: a small write plus ``fdatasync`` on the data directory's filesystem
  (what one durable commit through a log costs at least), and a 4 KiB write
  through an ``O_DSYNC`` descriptor (how LMDB writes its meta page, and how a
  preallocated log could commit). One serialized writer that flushes ``f``
  times per step cannot beat ``1 / (f x fdatasync p50)`` steps/s.
* Hashing: SHA-256 throughput on 1 MiB blocks, and the cost of the two hashes
  the chain takes per event (the event's bytes, then a short link preimage),
  Python call overhead included, at the event size the run actually wrote.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from pathlib import Path

_LINK_BYTES = 80  # tag + previous head + position + event hash, rounded up


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e6, 1)


def disk_floors(directory: Path, samples: int = 200) -> dict[str, float]:
    """Latency (µs) of write+fdatasync and of one O_DSYNC 4 KiB write in ``directory``."""
    path = directory / ".floor-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        # Preallocate and settle, so the loop times flushes, not file growth.
        os.pwrite(fd, bytes(1 << 20), 0)
        os.fsync(fd)
        small, page = b"x" * 128, b"y" * 4096
        synced: list[float] = []
        for i in range(samples):
            start = time.perf_counter()
            os.pwrite(fd, small, (i % 256) * 4096)
            os.fdatasync(fd)
            synced.append(time.perf_counter() - start)
        dsync_fd = os.open(path, os.O_WRONLY | os.O_DSYNC)
        try:
            dsync: list[float] = []
            for i in range(samples):
                start = time.perf_counter()
                os.pwrite(dsync_fd, page, (i % 256) * 4096)
                dsync.append(time.perf_counter() - start)
        finally:
            os.close(dsync_fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"fdatasync_p50_us": _p(synced, 0.5), "fdatasync_p90_us": _p(synced, 0.9),
            "dsync_write_p50_us": _p(dsync, 0.5)}


def sha256_mb_s(blocks: int = 64) -> float:
    """SHA-256 throughput in MB/s (10^6 bytes) over 1 MiB blocks."""
    block = os.urandom(1 << 20)
    start = time.perf_counter()
    for _ in range(blocks):
        hashlib.sha256(block).digest()
    return round(blocks * (1 << 20) / 1e6 / (time.perf_counter() - start), 1)


def event_hash_us(event_bytes: int, events: int = 20000) -> float:
    """µs to hash one event of ``event_bytes`` and its link, as the chain does."""
    body, link = os.urandom(max(1, event_bytes)), os.urandom(_LINK_BYTES)
    sha = hashlib.sha256
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(events):
            sha(body).digest()
            sha(link).digest()
        samples.append((time.perf_counter() - start) / events)
    return round(statistics.median(samples) * 1e6, 3)
