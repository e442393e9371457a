"""The tracing exporter process (``python -m palyra.ops.trace_exporter``).

With ``[tracing] enabled`` the daemon starts this process beside it
(:class:`~palyra.ops.trace_process.TraceExporterProcess`). It opens the data
dir's journal read-only, follows it from the position it is given, folds the
events into GenAI spans and sends them through the OpenTelemetry SDK's batch
processor and OTLP/HTTP exporter. Building the SDK spans and encoding them as
OTLP protobuf are most of tracing's CPU; here they are off the daemon's
interpreter, which only wrote the journal it would have written anyway.

It stops when its stdin reaches end of file, after one last read to the
journal's head and a flush: the daemon closes that pipe once its journal is
closed (so the runs it parked are traced too), and the kernel closes it when
the daemon dies. SIGTERM and SIGINT are ignored: a Ctrl-C in a terminal and a
service manager's stop reach the whole process group at once, and the exporter
must outlast the daemon's own drain. It runs ``--nice`` steps below the daemon's
priority: under CPU contention the daemon's steps go first and the spans follow,
read from the journal, which holds them until they are sent.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from palyra.journal import JournalConfig, JournalStore
from palyra.ops.config import TracingConfig
from palyra.ops.trace_follower import StoreFollower
from palyra.ops.tracing import otlp_sink

POLL_EVERY_S = 0.2
_LAST_PAGES = 1_000_000  # the final read goes to the head


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m palyra.ops.trace_exporter",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--after", type=int, required=True,
                        help="trace events after this journal position")
    parser.add_argument("--parent", type=int, default=0,
                        help="exit when this pid is no longer the parent")
    parser.add_argument("--endpoint", default="", help="OTLP/HTTP traces URL; empty: dropped")
    parser.add_argument("--sample-ratio", type=float, default=1.0)
    parser.add_argument("--service-name", default="palyra")
    parser.add_argument("--export-timeout", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=POLL_EVERY_S)
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness to add to this process's (the daemon's steps go first)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = TracingConfig(enabled=True, otlp_endpoint=args.endpoint,
                           sample_ratio=args.sample_ratio, service_name=args.service_name,
                           export_timeout_s=args.export_timeout)
    if args.nice > 0:
        # Background work with the journal as its buffer: under contention the
        # daemon's steps go first, and the spans follow a little later.
        with contextlib.suppress(OSError):
            os.nice(args.nice)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    threading.Thread(target=_stop_at_eof, args=(stopping,), name="stdin-eof",
                     daemon=True).start()
    store = JournalStore.open(args.data_dir, config=JournalConfig(readonly=True))
    sink = otlp_sink(config)
    follower = StoreFollower(store, sink, args.after)
    try:
        while not stopping.wait(args.every):
            follower.poll()
            if args.parent and os.getppid() != args.parent:
                break  # the daemon is gone (its pipe's end may live on in another process)
        follower.poll(max_pages=_LAST_PAGES)
    finally:
        sink.shutdown()  # the batch still queued goes out
        store.close()
    return 0


def _stop_at_eof(stopping: threading.Event) -> None:
    """Set ``stopping`` once the daemon closes our stdin (or dies)."""
    with contextlib.suppress(OSError, ValueError):
        while sys.stdin.buffer.read(4096):
            pass  # nothing is sent on this pipe: it only closes
    stopping.set()


if __name__ == "__main__":
    sys.exit(main())
