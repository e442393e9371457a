"""Loaded by the interpreter of a daemon the bench starts (``bench/_site`` is put first on its PYTHONPATH).

When ``PALYRA_BENCH_PROBE`` names a socket path, the daemon counts betterproto2
messages from start-up and answers :func:`bench.probe.snapshot` on that socket.
Any other process with this directory on its path is left untouched.
"""

import os

if os.environ.get("PALYRA_BENCH_PROBE"):
    from bench import probe

    probe.serve(os.environ["PALYRA_BENCH_PROBE"])
